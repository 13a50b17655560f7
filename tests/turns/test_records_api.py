"""Trace, turn, runtime-output and interaction-record reads (spec 004 §Trace 调试, §统一翻译层)."""
from __future__ import annotations

import pytest

from sessions.models import TurnMessage
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import InteractionRecord, RuntimeOutput, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db


def _events(session_id: str, count: int, turn_every: int = 10) -> None:
    TraceEvent.objects.bulk_create([
        TraceEvent(session_id=session_id, trace_id=f"tr-{i // turn_every}", turn_id=f"turn-{i // turn_every}", seq=i % turn_every,
                   type="runtime.started", runtime_id="teller", plugin_id="teller",
                   payload={"runtimeId": "teller", "requestId": "req-1", "durationMs": 1500 if i == 0 else 5})
        for i in range(count)
    ])


def test_traces_window_shape_and_cursor(client, session):
    sid = session["id"]
    _events(sid, 30)
    body = client.get(f"/api/traces/{sid}").json()
    assert body["count"] == 30 and body["nextCursor"] is None and body["discovery"]["sessionId"] == sid
    first = body["events"][0]
    assert first["requestId"] == "req-1" and first["flowId"] == first["traceId"] == "tr-0" and first["eventOrder"] == 0
    assert first["diagnostic"]["severity"] == "warning" and first["diagnostic"]["warning"] == {"code": "slow", "thresholdMs": 1000}
    grouped = client.get(f"/api/traces/{sid}/turns").json()["turns"]
    assert [(t["turnId"], t["eventCount"]) for t in grouped] == [("turn-0", 10), ("turn-1", 10), ("turn-2", 10)]


def test_trace_turns_page_walks_back(client, session):
    sid = session["id"]
    _events(sid, 25)
    page = client.get(f"/api/traces/{sid}/turns/page?limit=10").json()
    assert [t["turnId"] for t in page["turns"]] == ["turn-1", "turn-2"] and page["turns"][0]["eventCount"] == 5
    older = client.get(f"/api/traces/{sid}/turns/page?limit=10&cursor={page['nextCursor']}").json()
    assert "discovery" not in older and sum(t["eventCount"] for t in older["turns"]) == 10
    last = client.get(f"/api/traces/{sid}/turns/page?limit=10&cursor={older['nextCursor']}").json()
    assert last["nextCursor"] is None and sum(t["eventCount"] for t in last["turns"]) == 5
    bad = client.get(f"/api/traces/{sid}?cursor=nonsense")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor"


def test_session_turns_lists_turn_results(client, session):
    sid = session["id"]
    TurnResult.objects.create(session_id=sid, turn_id="t1", origin="player", committed=True,
                              summary={"runtimeResults": [{"runtimeId": "teller", "status": "success", "output": "x"}]})
    TurnResult.objects.create(session_id=sid, turn_id="t2", origin="continuation", committed=False, abort_reason="aborted-by-player")
    items = client.get(f"/api/sessions/{sid}/turns").json()["items"]
    assert [(i["turnId"], i["commitStatus"], i["origin"]) for i in items] == [
        ("t1", "committed", "player"), ("t2", "failed", "continuation")]
    assert items[0]["runtimeResults"][0]["output"] == "x" and items[1]["abortReason"] == "aborted-by-player"
    assert len(client.get(f"/api/sessions/{sid}/turns?limit=1").json()["items"]) == 1


def test_runtime_outputs_filters_single_and_full_prompt(client, session):
    sid = session["id"]
    TurnMessage.objects.create(session_id=sid, turn_id="t1", role="user", content={"content": "hello"})
    TurnMessage.objects.create(session_id=sid, turn_id="t1", role="assistant", content={"content": "hi"}, runtime_id="teller")
    TurnMessage.objects.create(session_id=sid, turn_id="t2", role="user", content={"content": "later"})
    RuntimeOutput.objects.create(session_id=sid, output_id="o1", turn_id="t1", plugin_id="teller", runtime_id="teller",
                                 status="success", output={"results": [{"text": "hi"}], "metaData": {"turn": 1}})
    RuntimeOutput.objects.create(session_id=sid, output_id="o2", turn_id="t2", plugin_id="dims", runtime_id="dims/tracker",
                                 status="success", output={"text": "ok"})
    items = client.get(f"/api/sessions/{sid}/runtime-outputs").json()["items"]
    assert [i["id"] for i in items] == ["o2", "o1"]
    assert [i["id"] for i in client.get(f"/api/sessions/{sid}/runtime-outputs?pluginId=teller").json()["items"]] == ["o1"]
    assert [i["id"] for i in client.get(f"/api/sessions/{sid}/runtime-outputs?runtimeId=dims/tracker").json()["items"]] == ["o2"]
    assert len(client.get(f"/api/sessions/{sid}/runtime-outputs?limit=1").json()["items"]) == 1
    assert client.get(f"/api/sessions/{sid}/runtime-outputs?since=2999-01-01T00:00:00Z").json()["items"] == []
    one = client.get(f"/api/sessions/{sid}/runtime-outputs/o1").json()
    assert one["results"] == [{"text": "hi"}] and one["metaData"]["turn"] == 1 and one["sessionId"] == sid
    prompt = client.get(f"/api/sessions/{sid}/runtime-outputs/o1/full-prompt").json()
    assert [(m["role"], m["content"]) for m in prompt["messages"]] == [("user", "hello"), ("assistant", "hi")]
    missing = client.get(f"/api/sessions/{sid}/runtime-outputs/zzz")
    assert missing.status_code == 404


def test_interaction_records_list_external_inputs_only_with_filters(client, session):
    # given: two input records and a form the turn asked (a request is not an external input)
    sid = session["id"]
    InteractionRecord.objects.create(session_id=sid, interaction_id="r1", turn_id="t1", type="form-submit", plugin_id="teller",
                                     status="input", spec={"source": "player", "channel": "web", "payload": {"values": {"name": "Ada"}}})
    InteractionRecord.objects.create(session_id=sid, interaction_id="r2", turn_id="t2", type="message",
                                     status="input", spec={"source": "player", "channel": "web", "payload": {"kind": "say", "text": "Hi"}})
    InteractionRecord.objects.create(session_id=sid, interaction_id="hero", turn_id="t0", type="form", plugin_id="teller")
    # when / then
    items = client.get(f"/api/sessions/{sid}/interaction-records").json()["items"]
    assert [i["id"] for i in items] == ["r2", "r1"]
    forms = client.get(f"/api/sessions/{sid}/interaction-records?type=form-submit").json()["items"]
    assert [(i["id"], i["payload"], i["source"], i["channel"], i["targetPluginId"]) for i in forms] == [
        ("r1", {"values": {"name": "Ada"}}, "player", "web", "teller")]
    assert [i["id"] for i in client.get(f"/api/sessions/{sid}/interaction-records?targetPluginId=teller").json()["items"]] == ["r1"]
    assert client.get(f"/api/sessions/{sid}/interaction-records?source=external-api").json()["items"] == []
