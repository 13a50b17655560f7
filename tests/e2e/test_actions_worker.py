"""POST /api/actions against a REAL Celery worker process (hosted shape: PostgreSQL + Redis).

In tests/e2e (a real process: ``make e2e`` runs it in the hosted shape); the worker fixture is in
tests/turns/worker_support.py.

The worker is ``celery -A covel worker`` started as a subprocess on the test database, consuming a
queue private to this test run so concurrent runs never take each other's tasks. The web side is
the Django test client in this process: it writes the execution, enqueues through Redis and relays
frames from PostgreSQL and the Redis bus.
"""
from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connections
from django.test import Client

from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.worker_support import WORKER_START_SECONDS, celery_worker_process  # noqa: F401 (fixture)
from turns.models import Execution, ExecutionFrame

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # A real Celery worker needs the broker and a shared database: collected only in the hosted run.
    pytest.mark.hosted_only,
    pytest.mark.e2e,
]


def _play(session_id: str, request_id: str, text: str, results: dict) -> None:
    try:
        results[request_id] = stream_read(post_action(Client(), action_body(
            session_id, request_id=request_id, actions=[{"kind": "say", "text": text}])))
    finally:
        connections.close_all()


def test_turns_run_on_a_real_celery_worker_and_stream_back(celery_worker_process):  # noqa: F811 (fixture)
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


def test_status_reports_completed_after_the_worker_committed(celery_worker_process, api):  # noqa: F811 (fixture)
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
