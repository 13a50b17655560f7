"""Snapshots, restore and fork over HTTP (spec 004 §Snapshot / Fork)."""
from __future__ import annotations

import json

import pytest
from django.test import override_settings

from plugins_app.models import PluginData
from sessions.models import Character, ChatMessage, DimensionValue, Session, Snapshot, TurnMessage, World
from turns.snapshots import fork_rate_limiter
from tests.sessions.support import OPERATOR_TOKEN, catalog, demo_tier, session, session_create  # noqa: F401
from sessions.locks import session_lock
from turns.models import SessionEvent, Suspension

pytestmark = pytest.mark.django_db

JSON = "application/json"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture(autouse=True)
def _fresh_fork_budget():
    fork_rate_limiter.reset()
    yield
    fork_rate_limiter.reset()


def _sync(client, sid, *messages, **headers):
    body = {"messages": [{"id": mid, "role": "user", "content": text} for mid, text in messages]}
    response = client.post(f"/api/sessions/{sid}/messages/sync", body, content_type=JSON, **headers)
    assert response.status_code == 200, response.content


def _snapshot(client, sid, **headers) -> dict:
    response = client.post(f"/api/sessions/{sid}/snapshots", {}, content_type=JSON, **headers)
    assert response.status_code == 201, response.content
    return response.json()


def _fork(client, sid, snapshot_id, **headers):
    return client.post(f"/api/sessions/{sid}/fork", {"fromSnapshotId": snapshot_id}, content_type=JSON, **headers)


def _state(client, sid) -> dict:
    """Everything a client can read of a session's durable state, without write timestamps."""
    def strip(items, *keys):
        return [{k: v for k, v in item.items() if k not in keys} for item in items]

    session = client.get(f"/api/sessions/{sid}").json()
    return {
        "session": {k: session[k] for k in ("status", "phase", "completedPlayerTurns", "setupRuntimes", "locale",
                                            "activePlugins", "runtimeModelOverrides", "seats", "autoAdvanceLimit")},
        "characters": strip(client.get(f"/api/sessions/{sid}/characters").json()["items"], "updatedAt", "sessionId"),
        "lorebook": strip(client.get(f"/api/sessions/{sid}/lorebook").json()["items"], "updatedAt", "createdAt", "sessionId"),
        "pluginData": strip(client.get(f"/api/sessions/{sid}/plugin-data").json()["items"], "updatedAt"),
        "messages": strip(client.get(f"/api/sessions/{sid}/messages").json()["items"], "sessionId"),
        "dimensions": client.get(f"/api/sessions/{sid}/view").json()["dimensions"],
    }


def _put_data(client, sid, key, value):
    response = client.put(f"/api/sessions/{sid}/plugin-data/teller/notes/{key}", {"value": value}, content_type=JSON)
    assert response.status_code == 200, response.content


# --- create / read / list / delete ---------------------------------------------------------------


def test_create_snapshot_returns_the_player_visible_record(client, session):
    # given: visible and hidden plugin data, a message, a pending suspension
    sid = session["id"]
    _put_data(client, sid, "mood", {"calm": True})
    row = Session.objects.get(pk=sid)
    PluginData.objects.create(session=row, plugin_id="teller", namespace="_hidden.secrets", key="k", value="hidden")
    _sync(client, sid, ("m1", "hello"))
    TurnMessage.objects.create(session=row, turn_id="turn-1", role="user", content={"text": "hello"})
    Suspension.objects.create(session=row, suspension_id="susp_a", turn_id="turn-1", plugin_id="teller",
                              runtime_id="teller/main", resume_schema={"type": "object"},
                              payload={"pendingContinuation": "PROMPT TEXT"})

    # when
    response = client.post(f"/api/sessions/{sid}/snapshots", {"label": "before the storm"}, content_type=JSON)

    # then
    assert response.status_code == 201
    body = response.json()
    stored = Snapshot.objects.get()
    assert (body["id"], body["sessionId"], body["kind"], body["parentId"], body["label"]) == (
        stored.snapshot_id, sid, "manual", None, "before the storm")
    payload = body["payload"]
    assert payload["schemaVersion"] == 3
    assert payload["session"]["completedPlayerTurns"] == 0 and payload["session"]["locale"] == "en-US"
    assert [c["id"] for c in payload["characters"]] == ["hero", "npc-bell"]
    assert [e["id"] for e in payload["lorebookEntries"]] == ["harbour", "bell"]
    assert payload["pluginData"] == [{"pluginId": "teller", "namespace": "notes", "key": "mood", "value": {"calm": True}}]
    assert payload["suspensions"] == [{"suspensionId": "susp_a", "turnId": "turn-1", "pluginId": "teller",
                                       "runtimeId": "teller/main", "resumeSchema": {"type": "object"},
                                       "createdAt": payload["suspensions"][0]["createdAt"]}]
    assert payload["dimensions"][0]["id"] == "tide" and payload["dimensions"][0]["value"] == {"level": 3}
    assert payload["displayMessagesBoundary"]["lastMessageId"] == "m1"
    assert payload["messagesCursor"] == str(TurnMessage.objects.get().pk)
    for key in ("runtimeExports", "sessionSummaries", "compactedMessageSummaryIds"):
        assert key in payload
    # private fields and kernel data never leave the server; the store keeps them
    text = json.dumps(body)
    for private in (row.owner_token_hash, row.incarnation, row.event_epoch, "PROMPT TEXT", "hidden"):
        assert private not in text
    assert any(r["namespace"] == "_hidden.secrets" for r in stored.data["pluginData"])
    assert stored.data["suspensions"][0]["payload"] == {"pendingContinuation": "PROMPT TEXT"}
    event = SessionEvent.objects.get(session_id=sid, type="state.snapshot.created")
    assert (event.topic, event.payload["snapshotId"], event.payload["kind"]) == ("state", stored.snapshot_id, "manual")


def test_snapshot_routes_answer_not_found_and_validation(client, session):
    sid = session["id"]
    other = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    foreign = _snapshot(client, other["id"])

    assert client.post("/api/sessions/nope/snapshots", {}, content_type=JSON).json()["code"] == "session_not_found"
    assert client.get("/api/sessions/nope/snapshots").status_code == 404
    missing = client.get(f"/api/sessions/{sid}/snapshots/{foreign['id']}")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert client.delete(f"/api/sessions/{sid}/snapshots/{foreign['id']}").json()["code"] == "not_found"
    restore = client.post(f"/api/sessions/{sid}/snapshots/{foreign['id']}/restore", {}, content_type=JSON)
    assert restore.status_code == 404 and restore.json()["code"] == "not_found"
    long_label = client.post(f"/api/sessions/{sid}/snapshots", {"label": "x" * 257}, content_type=JSON)
    assert long_label.status_code == 400 and long_label.json()["code"] == "invalid_label"
    bad_cursor = client.get(f"/api/sessions/{sid}/snapshots?cursor=garbage")
    assert bad_cursor.status_code == 400 and bad_cursor.json()["code"] == "invalid_cursor"
    assert Snapshot.objects.filter(session_id=sid).count() == 0


@pytest.mark.parametrize("limit", ["%C2%B2", "%D9%A1", "%EF%BC%91"])
def test_list_limit_accepts_ascii_digits_only(client, session, limit):
    response = client.get(f"/api/sessions/{session['id']}/snapshots?limit={limit}")

    assert response.status_code == 400 and response.json()["code"] == "invalid_query"


def test_list_pages_from_newest_without_payloads(client, session):
    sid = session["id"]
    ids = [_snapshot(client, sid)["id"] for _ in range(3)]

    first = client.get(f"/api/sessions/{sid}/snapshots?limit=2").json()
    second = client.get(f"/api/sessions/{sid}/snapshots?limit=2&cursor={first['nextCursor']}").json()

    assert [i["id"] for i in first["items"]] == ids[1:]
    assert [i["id"] for i in second["items"]] == ids[:1] and second["nextCursor"] is None
    item = first["items"][0]
    assert set(item) == {"id", "sessionId", "turnId", "kind", "parentId", "createdAt", "payloadSize"}
    stored = Snapshot.objects.get(snapshot_id=item["id"])
    assert item["payloadSize"] == len(json.dumps(stored.data, ensure_ascii=False, separators=(",", ":")).encode())


def test_delete_removes_only_that_snapshot(client, session):
    sid = session["id"]
    keep, gone = _snapshot(client, sid), _snapshot(client, sid)

    response = client.delete(f"/api/sessions/{sid}/snapshots/{gone['id']}")

    assert response.status_code == 200 and response.json() == {"ok": True, "snapshotId": gone["id"]}
    assert client.get(f"/api/sessions/{sid}/snapshots/{gone['id']}").status_code == 404
    assert list(Snapshot.objects.values_list("snapshot_id", flat=True)) == [keep["id"]]


# --- restore -------------------------------------------------------------------------------------


def test_restore_puts_back_exactly_the_captured_state(client, session):
    # given: a snapshot of a session with data and history
    sid = session["id"]
    _put_data(client, sid, "mood", {"calm": True})
    _sync(client, sid, ("m1", "first"), ("m2", "second"))
    row = Session.objects.get(pk=sid)
    TurnMessage.objects.create(session=row, turn_id="turn-1", role="user", content={"text": "first"})
    before = _state(client, sid)
    snapshot = _snapshot(client, sid)

    # when: the session moves on, then is restored
    client.post(f"/api/sessions/{sid}/characters", {"id": "hero", "name": "Changed Hero"}, content_type=JSON)
    client.post(f"/api/sessions/{sid}/characters", {"id": "stranger", "name": "Stranger"}, content_type=JSON)
    client.post(f"/api/sessions/{sid}/lorebook", {"id": "new-lore", "content": "later"}, content_type=JSON)
    client.delete(f"/api/sessions/{sid}/lorebook/harbour")
    _put_data(client, sid, "mood", {"calm": False})
    _put_data(client, sid, "extra", 1)
    _sync(client, sid, ("m3", "third"))
    client.patch(f"/api/sessions/{sid}", {"runtimeModelOverrides": {"teller": "big"}, "autoAdvanceLimit": 7},
                 content_type=JSON)
    DimensionValue.objects.filter(session_id=sid).update(value={"level": 9}, version=2)
    Session.objects.filter(pk=sid).update(completed_player_turns=5, phase="playing")
    TurnMessage.objects.create(session=row, turn_id="turn-2", role="user", content={"text": "third"})
    assert _state(client, sid) != before
    response = client.post(f"/api/sessions/{sid}/snapshots/{snapshot['id']}/restore", {}, content_type=JSON)

    # then
    assert response.status_code == 200
    assert response.json() == {"ok": True, "sessionId": sid, "snapshotId": snapshot["id"], "completedPlayerTurns": 0}
    assert _state(client, sid) == before
    assert list(TurnMessage.objects.filter(session_id=sid).values_list("turn_id", flat=True)) == ["turn-1"]
    event = SessionEvent.objects.get(session_id=sid, type="state.snapshot.restored")
    assert (event.topic, event.payload) == ("state", {"snapshotId": snapshot["id"], "completedPlayerTurns": 0})


def test_restore_keeps_job_bookkeeping_rows(client, session):
    sid = session["id"]
    snapshot = _snapshot(client, sid)
    PluginData.objects.create(session_id=sid, plugin_id="teller", namespace="_runtime_jobs", key="job-1", value={"s": 1})

    client.post(f"/api/sessions/{sid}/snapshots/{snapshot['id']}/restore", {}, content_type=JSON)

    assert PluginData.objects.get(session_id=sid).key == "job-1"


def test_restore_refusals_write_nothing(client, session, settings):
    sid = session["id"]
    _sync(client, sid, ("m1", "first"))
    snapshot = _snapshot(client, sid)
    client.post(f"/api/sessions/{sid}/characters", {"id": "hero", "name": "Changed Hero"}, content_type=JSON)
    url = f"/api/sessions/{sid}/snapshots/{snapshot['id']}/restore"

    # busy: a turn holds the session lock
    settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 0
    with session_lock(sid):
        busy = client.post(url, {}, content_type=JSON)
    assert busy.status_code == 503 and busy.json()["code"] == "session_busy"

    # the chat boundary message is gone
    ChatMessage.objects.filter(session_id=sid, message_id="m1").delete()
    _sync(client, sid, ("m2", "second"))
    gone = client.post(url, {}, content_type=JSON)
    assert gone.status_code == 409 and gone.json()["code"] == "cursor_missing"

    # ended is terminal
    Session.objects.filter(pk=sid).update(status="ended")
    ended = client.post(url, {}, content_type=JSON)
    assert ended.status_code == 409 and ended.json()["code"] == "session_ended"

    assert Character.objects.get(session_id=sid, character_id="hero").name == "Changed Hero"
    assert list(ChatMessage.objects.filter(session_id=sid).values_list("message_id", flat=True)) == ["m2"]
    assert not SessionEvent.objects.filter(session_id=sid, type="state.snapshot.restored").exists()


# --- fork ----------------------------------------------------------------------------------------


def test_fork_creates_an_independent_session_from_the_snapshot(client, session):
    # given: a snapshot, after which the parent moves on
    sid = session["id"]
    _put_data(client, sid, "mood", {"calm": True})
    _sync(client, sid, ("m1", "first"), ("m2", "second"))
    PluginData.objects.create(session_id=sid, plugin_id="teller", namespace="_runtime_jobs", key="job", value={})
    Session.objects.filter(pk=sid).update(status="ended")
    snapshot = _snapshot(client, sid)
    captured = _state(client, sid)
    Session.objects.filter(pk=sid).update(status="active")
    _sync(client, sid, ("m3", "after the snapshot"))

    # when
    response = _fork(client, sid, snapshot["id"])

    # then: a new session with the snapshot's state and history up to the boundary
    assert response.status_code == 201
    body = response.json()
    child_id = body["sessionId"]
    assert child_id.startswith("tide-test-") and len(child_id) == len("tide-test-") + 8 and child_id != sid
    assert (body["parentSessionId"], body["fromSnapshotId"], body["missingMediaCount"]) == (sid, snapshot["id"], 0)
    assert body["ownerToken"]
    child_state = _state(client, child_id)
    messages = child_state.pop("messages")
    assert [(m["role"], m["content"]) for m in messages] == [("user", "first"), ("user", "second")]
    assert {m["id"] for m in messages}.isdisjoint({"m1", "m2"})
    expected = dict(captured)
    expected.pop("messages")
    expected["session"] = {**captured["session"], "status": "paused"}  # ended resumes as paused
    assert child_state == expected
    child = Session.objects.get(pk=child_id)
    parent = Session.objects.get(pk=sid)
    assert child.incarnation != parent.incarnation and child.event_epoch != parent.event_epoch
    assert child.owner_token_hash != parent.owner_token_hash
    assert not PluginData.objects.filter(session=child, namespace="_runtime_jobs").exists()
    fork_snapshot = Snapshot.objects.get(session=child)
    assert (fork_snapshot.snapshot_id, fork_snapshot.kind, fork_snapshot.parent_snapshot_id) == (
        body["forkSnapshotId"], "fork", snapshot["id"])
    listed = client.get(f"/api/sessions/{child_id}/snapshots").json()["items"]
    assert [(i["kind"], i["parentId"]) for i in listed] == [("fork", snapshot["id"])]
    forked = SessionEvent.objects.get(session_id=sid, type="session.forked")
    assert forked.topic == "session" and forked.payload["sessionId"] == child_id
    assert SessionEvent.objects.filter(session_id=child_id, type="state.snapshot.created").count() == 1

    # and: once resumed, later writes to either side never reach the other
    assert client.patch(f"/api/sessions/{child_id}", {"status": "active"}, content_type=JSON).status_code == 200
    client.post(f"/api/sessions/{child_id}/characters", {"id": "hero", "name": "Child Hero"}, content_type=JSON)
    _put_data(client, child_id, "mood", "child")
    _sync(client, child_id, ("c1", "child only"))
    client.post(f"/api/sessions/{sid}/characters", {"id": "npc-bell", "name": "Parent Bell"}, content_type=JSON)
    hero_name = next(c["name"] for c in captured["characters"] if c["id"] == "hero")
    assert Character.objects.get(session_id=sid, character_id="hero").name == hero_name
    assert Character.objects.get(session_id=child_id, character_id="npc-bell").name != "Parent Bell"
    assert PluginData.objects.get(session_id=sid, namespace="notes").value == {"calm": True}
    assert not ChatMessage.objects.filter(session_id=sid, content="child only").exists()


def test_fork_of_a_fork_snapshot_chains(client, session):
    sid = session["id"]
    first = _fork(client, sid, _snapshot(client, sid)["id"]).json()

    second = _fork(client, first["sessionId"], first["forkSnapshotId"])

    assert second.status_code == 201
    grandchild = second.json()["sessionId"]
    assert Snapshot.objects.get(session_id=grandchild).parent_snapshot_id == first["forkSnapshotId"]


def test_fork_service_without_snapshot_copies_the_current_state(client, session):
    from turns.snapshots import session_fork

    sid = session["id"]
    client.post(f"/api/sessions/{sid}/characters", {"id": "late", "name": "Latecomer"}, content_type=JSON)
    _sync(client, sid, ("m1", "now"))

    result = session_fork(sid)

    child = result.session.id
    assert result.from_snapshot_id is None and result.parent_session_id == sid
    assert sorted(Character.objects.filter(session_id=child).values_list("character_id", flat=True)) == [
        "hero", "late", "npc-bell"]
    assert list(ChatMessage.objects.filter(session_id=child).values_list("content", flat=True)) == ["now"]
    fork_snapshot = Snapshot.objects.get(session_id=child)
    assert (fork_snapshot.snapshot_id, fork_snapshot.parent_snapshot_id) == (result.fork_snapshot_id, "")


def test_fork_refusals_leave_no_child(client, session, settings):
    sid = session["id"]
    snapshot = _snapshot(client, sid)
    sessions_before = Session.objects.count()

    no_body = client.post(f"/api/sessions/{sid}/fork", {}, content_type=JSON)
    assert no_body.status_code == 400 and "fromSnapshotId" in no_body.json()["error"]
    unknown = _fork(client, sid, "no-such-snapshot")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    assert _fork(client, "nope", snapshot["id"]).json()["code"] == "session_not_found"

    settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 0
    with session_lock(sid):
        busy = _fork(client, sid, snapshot["id"])
    assert busy.status_code == 503 and busy.json()["code"] == "session_busy"

    ChatMessage.objects.create(session_id=sid, message_id="late", role="user", content="x")
    snap_with_history = _snapshot(client, sid)
    ChatMessage.objects.filter(session_id=sid, message_id="late").delete()
    gone = _fork(client, sid, snap_with_history["id"])
    assert gone.status_code == 409 and gone.json()["code"] == "cursor_missing"

    World.objects.create(id="tide-test", name="Tide", state=World.STATE_DELETING)
    deleting = _fork(client, sid, snapshot["id"])
    assert deleting.status_code == 409 and deleting.json()["code"] == "world_deleting"

    assert Session.objects.count() == sessions_before


def test_fork_refuses_media_the_parent_was_never_given(client, session, catalog):
    # given: another session owns an image; the parent only mentions its id
    sid = session["id"]
    owner = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    upload = client.post(f"/api/media?sessionId={owner['id']}", data=PNG, content_type="image/png")
    media_id = upload.json()["id"]
    _sync(client, sid, ("m1", f"look: /api/media/{media_id}"))
    snapshot = _snapshot(client, sid)
    sessions_before = Session.objects.count()

    # when
    response = _fork(client, sid, snapshot["id"])

    # then
    assert response.status_code == 403 and response.json()["code"] == "media_reference_forbidden"
    assert Session.objects.count() == sessions_before


def test_fork_references_parent_media_and_counts_missing_files(client, session):
    from media.models import MediaAsset
    from media.selectors import media_path

    sid = session["id"]
    kept = client.post(f"/api/media?sessionId={sid}", data=PNG, content_type="image/png").json()["id"]
    lost = client.post(f"/api/media?sessionId={sid}", data=PNG + b"lost", content_type="image/png").json()["id"]
    _sync(client, sid, ("m1", f"/api/media/{kept}"), ("m2", f"/api/media/{lost}"))
    snapshot = _snapshot(client, sid)
    media_path(lost).unlink()

    response = _fork(client, sid, snapshot["id"])

    assert response.status_code == 201 and response.json()["missingMediaCount"] == 1
    child = response.json()["sessionId"]
    assert list(MediaAsset.objects.filter(session_id=child).values_list("sha256", flat=True)) == [kept]
    token = client.get(f"/api/sessions/{child}/media-token?id={kept}").json()["token"]
    assert client.get(f"/api/media/{kept}?token={token}").status_code == 200


def test_fork_rate_limit_counts_before_the_body_is_checked(client, session):
    sid = session["id"]
    for _ in range(10):
        assert client.post(f"/api/sessions/{sid}/fork", {}, content_type=JSON).status_code == 400

    limited = client.post(f"/api/sessions/{sid}/fork", {}, content_type=JSON)

    assert limited.status_code == 429 and limited.json()["code"] == "rate_limit_exceeded"
    assert 1 <= int(limited["Retry-After"]) <= 61


# --- hosted tiers: owner and operator tokens ----------------------------------------------------


def test_demo_tier_token_rules(client, catalog):
    with override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN):
        parent = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
        sid = parent["id"]
        owner = {"HTTP_AUTHORIZATION": f"Bearer {parent['ownerToken']}"}
        operator = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}"}

        anonymous = client.post(f"/api/sessions/{sid}/snapshots", {}, content_type=JSON)
        assert anonymous.status_code == 401 and anonymous.json()["code"] == "session_owner_required"
        assert client.get(f"/api/sessions/{sid}/snapshots").status_code == 401
        snapshot = _snapshot(client, sid, **owner)
        assert client.get(f"/api/sessions/{sid}/snapshots/{snapshot['id']}", **owner).status_code == 200

        # fork creates a session: the owner token is not enough
        with_owner = _fork(client, sid, snapshot["id"], **owner)
        assert with_owner.status_code == 401 and with_owner.json()["code"] == "operator_token_required"
        assert _fork(client, sid, snapshot["id"]).json()["code"] == "session_owner_required"
        assert _fork(client, "nope", snapshot["id"], **operator).status_code == 404

        forked = _fork(client, sid, snapshot["id"], **operator)
        assert forked.status_code == 201
        child_id, child_token = forked.json()["sessionId"], forked.json()["ownerToken"]
        assert client.get(f"/api/sessions/{child_id}", HTTP_X_SESSION_TOKEN=child_token).status_code == 200
        assert client.get(f"/api/sessions/{child_id}", **owner).status_code == 401
        assert client.get(f"/api/sessions/{sid}", HTTP_X_SESSION_TOKEN=child_token).status_code == 401
        assert "ownerToken" not in client.get(f"/api/sessions/{child_id}", **operator).json()
