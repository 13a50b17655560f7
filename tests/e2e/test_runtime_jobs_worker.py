"""Runtime jobs on REAL Celery worker processes (hosted shape: PostgreSQL + Redis).

Workers are ``celery -A covel worker`` subprocesses on the test database, consuming a queue private
to this test run (tests/jobs/worker_settings.py routes turns and jobs there). The web side is the
Django test client in this process. In tests/e2e (real processes): ``make e2e`` runs it in the
hosted shape.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from jobs.models import RuntimeJob
from tests.jobs.runtime_jobs_support import job_events, session_with_tally, tally_count, tally_plugin_install
from tests.turns.test_actions_helpers import action_body, post_action, stream_read
from tests.turns.worker_support import _database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.hosted_only, pytest.mark.e2e]

WAIT_SECONDS = 60


@pytest.fixture
def workers(settings):
    """Start workers on a private queue: ``workers.start()`` → Popen; all are stopped at the end."""
    from covel.celery import app

    tally_plugin_install()
    queue = f"jobs-test-{uuid.uuid4().hex[:8]}"
    old_routes = app.conf.task_routes
    app.conf.task_routes = {**old_routes, "turns.*": {"queue": queue}, "jobs.*": {"queue": queue}}
    app.amqp.flush_routes()
    app.amqp.router = app.amqp.Router()
    settings.COVEL_INPROCESS_WORKER = False
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.jobs.worker_settings", "COVEL_TEST_QUEUE": queue,
           "DATABASE_URL": _database_url(), "REDIS_URL": settings.REDIS_URL, "COVEL_HOME": str(settings.COVEL_HOME),
           "COVEL_INPROCESS_WORKER": "0", "COVEL_JSON_LOGS": "0", "COVEL_DB_CONN_MAX_AGE": "0"}
    started: list[tuple[subprocess.Popen, Path]] = []

    class Workers:
        def start(self) -> subprocess.Popen:
            log_path = Path(settings.COVEL_HOME) / f"{queue}-{len(started)}.log"
            process = subprocess.Popen(
                [str(Path(sys.executable).parent / "celery"), "-A", "covel", "worker", "-Q", queue, "--concurrency", "2",
                 "-n", f"{queue}-{len(started)}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "--loglevel", "INFO"],
                cwd=root, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            )
            started.append((process, log_path))
            return process

    try:
        yield Workers()
    finally:
        for process, log_path in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
            if process.returncode not in (0, -signal.SIGTERM):
                print(log_path.read_text(errors="replace")[-4000:])
        app.conf.task_routes = old_routes
        app.amqp.flush_routes()
        app.amqp.router = app.amqp.Router()


def _wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _play(api, session, text="Count me") -> list[dict]:
    frames = stream_read(post_action(api, action_body(session.id, actions=[{"kind": "say", "text": text}])))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return frames


def test_a_worker_process_runs_and_commits_the_detached_job(workers, api):
    # given a worker process
    workers.start()
    session = session_with_tally()
    # when a turn schedules the detached runtime
    frames = _play(api, session)
    # then the job committed in the worker process
    job = _wait_for(lambda: RuntimeJob.objects.filter(session=session, status="succeeded").first(), "the job to succeed")
    assert [f["payload"]["jobId"] for f in frames if f["type"] == "runtime.deferred"] == [str(job.id)]
    assert job.result["output"]["pid"] != os.getpid()
    assert job.attempts == 1 and job.fencing_token == 1
    assert tally_count(session.id) == 1
    assert [e["status"] for e in job_events(session.id)] == ["queued", "claimed", "running", "committing", "succeeded"]


def test_warm_shutdown_requeues_the_running_job_for_the_next_worker(workers, api):
    # given a worker running a slow job
    first = workers.start()
    session = session_with_tally(sleepSeconds=3)
    _play(api, session)
    job = _wait_for(lambda: RuntimeJob.objects.filter(session=session, status="running").first(), "the job to run")

    # when the worker is asked to stop (warm shutdown) while the runtime runs
    first.send_signal(signal.SIGTERM)
    first.wait(WAIT_SECONDS)

    # then the job is back in the queue under the same id, nothing committed
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 1 and job.fencing_token == 1
    assert tally_count(session.id) is None

    # when the next worker starts, then it runs the job again and commits it
    workers.start()
    job = _wait_for(lambda: RuntimeJob.objects.filter(pk=job.pk, status="succeeded").first(), "the job to be rerun")
    assert job.attempts == 2 and job.fencing_token == 2
    assert tally_count(session.id) == 1
    assert [e["status"] for e in job_events(session.id)] == [
        "queued", "claimed", "running", "queued", "claimed", "running", "committing", "succeeded"]
