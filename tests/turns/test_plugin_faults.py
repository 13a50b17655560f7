"""The plugin fault breaker (sessions.faults, turns.engine.commit) over HTTP: own faults are counted
(trace only), the threshold pauses the plugin in that session (``plugin.fault.latched`` on the
action stream and in the session event log, ``paused`` on GET .../plugins, its runtimes stop
running), POST .../resume-fault clears it (``plugin.fault.cleared``), and a normal run resets a count.
``fumble`` (tests/turns/platform_support.py) raises while COVEL_HOME/fumble-breaks exists."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.registry import registry_reset
from tests.turns.platform_support import builtin_dir_with_platform
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import SessionEvent, TraceEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def platform(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_platform(tmp_path / "builtin"))
    settings.COVEL_PLUGIN_FAULT_THRESHOLD = 2
    home = Path(settings.COVEL_HOME)
    registry_reset()
    yield home
    (home / "fumble-breaks").unlink(missing_ok=True)
    registry_reset()


@pytest.fixture
def session():
    return session_make(plugins=("narrator", "fumble"), characters=[("hero", "Hero", "player")])


def _turn(api, session) -> list[dict]:
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return frames


def _fumble_item(api, session) -> dict:
    response = api.get(f"/api/sessions/{session.id}/plugins")
    assert response.status_code == 200, response.content
    return next(i for i in response.json()["items"] if i["id"] == "fumble")


def _log(session, type_: str) -> list[dict]:
    return [e.payload for e in SessionEvent.objects.filter(session_id=session.id, type=type_).order_by("seq")]


def test_repeated_own_faults_pause_the_plugin_until_the_player_resumes_it(api, session, platform):
    # given a plugin whose handler raises
    (platform / "fumble-breaks").write_text("1", encoding="utf-8")
    # when it fails once: counted in the trace only, the story commits, nothing is paused
    first = _turn(api, session)
    assert "plugin.fault.counted" not in [f["type"] for f in first]
    counted = [row.payload for row in TraceEvent.objects.filter(session_id=session.id, type="plugin.fault.counted")]
    assert counted == [{"pluginId": "fumble", "count": 1, "threshold": 2, "code": "handler_error", "runtimeId": "fumble"}]
    assert "paused" not in _fumble_item(api, session)
    # and a second time: the breaker latches, on the action stream and in the session's event log
    second = _turn(api, session)
    [latched] = [f["payload"] for f in second if f["type"] == "plugin.fault.latched"]
    assert latched["pluginId"] == "fumble" and latched["reason"] == "repeated-faults" and "fumble" in latched["message"]
    assert _log(session, "plugin.fault.latched") == [latched]
    item = _fumble_item(api, session)
    assert item["paused"] == {"reason": "repeated-faults"} and item["active"] is True
    # then its runtime no longer runs, and plugin-rpc refuses it
    third = _turn(api, session)
    assert "fumble" not in [f["payload"]["runtimeId"] for f in third if f["type"] == "runtime.started"]
    refused = api.post(f"/api/sessions/{session.id}/plugin-rpc", data=json.dumps({"kind": "runtime", "pluginId": "fumble",
                       "runtimeId": "fumble"}), content_type="application/json")
    assert refused.status_code == 404 and refused.json()["code"] == "plugin_not_active" and "paused" in refused.json()["error"]
    # when the player resumes it (after fixing the cause)
    (platform / "fumble-breaks").unlink()
    resumed = api.post(f"/api/sessions/{session.id}/plugins/fumble/resume-fault")
    # then it is no longer paused, the count is gone and the clear was announced
    assert resumed.status_code == 200, resumed.content
    body = resumed.json()
    assert set(body) == {"items", "commands", "unavailable"}
    assert "paused" not in next(i for i in body["items"] if i["id"] == "fumble")
    assert [e["reason"] for e in _log(session, "plugin.fault.cleared")] == ["resumed"]
    session.refresh_from_db()
    assert "pluginFaults" not in session.metadata
    assert "pluginFaults" not in api.get(f"/api/sessions/{session.id}").json()["metadata"]
    # and it runs again from the next execution
    fourth = _turn(api, session)
    ran = [f["payload"] for f in fourth if f["type"] == "runtime.completed" and f["payload"]["runtimeId"] == "fumble"]
    assert [r["status"] for r in ran] == ["success"]


def test_a_normal_run_resets_the_count(api, session, platform):
    # given one own fault
    (platform / "fumble-breaks").write_text("1", encoding="utf-8")
    _turn(api, session)
    # when the next run is normal
    (platform / "fumble-breaks").unlink()
    frames = _turn(api, session)
    # then the count is cleared ("recovered"), and one more fault starts from 1 again
    [cleared] = [f["payload"] for f in frames if f["type"] == "plugin.fault.cleared"]
    assert cleared["reason"] == "recovered" and cleared["pluginId"] == "fumble"
    (platform / "fumble-breaks").write_text("1", encoding="utf-8")
    frames = _turn(api, session)
    assert "plugin.fault.latched" not in [f["type"] for f in frames]
    counts = [row.payload["count"] for row in TraceEvent.objects.filter(session_id=session.id, type="plugin.fault.counted").order_by("id")]
    assert counts == [1, 1]


def test_resume_fault_errors(api, session):
    not_paused = api.post(f"/api/sessions/{session.id}/plugins/fumble/resume-fault")
    assert not_paused.status_code == 409 and not_paused.json()["code"] == "plugin_not_paused"
    unknown = api.post(f"/api/sessions/{session.id}/plugins/nope/resume-fault")
    assert unknown.status_code == 404 and unknown.json()["code"] == "plugin_not_found"
    missing = api.post("/api/sessions/nope/plugins/fumble/resume-fault")
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
