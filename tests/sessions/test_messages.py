"""GET /messages, GET /messages/page (keyset), POST /messages/sync (spec 004 §消息历史)."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest

from sessions.models import ChatMessage, Session

pytestmark = pytest.mark.django_db


def _seed(session_id: str, count: int, *, same_instant: bool = False) -> None:
    base = datetime(2025, 1, 1, tzinfo=dt_timezone.utc)
    ChatMessage.objects.bulk_create([
        ChatMessage(session_id=session_id, message_id=f"m{i:05d}", role="user" if i % 2 else "assistant",
                    content=f"message {i}", created_at=base if same_instant else base + timedelta(milliseconds=i))
        for i in range(count)
    ], batch_size=2000)


def _walk(client, session_id: str, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        url = f"/api/sessions/{session_id}/messages/page?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = client.get(url).json()
        seen = [m["id"] for m in body["items"]] + seen
        cursor = body["nextCursor"]
        if cursor is None:
            return seen


def test_page_walks_ten_thousand_messages_backwards_without_gaps_or_duplicates(client, session):
    _seed(session["id"], 10_000)
    ids = _walk(client, session["id"], limit=500)
    assert ids == [f"m{i:05d}" for i in range(10_000)]


def test_page_is_exact_when_many_rows_share_a_timestamp(client, session):
    _seed(session["id"], 250, same_instant=True)
    assert _walk(client, session["id"], limit=80) == [f"m{i:05d}" for i in range(250)]


def test_page_is_stable_under_inserts(client, session):
    _seed(session["id"], 100)
    first = client.get(f"/api/sessions/{session['id']}/messages/page?limit=30").json()
    assert [m["id"] for m in first["items"]] == [f"m{i:05d}" for i in range(70, 100)]
    # new messages arrive after the first page was read
    ChatMessage.objects.create(session_id=session["id"], message_id="late", role="user", content="late")
    second = client.get(f"/api/sessions/{session['id']}/messages/page?limit=30&cursor={first['nextCursor']}").json()
    assert [m["id"] for m in second["items"]] == [f"m{i:05d}" for i in range(40, 70)]


def test_page_defaults_and_limits(client, session):
    _seed(session["id"], 600)
    default = client.get(f"/api/sessions/{session['id']}/messages/page").json()
    assert len(default["items"]) == 80 and default["items"][-1]["id"] == "m00599"
    capped = client.get(f"/api/sessions/{session['id']}/messages/page?limit=9999").json()
    assert len(capped["items"]) == 500
    assert client.get(f"/api/sessions/{session['id']}/messages/page?limit=abc").status_code == 400


def test_page_short_history_has_null_cursor(client, session):
    _seed(session["id"], 3)
    body = client.get(f"/api/sessions/{session['id']}/messages/page?limit=10").json()
    assert [m["id"] for m in body["items"]] == ["m00000", "m00001", "m00002"] and body["nextCursor"] is None


@pytest.mark.parametrize("cursor", ["garbage", "eyJ2Ijo5LCJ0IjoiMjAyNSIsImkiOjF9", "%00"])
def test_page_rejects_foreign_cursors(client, session, cursor):
    response = client.get(f"/api/sessions/{session['id']}/messages/page?cursor={cursor}")
    assert response.status_code == 400 and response.json()["code"] == "invalid_cursor"


def test_messages_full_list_is_flat_and_ascending(client, session):
    ChatMessage.objects.create(session_id=session["id"], message_id="a", role="assistant", kind="story", content="Rain.",
                               turn_id="turn-1", metadata={"runtimeId": "teller", "segments": [{"kind": "narration", "text": "Rain."}]})
    ChatMessage.objects.create(session_id=session["id"], message_id="b", role="user", content="Look",
                               metadata={"actions": [{"kind": "say", "text": "Look"}]})
    items = client.get(f"/api/sessions/{session['id']}/messages").json()["items"]
    assert [m["id"] for m in items] == ["a", "b"]
    assert items[0]["kind"] == "story" and items[0]["turnId"] == "turn-1" and items[0]["runtimeId"] == "teller"
    assert items[0]["segments"] == [{"kind": "narration", "text": "Rain."}] and items[0]["sessionId"] == session["id"]
    assert items[1]["actions"] == [{"kind": "say", "text": "Look"}]


def test_sync_is_idempotent_by_stable_id(client, session):
    url = f"/api/sessions/{session['id']}/messages/sync"
    batch = {"messages": [
        {"id": "s1", "role": "user", "content": "hello", "createdAt": "2025-01-15T10:00:00.000Z", "turnId": "t1"},
        {"id": "s2", "role": "assistant", "content": "hi", "runtimeId": "teller", "block": {"type": "text"}},
    ]}
    assert client.post(url, batch, content_type="application/json").json() == {"ok": True, "appended": 2}
    assert client.post(url, batch, content_type="application/json").json() == {"ok": True, "appended": 0}
    assert ChatMessage.objects.filter(session_id=session["id"]).count() == 2
    stored = ChatMessage.objects.get(message_id="s1")
    assert stored.turn_id == "t1" and stored.created_at == datetime(2025, 1, 15, 10, tzinfo=dt_timezone.utc)
    assert ChatMessage.objects.get(message_id="s2").metadata == {"runtimeId": "teller", "block": {"type": "text"}}
    # without ids every submission appends
    anonymous = {"messages": [{"role": "user", "content": "again"}]}
    client.post(url, anonymous, content_type="application/json")
    client.post(url, anonymous, content_type="application/json")
    assert ChatMessage.objects.filter(session_id=session["id"], content="again").count() == 2


def test_sync_rolls_back_the_whole_batch_on_a_bad_message(client, session):
    url = f"/api/sessions/{session['id']}/messages/sync"
    response = client.post(url, {"messages": [{"id": "ok", "role": "user", "content": "x"},
                                              {"id": "bad", "role": "wizard", "content": "y"}]}, content_type="application/json")
    assert response.status_code == 400
    assert ChatMessage.objects.count() == 0
    assert client.post(url, {"nope": []}, content_type="application/json").status_code == 400


def test_sync_needs_an_active_session(client, session):
    Session.objects.filter(pk=session["id"]).update(status="paused")
    response = client.post(f"/api/sessions/{session['id']}/messages/sync", {"messages": []}, content_type="application/json")
    assert response.status_code == 409 and response.json()["code"] == "session_not_active"
