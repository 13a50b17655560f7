"""GET /api/sessions/:id/execution, the claim that makes a redelivered task a no-op, and the reaper of
executions whose worker died (spec 004 §刷新与未完成回合恢复)."""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from covel import inprocess
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns import services
from sessions.locks import session_lock
from turns.models import Execution, ExecutionFrame
from turns.tasks import reap_executions, run_execution

pytestmark = pytest.mark.django_db(transaction=True)


def _execution_row(session, *, status, request_id="req-x", payload=None, outcome=None, heartbeat_age_seconds=0, body=None):
    now = timezone.now()
    request = services.action_request_parse(body) if body else None
    return Execution.objects.create(
        session=session, request_id=request_id, type="submit_actions",
        payload=payload or {"actions": [{"kind": "say", "seatId": "main", "source": "player", "actorId": "hero", "text": "Hi"}]},
        status=status, trace_id=uuid.uuid4().hex, turn_id=str(uuid.uuid4()), origin="player",
        claimed_at=now - timedelta(seconds=heartbeat_age_seconds), heartbeat_at=now - timedelta(seconds=heartbeat_age_seconds),
        outcome=outcome, request_hash=request.request_hash if request else "",
    )


def _status(api, session_id):
    response = api.get(f"/api/sessions/{session_id}/execution")
    assert response.status_code == 200, response.content
    return response.json()


def test_idle_session_without_executions(api):
    session = session_make()
    assert _status(api, session.id) == {"state": "idle"}


def test_unknown_session_is_not_found(api):
    response = api.get("/api/sessions/nope/execution")
    assert response.status_code == 404
    assert response.json() == {"error": "Session not found: nope", "code": "session_not_found"}


def test_running_while_the_lock_is_held(api):
    # given: a worker holds the lock for this execution
    session = session_make()
    execution = _execution_row(session, status=Execution.STATUS_RUNNING)
    acquired, release = threading.Event(), threading.Event()

    def worker() -> None:
        with session_lock(session.id):
            acquired.set()
            release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    acquired.wait(5)
    try:
        # when
        status = _status(api, session.id)
    finally:
        release.set()
        thread.join(10)
    # then
    assert status["state"] == "running"
    assert (status["requestId"], status["turnId"], status["origin"]) == ("req-x", execution.turn_id, "player")


def test_completed_after_a_committed_turn(api):
    session = session_make(characters=[("hero", "Hero", "player")])
    frames = stream_read(post_action(api, action_body(session.id, request_id="req-done")))
    inprocess.wait_idle()
    status = _status(api, session.id)
    assert status["state"] == "completed"
    assert status["requestId"] == "req-done"
    assert status["turnId"] == frames[-1]["turnId"] == Execution.objects.get().turn_id
    assert status["origin"] == "player"
    assert status["startedAt"].endswith("Z")


def test_stopped_turn_is_failed_with_abort_reason_and_retry(api):
    session = session_make(characters=[("hero", "Hero", "player")])
    _execution_row(session, status=Execution.STATUS_ABORTED, outcome={"committed": False, "abortReason": "aborted-by-player"})
    status = _status(api, session.id)
    assert status["state"] == "failed"
    assert status["abortReason"] == "aborted-by-player"
    assert status["retry"] == {
        "type": "submit_actions",
        "payload": {"actions": [{"kind": "say", "seatId": "main", "actorId": "hero", "text": "Hi"}]},
    }


def test_answered_interaction_retries_with_retry_turn(api):
    session = session_make(characters=[("hero", "Hero", "player")])
    answer = {"kind": "act", "seatId": "main", "source": "player",
              "interaction": {"turnId": "t1", "interactionId": "f", "type": "form"}, "fields": {"name": "A"}}
    execution = _execution_row(session, status=Execution.STATUS_FAILED, payload={"actions": [answer]}, outcome={"committed": False})
    status = _status(api, session.id)
    assert status["state"] == "failed"
    assert status["retry"] == {"type": "retry_turn", "payload": {"recoverFromTurnId": execution.turn_id}}


def test_dead_worker_reads_as_interrupted_and_the_reaper_closes_its_stream(api):
    # given: a running execution whose worker stopped beating long ago, lock free
    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, request_id="req-dead")
    execution = _execution_row(session, status=Execution.STATUS_RUNNING, request_id="req-dead",
                               heartbeat_age_seconds=services.STALE_SECONDS + 5, body=body)
    ExecutionFrame.objects.create(execution=execution, index=1, type="execution.started", payload={}, timestamp="t")
    assert _status(api, session.id)["state"] == "interrupted"
    # when
    assert reap_executions() == 1
    # then: the stream, replayed for the same request, ends properly
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_INTERRUPTED
    frames = stream_read(post_action(api, body))
    assert [f["type"] for f in frames] == ["execution.started", "error.occurred", "execution.completed"]
    assert frames[1]["payload"]["code"] == "execution_interrupted"
    assert frames[2]["payload"] == {"committed": False}
    assert _status(api, session.id)["state"] == "interrupted"
    assert reap_executions() == 0


def test_reaper_leaves_a_beating_execution_alone(api):
    session = session_make()
    _execution_row(session, status=Execution.STATUS_RUNNING, heartbeat_age_seconds=1)
    assert reap_executions() == 0
    assert _status(api, session.id)["state"] == "running"


def test_redelivered_task_does_not_run_the_turn_again(api):
    # given: an execution that ran to its end
    session = session_make(characters=[("hero", "Hero", "player")])
    stream_read(post_action(api, action_body(session.id)))
    inprocess.wait_idle()
    execution = Execution.objects.get()
    frames = ExecutionFrame.objects.count()
    # when: the broker delivers the task again
    run_execution(str(execution.id))
    # then
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_COMMITTED
    assert ExecutionFrame.objects.count() == frames
    connections.close_all()
