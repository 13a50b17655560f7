"""POST /api/sessions/:id/plugin-rpc over HTTP: the four kinds, their success shapes and error codes
(spec 004 §插件 RPC 通道, §/plugins 命令). ``beacon`` is a builtin test plugin (no approvals) whose
entry registers ping / stash / nap and whose runtimes cover manual, background, event and
subagent-only runs (tests/sessions/lantern_support.py)."""
from __future__ import annotations

import json
import time

import pytest

from jobs.models import RuntimeJob
from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions import locks
from tests.sessions.lantern_support import builtin_dir_with_beacon, marks_clear, marks_dir
from tests.turns.test_actions_helpers import session_make
from turns.models import SessionEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def beacon(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_beacon(tmp_path / "builtin"))
    marks_clear()
    registry_reset()
    yield
    registry_reset()
    marks_clear()


@pytest.fixture
def session():
    return session_make(plugins=("narrator", "beacon"), characters=[("hero", "Hero", "player")])


def rpc(api, session_id: str, body, **headers):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json", **headers)


def refused(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and isinstance(body["error"], str) and body["error"], body
    return body


def _wait_for(predicate, what: str, seconds: float = 15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- request shape --------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    pytest.param({}, id="no-kind"),
    pytest.param({"kind": "call", "pluginId": "beacon"}, id="unknown-kind"),
    pytest.param({"kind": "action", "pluginId": "beacon"}, id="action-without-action"),
    pytest.param({"kind": "action", "pluginId": "beacon", "action": "ping", "runtimeId": "beacon/manual"}, id="mixed-fields"),
    pytest.param({"kind": "runtime", "pluginId": "beacon"}, id="runtime-without-runtime-id"),
    pytest.param({"kind": "command", "commandId": "framework:plugins"}, id="command-without-input-or-args"),
    pytest.param({"kind": "command", "commandId": "framework:plugins", "input": "/plugins", "args": {}}, id="command-input-and-args"),
    pytest.param({"kind": "command", "commandId": "framework:plugins", "input": "/plugins", "pluginId": "x"}, id="command-plugin-id"),
    pytest.param({"kind": "command", "commandId": "framework:plugins", "input": "/plugins", "payload": {}}, id="command-payload"),
    pytest.param({"kind": "event", "pluginId": "beacon", "topic": "lantern-lit", "payload": [1]}, id="event-payload-not-object"),
    pytest.param({"kind": "action", "pluginId": 3, "action": "ping"}, id="plugin-id-not-string"),
])
def test_malformed_requests_are_invalid_rpc_request(api, session, body):
    refused(rpc(api, session.id, body), 400, "invalid_rpc_request")


def test_unknown_session_and_inactive_session(api, session):
    refused(rpc(api, "nope", {"kind": "action", "pluginId": "beacon", "action": "ping"}), 404, "session_not_found")
    session.status = "paused"
    session.save()
    refused(rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping"}), 409, "session_not_active")


# --- kind: action ---------------------------------------------------------------------------------


def test_a_builtin_action_runs_at_once(api, session):
    response = rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping", "payload": {"x": 1}})
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "result": {"pong": {"x": 1}, "plugin": "beacon", "command": None}}


def test_the_action_store_is_the_session_and_the_own_plugin_only(api, session):
    from sessions.models import TurnMessage

    for index in range(205):
        TurnMessage.objects.create(session=session, turn_id=f"t{index}", role="user", content={"text": str(index)})
    response = rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "stash", "payload": {"key": "k", "value": {"v": 1}}})
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert result["written"] == {"version": 1} and result["read"] == {"v": 1} and result["notes"] == {"k": {"v": 1}}
    assert result["messages"] == 200 and result["session"] == session.id
    assert result["refused"] == "reserved_namespace" and result["hasSavePlayerInput"] is False
    row = PluginData.objects.get(session=session, plugin_id="beacon", namespace="notes", key="k")
    assert row.value == {"v": 1}
    event = SessionEvent.objects.get(session=session, type="plugin-data.changed")
    assert event.payload == {"pluginId": "beacon", "namespace": "notes", "key": "k", "op": "put", "version": 1}


def test_reserved_prefixes_are_refused_even_as_plain_actions(api, session):
    for action in ("covel:plugin-server-code", "runtime:beacon/manual", "event:lantern-lit"):
        refused(rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": action}), 400, "reserved_action")


def test_unknown_action_and_inactive_plugin(api, session):
    refused(rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "dance"}), 404, "unknown_action")
    refused(rpc(api, session.id, {"kind": "action", "pluginId": "ghost", "action": "ping"}), 404, "plugin_not_active")
    refused(rpc(api, session.id, {"kind": "action", "pluginId": "framework", "action": "dance"}), 404, "unknown_action")


def test_framework_default_actions(api, session):
    debug = rpc(api, session.id, {"kind": "action", "pluginId": "framework", "action": "slash-debug"})
    assert debug.status_code == 200
    result = debug.json()["result"]
    assert result["clientAction"] == {"type": "open-debug", "sessionId": session.id, "view": "traces"}
    assert result["context"]["session"]["id"] == session.id and "beacon/manual" in result["context"]["activeRuntimes"]
    # slash-plugins needs the framework:plugins command context
    refused(rpc(api, session.id, {"kind": "action", "pluginId": "framework", "action": "slash-plugins"}), 400,
            "command_context_required")


def test_a_handler_past_its_time_gets_504_the_lock_is_released_and_its_late_write_refused(api, session, settings):
    settings.COVEL_RPC_HANDLER_TIMEOUT_SECONDS = 0.5
    started = time.monotonic()
    response = rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "nap", "payload": {"seconds": 1.5}})
    elapsed = time.monotonic() - started
    refused(response, 504, "handler_timeout")
    assert elapsed < 1.4
    # the lock is free at once: another action runs while the late handler still sleeps
    assert locks.session_lock_probe(session.id) == locks.PROBE_FREE
    assert rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping"}).status_code == 200
    # the write before the deadline stays; the one after it is refused
    _wait_for(lambda: (marks_dir() / "nap-refused").exists(), "the late write to be refused")
    assert (marks_dir() / "nap-refused").read_text() == "handler_timeout:True"
    notes = {r.key: r.value for r in PluginData.objects.filter(session=session, plugin_id="beacon", namespace="notes")}
    assert notes == {"before": True}


# --- kind: command --------------------------------------------------------------------------------


def test_the_plugins_command_opens_the_diagnostics(api, session):
    plain = rpc(api, session.id, {"kind": "command", "commandId": "framework:plugins", "input": "/plugins"})
    assert plain.status_code == 200
    assert plain.json() == {"status": "ok", "result": {"clientAction": {"type": "open-plugin-diagnostics"}}}
    one = rpc(api, session.id, {"kind": "command", "commandId": "framework:plugins", "args": {"pluginId": "beacon"}})
    assert one.json()["result"]["clientAction"] == {"type": "open-plugin-diagnostics", "pluginId": "beacon"}
    typed = rpc(api, session.id, {"kind": "command", "commandId": "framework:plugins", "input": "/plugins beacon"})
    assert typed.json()["result"]["clientAction"]["pluginId"] == "beacon"
    refused(rpc(api, session.id, {"kind": "command", "commandId": "framework:plugins", "args": {"pluginId": "ghost"}}),
            404, "plugin_not_found")


def test_the_debug_command_answers_with_its_environment(api, session):
    response = rpc(api, session.id, {"kind": "command", "commandId": "framework:debug", "input": "/trace"})
    assert response.status_code == 200
    body = response.json()
    assert body["result"]["clientAction"]["type"] == "open-debug"
    assert body["environment"]["session"]["id"] == session.id and "models" in body["environment"]


def test_a_plugin_command_validates_and_runs_its_action(api, session):
    typed = rpc(api, session.id, {"kind": "command", "commandId": "beacon:roll", "input": "/roll 2d6 3"})
    assert typed.status_code == 200, typed.content
    result = typed.json()["result"]
    assert result["command"] == {"notation": "2d6", "times": 3}
    invocation = result["pong"]
    assert invocation["commandId"] == "beacon:roll" and invocation["source"] == "composer" and invocation["raw"] == "/roll 2d6 3"
    assert invocation["argv"] == ["2d6", "3"] and invocation["canonical"] == "/roll 2d6 3"
    ui = rpc(api, session.id, {"kind": "command", "commandId": "beacon:roll", "args": {"notation": "1d20"}})
    assert ui.json()["result"]["pong"]["source"] == "plugin-ui" and ui.json()["result"]["command"] == {"notation": "1d20"}


@pytest.mark.parametrize("body", [
    pytest.param({"input": "/roll"}, id="missing-required"),
    pytest.param({"input": "/roll 2d6 many"}, id="not-an-integer"),
    pytest.param({"input": "/roll 2d6 3 4"}, id="too-many"),
    pytest.param({"input": "/dance 2d6"}, id="other-command"),
    pytest.param({"input": "/roll 'open"}, id="unbalanced-quote"),
    pytest.param({"args": {"notation": "2d6", "times": "3"}}, id="args-wrong-type"),
    pytest.param({"args": {"notation": "2d6", "colour": "red"}}, id="args-unknown"),
    pytest.param({"args": {"times": 2}}, id="args-missing-required"),
])
def test_command_arguments_are_checked_against_the_declaration(api, session, body):
    refused(rpc(api, session.id, {"kind": "command", "commandId": "beacon:roll", **body}), 400, "command_args_invalid")


def test_unknown_command_is_command_not_active(api, session):
    refused(rpc(api, session.id, {"kind": "command", "commandId": "beacon:dance", "input": "/dance"}), 404, "command_not_active")


# --- kind: runtime --------------------------------------------------------------------------------


def test_a_manual_runtime_runs_through_the_turn_flow(api, session):
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/manual", "payload": {"style": "dim"}})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok" and isinstance(body["durationMs"], int)
    [item] = body["runtimeResults"]
    assert item["runtimeId"] == "beacon/manual" and item["pluginId"] == "beacon" and item["status"] == "ok"
    assert item["output"] == {"echo": {"style": "dim"}, "origin": "manual"}
    turn = TurnResult.objects.get(session=session, turn_id=body["turnId"])
    assert turn.committed is True and turn.origin == "manual" and turn.player_turn_index is None
    assert PluginData.objects.get(session=session, plugin_id="beacon", namespace="manual", key="last").value == {"style": "dim"}


def test_runtime_errors(api, session):
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "narrator", "runtimeId": "beacon/manual"}), 400, "plugin_mismatch")
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/nothing"}), 404, "runtime_not_active")
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/helper"}), 409, "runtime_subagent_only")
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/manual", "retryFromTurnId": "t-x"}),
            404, "retry_turn_not_found")
    TurnResult.objects.create(session=session, turn_id="t-rolled-back", committed=False)
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/manual",
                                  "retryFromTurnId": "t-rolled-back"}), 409, "retry_source_not_committed")
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "ghost", "runtimeId": "ghost/x"}), 404, "plugin_not_active")


def test_a_background_runtime_is_a_durable_job(api, session):
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/later", "payload": {"n": 7}})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "accepted" and body["pending"] is True and body["runtimeId"] == "beacon/later"
    job = RuntimeJob.objects.get(pk=body["jobId"])
    assert job.payload["origin"] == {"activation": "manual", "sourceTurnId": body["turnId"]}
    done = _wait_for(lambda: RuntimeJob.objects.filter(pk=job.pk, status="succeeded").first(), "the job to succeed")
    assert done.result["turnId"] == body["turnId"]
    ran = PluginData.objects.get(session=session, plugin_id="beacon", namespace="later", key="ran").value
    assert ran["payload"] == {"n": 7}


def test_a_full_background_queue_is_429(api, session):
    from jobs.services import MAX_QUEUED_PER_SESSION

    RuntimeJob.objects.bulk_create([RuntimeJob(session=session, plugin_id="beacon", runtime_id="beacon/later", status="queued",
                                               payload={}) for _ in range(MAX_QUEUED_PER_SESSION)])
    refused(rpc(api, session.id, {"kind": "runtime", "pluginId": "beacon", "runtimeId": "beacon/later"}), 429, "background_queue_full")


# --- kind: event ----------------------------------------------------------------------------------


def test_an_event_queues_its_subscribers_as_event_jobs(api, session):
    response = rpc(api, session.id, {"kind": "event", "pluginId": "beacon", "topic": "lantern-lit", "payload": {"brightness": 3}})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok" and body["topic"] == "lantern-lit"
    [deferred] = body["deferredJobs"]
    assert deferred["runtimeId"] == "beacon/listener"
    job = RuntimeJob.objects.get(pk=deferred["jobId"])
    assert job.payload["origin"] == {"activation": "event", "sourceTurnId": body["eventId"]}
    _wait_for(lambda: RuntimeJob.objects.filter(pk=job.pk, status="succeeded").exists(), "the event job to succeed")
    heard = PluginData.objects.get(session=session, plugin_id="beacon", namespace="heard", key=body["eventId"]).value
    assert heard == {"eventId": body["eventId"], "topic": "lantern-lit", "pluginId": "beacon", "payload": {"brightness": 3}}


def test_event_errors(api, session):
    refused(rpc(api, session.id, {"kind": "event", "pluginId": "beacon", "topic": "other"}), 404, "event_not_declared")
    refused(rpc(api, session.id, {"kind": "event", "pluginId": "narrator", "topic": "lantern-lit"}), 404, "event_not_declared")
    body = refused(rpc(api, session.id, {"kind": "event", "pluginId": "beacon", "topic": "lantern-lit", "payload": {"brightness": "x"}}),
                   400, "event_payload_invalid")
    assert body["details"]["issues"][0]["path"] == ["brightness"]
    assert RuntimeJob.objects.count() == 0


def test_capabilities_advertise_what_runs(api):
    from plugins_app.hooks import HOOKS_RUN

    manifest = api.get("/api/framework/capabilities").json()["framework"]
    assert manifest["pluginManifest"]["hookEvents"] == list(HOOKS_RUN)
    assert "plugin-rpc:context.store.setPluginData" in manifest["pluginData"]["writePaths"]
