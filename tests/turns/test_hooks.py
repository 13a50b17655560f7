"""Plugin hooks at their points (plugins_app.hooks, turns.engine.hooks, sessions.lifecycle): TurnStart,
PreToolUse rewriting and refusing a call (the rewrite reaches the model history), PostToolUse
stopping the queued calls (cancelled), SessionStart / SessionEnd (once) and
session_lifecycle_busy; a community plugin's hooks are skipped until its server code is granted.
The test plugins are in tests/sessions/lantern_support.py (quill: builtin; lantern-bell: community)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from plugins_app.registry import registry_reset
from tests.sessions.lantern_support import bell_install, builtin_dir_with_quill, lantern_uninstall, marks_clear, marks_of
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import TraceEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quill(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_quill(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)
    for name in ("quill-seen.json", "quill-slow"):
        (home / name).unlink(missing_ok=True)
    marks_clear()
    registry_reset()
    yield home
    lantern_uninstall()
    marks_clear()
    (home / "quill-slow").unlink(missing_ok=True)


def _events(home: Path, event: str, session_id: str) -> list[str]:
    path = home / "quill-events" / f"{event}-{session_id}"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_pre_tool_use_rewrites_and_refuses_and_post_tool_use_stops_the_batch(api, quill):
    # given a session whose quill runtime asks for three calls in one reply
    session = session_make(plugins=("narrator", "quill"), characters=[("hero", "Hero", "player")])
    # when a turn runs
    frames = stream_read(post_action(api, action_body(session.id)))
    # then it committed and every hook left its trace
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    types = [f["type"] for f in frames]
    assert "hook.fired" in types and "hook.aborted" in types and "hook.rewrote" not in types  # rewrote is stored only
    fired = [f["payload"] for f in frames if f["type"] == "hook.fired"]
    assert {"event": "TurnStart", "pluginId": "quill", "action": "continue"} in fired
    rows = list(TraceEvent.objects.filter(session=session, type__startswith="hook.").order_by("seq").values_list("type", "payload"))
    aborted = [p for t, p in rows if t == "hook.aborted"]
    assert [(a["event"], a["tool"]) for a in aborted] == [("PreToolUse", "get-character"), ("PostToolUse", "get-character")]
    assert aborted[0]["reason"] == "secret is off limits; ask about the hero instead"
    [rewrote] = [p for t, p in rows if t == "hook.rewrote"]
    assert rewrote["before"] == {"tool": "get-character", "input": {"id": "nobody"}}
    assert rewrote["after"] == {"tool": "get-character", "input": {"id": "hero"}}
    # the three calls: refused (not run), the rewritten one ran, the queued one was cancelled
    failed = {f["payload"]["callId"]: f["payload"]["error"]["code"] for f in frames if f["type"] == "tool.failed"}
    completed = [f["payload"] for f in frames if f["type"] == "tool.completed"]
    assert sorted(failed.values()) == ["cancelled", "refused"]
    assert [c["tool"] for c in completed] == ["get-character"]
    assert completed[0]["output"]["summary"].startswith("Character: Hero [player] hero")
    # and the model's next call saw the rewritten call and the refusal in its history
    messages = json.loads((quill / "quill-seen.json").read_text(encoding="utf-8"))
    assistant = next(m for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
    assert [json.loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"] for c in assistant["tool_calls"]] == [
        {"id": "secret"}, {"id": "hero"}, {}]
    tools = [m for m in messages if m["role"] == "tool"]
    assert "secret is off limits" in tools[0]["content"] and "refused" in tools[0]["content"]
    assert "cancelled" in tools[2]["content"]
    from turns.models import TurnResult

    turn = TurnResult.objects.get(session=session)
    quill_result = next(r for r in turn.summary["runtimeResults"] if r["runtimeId"] == "quill")
    assert quill_result["status"] == "success"


def test_session_start_runs_on_creation_and_session_end_once_on_delete(api, quill):
    created = api.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["quill"]},
                       content_type="application/json")
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    assert _events(quill, "SessionStart", session_id) == ["-"]
    assert "lifecycleHook" not in created.json()["metadata"]
    # ending runs SessionEnd, the delete after it does not run it again
    ended = api.patch(f"/api/sessions/{session_id}", {"status": "ended"}, content_type="application/json")
    assert ended.status_code == 200 and "sessionEndFired" not in ended.json()["metadata"]
    assert api.delete(f"/api/sessions/{session_id}").status_code == 200
    assert _events(quill, "SessionEnd", session_id) == ["ended"]


def test_session_end_runs_on_delete(api, quill):
    created = api.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["quill"]},
                       content_type="application/json").json()
    assert api.delete(f"/api/sessions/{created['id']}").status_code == 200
    assert api.delete(f"/api/sessions/{created['id']}").status_code == 404
    assert _events(quill, "SessionEnd", created["id"]) == ["deleted"]


def test_lifecycle_changes_wait_for_a_running_session_start(api, quill):
    # given a SessionStart hook that takes a while
    (quill / "quill-slow").write_text("1", encoding="utf-8")
    from django.test import Client

    results: dict[str, int] = {}

    def create():
        response = Client().post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["quill"],
                                                   "id": "slow-start"}, content_type="application/json")
        results["create"] = response.status_code

    worker = threading.Thread(target=create)
    worker.start()
    deadline = time.monotonic() + 10
    while not (quill / "quill-events" / "started-slow-start").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    # when the session is deleted or its status changed while the hook runs
    deleted = api.delete("/api/sessions/slow-start")
    patched = api.patch("/api/sessions/slow-start", {"status": "paused"}, content_type="application/json")
    other = api.patch("/api/sessions/slow-start", {"autoAdvanceLimit": 2}, content_type="application/json")
    worker.join(10)
    # then both lifecycle changes are refused, other writes are not, and afterwards the delete works
    assert deleted.status_code == 409 and deleted.json()["code"] == "session_lifecycle_busy"
    assert patched.status_code == 409 and patched.json()["code"] == "session_lifecycle_busy"
    assert other.status_code == 200
    assert results["create"] == 201
    assert api.delete("/api/sessions/slow-start").status_code == 200


def test_a_community_plugins_hooks_wait_for_its_server_code_grant(api):
    # given a community plugin with only an entry (a TurnStart hook and an action)
    bell_install()
    session = session_make(plugins=("narrator", "lantern-bell"), characters=[("hero", "Hero", "player")])
    # when a turn runs before any grant: no approval is asked (no runtime of it runs), the hook is skipped
    first = stream_read(post_action(api, action_body(session.id)))
    assert first[-1]["payload"]["committed"] is True
    assert marks_of("bell") == []
    # then after the player grants its server code (through its action), the next turn runs the hook
    asked = api.post(f"/api/sessions/{session.id}/plugin-rpc", data=json.dumps({"kind": "action", "pluginId": "lantern-bell",
                                                                               "action": "ring"}), content_type="application/json")
    assert asked.status_code == 202 and asked.json()["pending"]["action"] == "covel:plugin-server-code"
    api.post(f"/api/approvals/{asked.json()['approvalId']}/decision", data=json.dumps({"decision": "allow", "scope": "session"}),
             content_type="application/json")
    second = stream_read(post_action(api, action_body(session.id)))
    assert second[-1]["payload"]["committed"] is True
    assert [m for m in marks_of("bell") if m.startswith("bell-turnstart-")]


def test_a_pre_tool_use_refusal_fails_a_function_runtime(api, quill):
    session = session_make(plugins=("narrator", "quill", "quill-fn"), characters=[("hero", "Hero", "player")])
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True
    [failed] = [f["payload"] for f in frames if f["type"] == "runtime.failed" and f["payload"]["runtimeId"] == "quill-fn"]
    assert failed["error"]["code"] == "tool_failed" and "secret is off limits" in failed["error"]["message"]
    assert "quill-fn" in frames[-1]["payload"]["failedRuntimeIds"]
