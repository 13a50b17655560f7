"""Runtime jobs obey their contract (spec 004 §Staged Runtime 后台作业): whose model credentials a job
runs with and whether it may run at all (§后台作业用谁的模型凭据, §“能不能跑”是怎么判断的), and
``maxExecutionMs`` (§作业是怎么执行的). Real turns over POST /api/actions with the embedded
in-process worker; the tally test plugin's detached post-turn function runtime."""
from __future__ import annotations

import base64
import json

import pytest

from covel import inprocess
from jobs import credentials, services
from jobs.models import RuntimeJob
from jobs.tasks import JobFailed, run_runtime_job
from tests.jobs.runtime_jobs_support import job_events, job_make, session_with_tally, tally_count, tally_plugin_install
from tests.turns.test_actions_helpers import action_body, stream_read

pytestmark = pytest.mark.django_db(transaction=True)

SOURCE_KEY = "sk-source-request-key"


def _keys_header(keys: dict[str, str]) -> str:
    return base64.b64encode(json.dumps(keys).encode()).decode()


def _play(api, session, text="Count me", *, keys: dict[str, str] | None = None) -> list[dict]:
    extra = {"HTTP_X_PROVIDER_KEYS": _keys_header(keys)} if keys else {}
    response = api.post("/api/actions", data=json.dumps(action_body(session.id, actions=[{"kind": "say", "text": text}])),
                        content_type="application/json", **extra)
    frames = stream_read(response)
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    assert inprocess.wait_idle(30)
    return frames


@pytest.fixture
def keyed_plugin_slot(tmp_path, settings):
    """llm.toml: the story slot offline (scripted), the plugin slot — the one tally's job resolves
    to — on provider ``my-lab`` at a loopback address nothing listens on (tally never calls it);
    and no confirmation of the server's own services."""
    path = tmp_path / "llm.toml"
    path.write_text('[covel.story]\nprovider = "scripted"\n\n'
                    '[covel.plugin]\nprovider = "my-lab"\nmodel = "lab-1"\nbaseUrl = "http://127.0.0.1:9/v1"\n',
                    encoding="utf-8")
    settings.COVEL_LLM_TOML = str(path)
    settings.COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = False
    return path


def test_a_job_stays_queued_while_no_usable_credential_exists(api, settings):
    # given a server whose only model is the offline default and no confirmation of it
    tally_plugin_install()
    settings.COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = False
    session = session_with_tally()
    # when a turn without provider keys schedules the job and the worker takes it up
    _play(api, session)
    job = RuntimeJob.objects.get(session=session)
    assert services.job_run(str(job.id)) is None  # a re-sent task: still nothing to run it with
    # then the job was never claimed: still queued, no attempt, nothing written
    job.refresh_from_db()
    assert (job.status, job.attempts, job.fencing_token) == ("queued", 0, 0)
    assert [e["status"] for e in job_events(session.id)] == ["queued"]
    assert tally_count(session.id) is None


def test_the_source_requests_keys_run_the_job_and_are_never_stored(api, keyed_plugin_slot):
    # given the plugin slot needs a key the server does not have
    tally_plugin_install()
    session = session_with_tally()
    # when the turn that schedules the job carries the player's key for that provider
    _play(api, session, keys={"my-lab": SOURCE_KEY})
    # then the job ran with the request's credentials, which are not in the job row
    job = RuntimeJob.objects.get(session=session)
    assert job.status == "succeeded" and tally_count(session.id) == 1
    assert SOURCE_KEY not in json.dumps([job.payload, job.result, job.error])
    # and its worker forgot them once it finished
    assert credentials.job_credentials_held(str(job.id)) is None


def test_a_waiting_job_runs_once_a_request_offers_keys(api, keyed_plugin_slot):
    # given a job queued by a turn without keys
    tally_plugin_install()
    session = session_with_tally()
    _play(api, session, "One")
    first = RuntimeJob.objects.get(session=session)
    assert first.status == "queued"
    # when the next request of the session brings the player's key
    _play(api, session, "Two", keys={"my-lab": SOURCE_KEY})
    # then both jobs ran, the waiting one first
    jobs = list(RuntimeJob.objects.filter(session=session).order_by("created_at"))
    assert [j.status for j in jobs] == ["succeeded", "succeeded"]
    assert tally_count(session.id) == 2
    assert jobs[0].attempts == 1


def test_a_server_key_for_the_jobs_slot_runs_it_without_request_keys(api, keyed_plugin_slot, monkeypatch):
    # given the operator configured the plugin slot's key on the server
    monkeypatch.setenv("MY_LAB_API_KEY", "sk-server-key")
    tally_plugin_install()
    session = session_with_tally()
    # when a turn without keys schedules the job
    _play(api, session)
    # then the server's own services run it
    assert RuntimeJob.objects.get(session=session).status == "succeeded"
    assert tally_count(session.id) == 1


def test_held_credentials_wait_as_long_as_the_jobs_queue_limit():
    job = RuntimeJob(payload={"completion": {"mode": "detached", "maxQueueMs": 120000}})
    assert credentials.job_credentials_wait_seconds(job) == 120.0
    assert credentials.job_credentials_wait_seconds(RuntimeJob(payload={})) == 300.0


def test_a_job_past_its_max_execution_time_is_timed_out_and_commits_nothing(api):
    # given a runtime that may run 300 ms and takes 1.5 s
    tally_plugin_install(detached={"maxExecutionMs": 300})
    session = session_with_tally(sleepSeconds=1.5)
    # when a turn schedules it and the worker runs it
    _play(api, session)
    # then the job ended timed_out with the spec's reason and none of its writes
    job = RuntimeJob.objects.get(session=session)
    assert job.status == "timed_out"
    assert job.error == {"reason": "execution-timeout"}
    assert tally_count(session.id) is None
    events = job_events(session.id)
    assert [e["status"] for e in events] == ["queued", "claimed", "running", "timed_out"]
    assert events[-1]["reason"] == "execution-timeout" and events[-1]["maxExecutionMs"] == 300
    assert job.lease_owner == "" and job.lease_expires_at is None


def test_a_job_within_its_max_execution_time_commits(api):
    tally_plugin_install(detached={"maxExecutionMs": 5000})
    session = session_with_tally()
    _play(api, session)
    assert RuntimeJob.objects.get(session=session).status == "succeeded"
    assert tally_count(session.id) == 1


def test_a_failed_job_fails_its_task():
    # given a queued job whose runtime fails
    tally_plugin_install()
    session = session_with_tally(explode=True)
    job = job_make(session)
    # when a worker runs its task through Celery's task machinery
    result = run_runtime_job.apply(args=(str(job.id),))
    # then the task's state is failure (what Flower shows), not success
    assert result.failed() and isinstance(result.result, JobFailed)
    assert RuntimeJob.objects.get(pk=job.pk).status == "failed"


def test_a_succeeded_job_succeeds_its_task():
    tally_plugin_install()
    session = session_with_tally()
    job = job_make(session)
    result = run_runtime_job.apply(args=(str(job.id),))
    assert result.successful() and result.result == "succeeded"
