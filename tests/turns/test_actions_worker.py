"""POST /api/actions against a REAL Celery worker process (hosted shape: PostgreSQL + Redis).

The worker is ``celery -A covel worker`` started as a subprocess on the test database, consuming a
queue private to this test run so concurrent runs never take each other's tasks. The web side is
the Django test client in this process: it writes the execution, enqueues through Redis and relays
frames from PostgreSQL and the Redis bus.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import Execution, ExecutionFrame

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # A real Celery worker needs the broker and a shared database: collected only in the hosted run.
    pytest.mark.hosted_only,
]

WORKER_START_SECONDS = 60


def _database_url() -> str:
    db = settings.DATABASES["default"]
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += ":" + db["PASSWORD"]
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def celery_worker_process(settings):
    """A real worker on a private ``turns`` queue; this process routes turn tasks to it."""
    from covel.celery import app

    queue = f"turns-test-{uuid.uuid4().hex[:8]}"
    routes = {**app.conf.task_routes, "turns.*": {"queue": queue}}
    old_routes = app.conf.task_routes
    app.conf.task_routes = routes
    app.amqp.flush_routes()
    app.amqp.router = app.amqp.Router()
    settings.COVEL_INPROCESS_WORKER = False
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "covel.settings.hosted",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "COVEL_HOME": str(settings.COVEL_HOME),
        "COVEL_INPROCESS_WORKER": "0",
        "COVEL_JSON_LOGS": "0",
        "COVEL_DB_CONN_MAX_AGE": "0",
    }
    log_path = Path(settings.COVEL_HOME) / f"{queue}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "covel", "worker", "-Q", queue, "--concurrency", "2",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()
        app.conf.task_routes = old_routes
        app.amqp.flush_routes()
        app.amqp.router = app.amqp.Router()
        if process.returncode not in (0, -signal.SIGTERM):
            print(log_path.read_text(errors="replace")[-4000:])


def _play(session_id: str, request_id: str, text: str, results: dict) -> None:
    try:
        results[request_id] = stream_read(post_action(Client(), action_body(
            session_id, request_id=request_id, actions=[{"kind": "say", "text": text}])))
    finally:
        connections.close_all()


def test_turns_run_on_a_real_celery_worker_and_stream_back(celery_worker_process):
    # given
    session = session_make(characters=[("hero", "Hero", "player")])
    results: dict = {}
    # when: two actions on the same session at once
    threads = [threading.Thread(target=_play, args=(session.id, f"req-w{i}", f"Line {i}", results)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WORKER_START_SECONDS)
    # then: both streams end with their commit, written by the worker process
    assert not any(t.is_alive() for t in threads), "the worker did not finish the turns in time"
    for request_id, frames in results.items():
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert frames[-1]["type"] == "execution.completed"
        assert frames[-1]["payload"]["committed"] is True
        assert all(f["requestId"] == request_id for f in frames)
    executions = list(Execution.objects.filter(session=session))
    assert {e.status for e in executions} == {Execution.STATUS_COMMITTED}
    assert all(e.claimed_by.split(":")[1] != str(os.getpid()) for e in executions)
    # and the worker serialized them: no frame of one lies between the other's
    owners = [f.execution_id for f in ExecutionFrame.objects.exclude(type="execution.completed").order_by("id")]
    first = owners[0]
    switch = next(i for i, o in enumerate(owners) if o != first)
    assert all(o != first for o in owners[switch:])


def test_status_reports_completed_after_the_worker_committed(celery_worker_process, api):
    session = session_make(characters=[("hero", "Hero", "player")])
    results: dict = {}
    thread = threading.Thread(target=_play, args=(session.id, "req-status", "Hello", results))
    thread.start()
    thread.join(WORKER_START_SECONDS)
    assert results["req-status"][-1]["payload"]["committed"] is True
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        status = api.get(f"/api/sessions/{session.id}/execution").json()
        if status["state"] == "completed":
            break
        time.sleep(0.05)
    assert status["state"] == "completed"
    assert status["requestId"] == "req-status"
