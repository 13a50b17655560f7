"""Background followers (turns.engine.followers) and X-Plugin-User-Settings over HTTP.

- plugin-rpc runtime ``herald/prompt`` (sync) emitting ``herald-call`` queues the background
  follower ``herald/paint`` in the same commit (``deferredJobs``); with expectsBackgroundFollower
  the entry runs as a job (202 ``phase: "prompt"``) that ends succeeded with ``result.deferredJobs``,
  or failed ``follower-not-emitted`` when it woke no follower.
- X-Plugin-User-Settings is merged over the world's pluginSettings and the manifest defaults into
  the turn (spec 004 §请求头), for /api/actions and plugin-rpc runtime runs; malformed → 400.
The plugins are in tests/turns/platform_support.py.
"""
from __future__ import annotations

import base64
import json
import time

import pytest

from jobs.models import RuntimeJob
from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.platform_support import builtin_dir_with_platform
from tests.turns.test_actions_helpers import action_body, session_make, stream_read

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def platform(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_platform(tmp_path / "builtin"))
    registry_reset()
    yield
    registry_reset()


def rpc(api, session_id: str, body, **headers):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json", **headers)


def _job_finished(job_id: str, seconds: float = 15) -> RuntimeJob:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = RuntimeJob.objects.filter(pk=job_id).first()
        if job is not None and job.status in ("succeeded", "failed", "stale", "cancelled", "orphaned"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def _painted(session) -> list[dict]:
    return list(PluginData.objects.filter(session=session, plugin_id="herald", namespace="painted").values_list("value", flat=True))


# --- followers ---------------------------------------------------------------------------------------


def test_a_sync_entry_queues_its_background_follower_in_the_same_commit(api):
    session = session_make(plugins=("narrator", "herald"))
    # when the entry runtime runs and emits herald-call
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "herald", "runtimeId": "herald/prompt", "payload": {"emit": True}})
    # then the response lists the follower job, queued with the event origin
    assert response.status_code == 200, response.content
    body = response.json()
    [deferred] = body["deferredJobs"]
    assert deferred["runtimeId"] == "herald/paint"
    job = RuntimeJob.objects.get(pk=deferred["jobId"])
    assert job.payload["origin"] == {"activation": "event", "sourceTurnId": body["turnId"], "sourceRuntimeId": "herald/prompt"}
    # and the worker runs it with the trigger
    assert _job_finished(deferred["jobId"]).status == "succeeded"
    [painted] = _painted(session)
    assert painted["topic"] == "herald-call" and painted["payload"] == {"prompt": "a lighthouse"}
    assert painted["pluginId"] == "herald" and painted["runtimeId"] == "herald/prompt"


def test_an_entry_that_emits_nothing_queues_no_follower(api):
    session = session_make(plugins=("narrator", "herald"))
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "herald", "runtimeId": "herald/prompt", "payload": {}})
    assert response.status_code == 200, response.content
    assert "deferredJobs" not in response.json()
    assert not RuntimeJob.objects.filter(session_id=session.id).exists()


def test_expects_background_follower_runs_the_entry_as_a_job_that_records_its_follower(api):
    session = session_make(plugins=("narrator", "herald"))
    # when the client expects a follower
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "herald", "runtimeId": "herald/prompt",
                                     "payload": {"emit": True}, "expectsBackgroundFollower": True})
    # then it gets 202 at once, phase prompt
    assert response.status_code == 202, response.content
    accepted = response.json()
    assert accepted["status"] == "accepted" and accepted["phase"] == "prompt" and accepted["runtimeId"] == "herald/prompt"
    # and the entry job succeeds with the follower in result.deferredJobs, which runs too
    entry = _job_finished(accepted["jobId"])
    assert entry.status == "succeeded", entry.error
    [follower] = entry.result["deferredJobs"]
    assert follower["runtimeId"] == "herald/paint"
    assert _job_finished(follower["jobId"]).status == "succeeded"
    assert len(_painted(session)) == 1
    listed = api.get(f"/api/sessions/{session.id}/runtime-jobs").json()["items"]
    assert {j["jobId"]: j["status"] for j in listed} == {accepted["jobId"]: "succeeded", follower["jobId"]: "succeeded"}


def test_expects_background_follower_without_a_follower_fails_the_job(api):
    session = session_make(plugins=("narrator", "herald"))
    response = rpc(api, session.id, {"kind": "runtime", "pluginId": "herald", "runtimeId": "herald/prompt",
                                     "payload": {"emit": False}, "expectsBackgroundFollower": True})
    assert response.status_code == 202, response.content
    job = _job_finished(response.json()["jobId"])
    # then the job failed follower-not-emitted; the entry's own writes still committed
    assert job.status == "failed" and job.error["reason"] == "follower-not-emitted"
    public = next(j for j in api.get(f"/api/sessions/{session.id}/runtime-jobs").json()["items"] if j["jobId"] == str(job.pk))
    assert public["reason"] == "follower-not-emitted" and isinstance(public["error"], str)
    assert PluginData.objects.get(session=session, plugin_id="herald", namespace="prompts", key="last").value == {"emit": False}
    assert _painted(session) == []


# --- X-Plugin-User-Settings ---------------------------------------------------------------------------


def _settings_header(value) -> dict:
    return {"HTTP_X_PLUGIN_USER_SETTINGS": base64.b64encode(json.dumps(value).encode()).decode()}


@pytest.fixture
def world_session(api):
    """A session in a store world whose pluginSettings set tally's tone and depth."""
    created = api.post("/api/worlds", {"id": "settings-world", "name": "Settings World", "locale": "en-US",
                                       "metadata": {"pluginSettings": {"tally": {"tone": "world", "depth": 2}}}},
                       content_type="application/json")
    assert created.status_code == 201, created.content
    response = api.post("/api/sessions", {"worldId": "settings-world", "locale": "en-US", "plugins": ["narrator", "tally"]},
                        content_type="application/json")
    assert response.status_code == 201, response.content
    from sessions.models import Character, Session

    session = Session.objects.get(pk=response.json()["id"])
    Character.objects.create(session=session, character_id="hero", name="Hero", type="player")
    Session.objects.filter(pk=session.pk).update(phase="playing")
    return session


def test_player_settings_win_over_world_settings_and_manifest_defaults_in_the_turn(api, world_session):
    # when a turn is sent with the player's changed value
    response = api.post("/api/actions", data=json.dumps(action_body(world_session.id)), content_type="application/json",
                        **_settings_header({"tally": {"tone": "player"}}))
    frames = stream_read(response)
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    # then the runtime saw player > world > manifest default
    seen = PluginData.objects.get(session=world_session, plugin_id="tally", namespace="seen", key="settings").value
    assert seen == {"tone": "player", "depth": 2, "flavor": "plain"}


def test_player_settings_reach_a_plugin_rpc_runtime_run(api, world_session):
    response = rpc(api, world_session.id, {"kind": "runtime", "pluginId": "tally", "runtimeId": "tally/echo"},
                   **_settings_header({"tally": {"flavor": "smoky"}}))
    assert response.status_code == 200, response.content
    assert response.json()["runtimeResults"][0]["output"] == {"settings": {"tone": "world", "depth": 2, "flavor": "smoky"}}


@pytest.mark.parametrize("raw", ["not base64!", base64.b64encode(b"[1]").decode(), base64.b64encode(b'{"tally": 3}').decode()])
def test_a_malformed_settings_header_is_refused_before_anything_runs(api, world_session, raw):
    response = api.post("/api/actions", data=json.dumps(action_body(world_session.id)), content_type="application/json",
                        HTTP_X_PLUGIN_USER_SETTINGS=raw)
    assert response.status_code == 400 and response.json()["code"] == "invalid_plugin_user_settings"
    refused = rpc(api, world_session.id, {"kind": "runtime", "pluginId": "tally", "runtimeId": "tally/echo"},
                  HTTP_X_PLUGIN_USER_SETTINGS=raw)
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_plugin_user_settings"
    from turns.models import Execution

    assert not Execution.objects.filter(session_id=world_session.id).exists()
