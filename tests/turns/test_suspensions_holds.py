"""What a suspension holds until it resolves (spec 004 §挂起与回合计数, §再次挂起, §恢复 setup runtime,
§Setup runtime 控制), over HTTP:

- a setup runtime that suspends keeps the session in setup; its resume completes it and starts the
  game in the resume's commit; its abandonment counts the attempt as failed (pending, then blocked);
- the detached runtime jobs of a turn that suspended exist only once the turn ends: staged with the
  last resume (a re-suspension passes them on), or with the abandonment of the last suspension;
- the ctx.progress job of a suspended function runtime waits (``waiting-input``) and ends
  ``cancelled`` when its suspension is abandoned, ``succeeded`` with the last resume.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from django.conf import settings

from tests.jobs.runtime_jobs_support import TALLY_HANDLER, job_events, tally_count, tally_manifest
from tests.model_peer import ModelPeer
from tests.sessions.grants_support import community_grants_allow
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.test_real_model_game import llm_toml
from tests.turns.test_suspensions import TOLL_HANDLER, TOLLBOOTH, _resume, _turn, _turns

pytestmark = pytest.mark.django_db(transaction=True)

GREETER = textwrap.dedent("""\
    ---
    id: greeter
    kind: plugin
    version: 1.0.0
    description: Asks the player's name before the game starts (test setup plugin).
    requires:
      - narrative-engine@1
    contributes:
      data:
        names:
          schema: ./names.schema.json
    runtime:
      type: function
      schedule:
        stage: setup
        trigger:
          type: auto
          maxTriggerCount: 2
      io:
        visibility: system
      function:
        handler: ./handler.py
    ---
    Test plugin.
    """)
GREETER_HANDLER = textwrap.dedent('''\
    def handle(ctx):
        if ctx.resume_data is None:
            ctx.progress.report(40, "waiting for a name")
            return {"outcome": "suspended", "reason": "Your name?",
                    "resumeSchema": {"type": "object", "required": ["name"],
                                     "properties": {"name": {"type": "string", "minLength": 1}}}}
        ctx.plugin_data.set("names", "player", {"name": ctx.resume_data["name"]})
        return {"preGameDone": True, "name": ctx.resume_data["name"]}
    ''')
# A tollbooth that reports progress before it suspends (the same handler otherwise).
TOLL_WITH_PROGRESS = TOLL_HANDLER.replace('    if ctx.resume_data is None:\n',
                                          '    if ctx.resume_data is None:\n        ctx.progress.report(25, "asking")\n')
assert TOLL_WITH_PROGRESS != TOLL_HANDLER
# ... that asks again when it is paid a single coin (a re-suspension chain).
TOLL_AGAIN = TOLL_WITH_PROGRESS.replace('    ctx.plugin_data.set("tolls", "paid"',
                                        '    if ctx.resume_data["coins"] == 1:\n'
                                        '        return {"outcome": "suspended", "reason": "More, please.",\n'
                                        '                "resumeSchema": {"type": "object", "required": ["coins"],\n'
                                        '                                 "properties": {"coins": {"type": "integer"}}}}\n'
                                        '    ctx.plugin_data.set("tolls", "paid"')
assert TOLL_AGAIN != TOLL_WITH_PROGRESS


def _install(plugin_id: str, files: dict[str, str]) -> None:
    from plugins_app.registry import registry_reset

    root = Path(settings.COVEL_HOME) / "plugins" / plugin_id
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    registry_reset()


@pytest.fixture
def plugins():
    from plugins_app.registry import registry_reset

    _install("greeter", {"PLUGIN.md": GREETER, "handler.py": GREETER_HANDLER, "names.schema.json": '{"type": "object"}'})
    _install("tollbooth", {"PLUGIN.md": TOLLBOOTH, "handler.py": TOLL_WITH_PROGRESS, "toll.schema.json": '{"type": "object"}'})
    _install("tally", {"PLUGIN.md": tally_manifest(), "handler.py": TALLY_HANDLER})
    yield
    registry_reset()


def _setup_session():
    from sessions.models import Session

    session = session_make(plugins=("narrator", "greeter"), characters=[("hero", "Hero", "player")])
    Session.objects.filter(pk=session.pk).update(phase="setup")
    community_grants_allow(session, "greeter", runtime_ids=("greeter",))
    session.refresh_from_db()
    return session


def _start(api, session):
    frames = stream_read(post_action(api, action_body(session.id, type="start_session", payload={})))
    suspended = [f for f in frames if f["type"] == "turn.suspended"]
    assert suspended, [(f["type"], f["payload"]) for f in frames if f["type"].startswith(("runtime", "execution", "error"))]
    return suspended[0]["payload"]["suspensionId"], frames


def _progress(session_id: str) -> list[tuple[str, str]]:
    """(jobId, status) of the progress-job events in the session's log (the cancellations)."""
    return [(e["jobId"], e["status"]) for e in job_events(session_id) if e.get("kind") == "progress"]


def _progress_frames(frames) -> list[tuple[str, str]]:
    """(jobId, status) of the progress-job frames of an action stream or a resume's events."""
    return [(f["payload"]["jobId"], f["payload"]["status"]) for f in frames
            if f["type"] == "job-status.updated" and f["payload"].get("kind") == "progress"]


def _job_settled(job_id, seconds: float = 20.0) -> str:
    """The job's status once it is no longer queued / claimed / running / committing."""
    import time

    from jobs.models import RuntimeJob

    deadline = time.monotonic() + seconds
    status = ""
    while time.monotonic() < deadline:
        status = RuntimeJob.objects.get(pk=job_id).status
        if status not in ("queued", "claimed", "running", "committing"):
            break
        time.sleep(0.1)
    return status


def _settled_all(session_id: str) -> list[str]:
    """The statuses of the session's runtime jobs once each settled (none left running when the
    test's database is flushed)."""
    from jobs.models import RuntimeJob

    return [_job_settled(pk) for pk in RuntimeJob.objects.filter(session_id=session_id).values_list("pk", flat=True)]


def _jobs(session_id: str) -> int:
    from jobs.models import RuntimeJob

    return RuntimeJob.objects.filter(session_id=session_id).count()


def test_a_suspended_setup_runtime_keeps_the_game_in_setup_until_its_resume_completes_it(api, tmp_path, settings, plugins):
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _setup_session()
        # when the setup runtime suspends
        sid, frames = _start(api, session)
        session.refresh_from_db()
        # then the game has not started: the setup state stays pending, the attempt not counted
        assert session.phase == "setup"
        assert session.setup_runtimes["greeter"]["state"] == "pending"
        assert int(session.setup_runtimes["greeter"].get("attempts", 0)) == 0
        assert not [f for f in frames if f["type"] == "narrative.completed"]
        job_id, status = _progress_frames(frames)[-1]
        assert status == "waiting-input"
        # when the player answers
        response = _resume(api, session, sid, {"data": {"name": "Ada"}})
        assert response.status_code == 200 and response.json()["result"]["status"] == "success", response.content
        # then the setup is done and the phase switched in the same commit; no opening relay ran
        session.refresh_from_db()
        assert session.phase == "playing"
        state = session.setup_runtimes["greeter"]
        assert (state["state"], state["resolution"], state["attempts"]) == ("done", "completed", 1)
        assert session.completed_player_turns == 0
        from sessions.models import ChatMessage

        assert not ChatMessage.objects.filter(session_id=session.pk, role="assistant").exists()
        assert _progress_frames(response.json()["events"])[-1] == (job_id, "succeeded")


def test_an_abandoned_setup_suspension_is_a_failed_attempt_and_blocks_at_its_limit(api, tmp_path, settings, plugins):
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _setup_session()
        for attempt in (1, 2):
            sid, frames = _start(api, session)
            job_id = _progress_frames(frames)[-1][0]
            response = api.delete(f"/api/sessions/{session.id}/suspensions/{sid}")
            assert response.status_code == 200, response.content
            session.refresh_from_db()
            state = session.setup_runtimes["greeter"]
            assert state["attempts"] == attempt and state["lastError"]
            assert state["state"] == ("pending" if attempt == 1 else "blocked")
            assert session.phase == "setup"
            # the suspended run's progress job ends cancelled with the abandonment
            assert _progress(session.id)[-1] == (job_id, "cancelled")


def _toll_session():
    session = session_make(plugins=("narrator", "tollbooth", "tally"), characters=[("hero", "Hero", "player")])
    community_grants_allow(session, "tollbooth", runtime_ids=("tollbooth",))
    community_grants_allow(session, "tally", runtime_ids=("tally",))
    return session


def _suspension_id(frames) -> str:
    return next(f for f in frames if f["type"] == "turn.suspended")["payload"]["suspensionId"]


def test_detached_jobs_of_a_suspended_turn_wait_for_its_resume(api, tmp_path, settings, plugins):
    from jobs.models import RuntimeJob

    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _toll_session()
        frames = _turn(api, session)
        sid = _suspension_id(frames)
        # then the detached tally job does not exist while the turn waits
        assert _jobs(session.id) == 0
        assert "runtime.deferred" not in [f["type"] for f in frames]
        assert _progress_frames(frames)[-1][1] == "waiting-input"
        # when the resume fails validation nothing is staged either
        assert _resume(api, session, sid, {"data": {"coins": 0}}).status_code == 400
        assert _jobs(session.id) == 0
        # when the resume commits, the job is staged with it (once), frozen at the source turn
        response = _resume(api, session, sid, {"data": {"coins": 2}})
        assert response.status_code == 200, response.content
        assert "runtime.deferred" in [e["type"] for e in response.json()["events"]]
        jobs = list(RuntimeJob.objects.filter(session_id=session.pk))
        assert [j.runtime_id for j in jobs] == ["tally"]
        source_turn = next(f for f in frames if f["type"] == "turn.suspended")["payload"]["turnId"]
        assert jobs[0].payload["origin"]["sourceTurnId"] == source_turn
        assert _turns(session) == 1
        assert _progress_frames(response.json()["events"])[-1][1] == "succeeded"
        # and the released job runs like any turn's job
        assert _job_settled(jobs[0].pk) == "succeeded"
        assert tally_count(session.id) == 1


def test_an_abandoned_suspension_stages_the_held_jobs_and_cancels_its_progress_job(api, tmp_path, settings, plugins):
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _toll_session()
        frames = _turn(api, session)
        sid = _suspension_id(frames)
        job_id, status = _progress_frames(frames)[-1]
        assert status == "waiting-input" and _jobs(session.id) == 0
        response = api.delete(f"/api/sessions/{session.id}/suspensions/{sid}")
        assert response.status_code == 200, response.content
        # the turn ends as a turn does: it counts and its detached job is queued; the progress job is cancelled
        assert _turns(session) == 1
        assert _jobs(session.id) == 1
        assert _progress(session.id)[-1] == (job_id, "cancelled")
        assert _settled_all(session.id) == ["succeeded"]


def test_a_voided_suspension_cancels_its_progress_job(api, tmp_path, settings, plugins):
    from plugins_app.models import PluginData

    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _toll_session()
        frames = _turn(api, session)
        sid = _suspension_id(frames)
        job_id = _progress_frames(frames)[-1][0]
        # someone else writes the plugin-data key the suspended run would write
        PluginData.objects.create(session_id=session.pk, plugin_id="tollbooth", namespace="tolls", key="asked", value={"x": 1})
        response = _resume(api, session, sid, {"data": {"coins": 2}})
        assert response.status_code == 409 and response.json()["details"]["reason"] == "data-changed", response.content
        assert _progress(session.id)[-1] == (job_id, "cancelled")
        assert _jobs(session.id) == 1  # the voided suspension was the last of its turn: the turn ended
        assert _settled_all(session.id) == ["succeeded"]


def test_a_re_suspension_passes_the_held_jobs_on_to_the_last_resume(api, tmp_path, settings, plugins):
    _install("tollbooth", {"handler.py": TOLL_AGAIN})
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _toll_session()
        frames = _turn(api, session)
        first = _suspension_id(frames)
        job_id = _progress_frames(frames)[-1][0]
        # when the resumed run suspends again, the jobs stay held and the progress job keeps waiting
        again = _resume(api, session, first, {"data": {"coins": 1}})
        assert again.status_code == 200 and again.json()["result"]["status"] == "suspended", again.content
        second = again.json()["result"]["output"]["suspensionId"]
        assert _jobs(session.id) == 0 and _turns(session) == 0
        assert _progress_frames(again.json()["events"])[-1] == (job_id, "waiting-input")
        # when the new suspension is resumed, the chain ends: the job is staged once, the turn counts once
        done = _resume(api, session, second, {"data": {"coins": 4}})
        assert done.status_code == 200 and done.json()["result"]["status"] == "success", done.content
        assert _jobs(session.id) == 1 and _turns(session) == 1
        assert _progress_frames(done.json()["events"])[-1] == (job_id, "succeeded")
        assert _settled_all(session.id) == ["succeeded"]


def test_an_expired_suspension_ends_its_turn_like_an_abandonment(api, tmp_path, settings, plugins):
    from datetime import timedelta

    from django.utils import timezone

    from turns.models import Suspension

    settings.COVEL_SUSPENSION_SWEEP_SECONDS = 0
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = _toll_session()
        frames = _turn(api, session)
        sid = _suspension_id(frames)
        job_id = _progress_frames(frames)[-1][0]
        row = Suspension.objects.get(suspension_id=sid)
        row.payload = {**row.payload, "expiresAt": (timezone.now() - timedelta(seconds=1)).isoformat()}
        row.save(update_fields=["payload"])
        # the next list sweeps it: the turn counts, its held job is queued, its progress job cancelled
        assert api.get(f"/api/sessions/{session.id}/suspensions").json()["items"] == []
        assert _turns(session) == 1 and _jobs(session.id) == 1
        assert _progress(session.id)[-1] == (job_id, "cancelled")
        from jobs.models import RuntimeJob

        assert _job_settled(RuntimeJob.objects.get(session_id=session.pk).pk) == "succeeded"
