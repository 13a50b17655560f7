"""The turn task tells the truth and hands unstarted work on (issue 23): a turn that failed or was
refused fails its Celery task (what Flower shows), a committed one succeeds; a worker in warm
shutdown puts a turn it claimed but has not started back in the queue, where the next worker
runs it once (spec 004 §服务生命周期 关闭期间各类工作怎样处理)."""
from __future__ import annotations

import pytest
from django.db import connections

from covel import inprocess, workers
from tests.turns.test_actions_helpers import session_make
from tests.turns.test_execution import _execution_row
from turns import control, services
from turns.models import Execution, ExecutionFrame, TurnResult
from turns.tasks import TurnFailed, run_execution

pytestmark = pytest.mark.django_db(transaction=True)

STOPPING = "celery@stopping-worker"


@pytest.fixture(autouse=True)
def _connections_closed():
    yield
    connections.close_all()


def test_a_turn_refused_in_the_lock_fails_its_task():
    # given an accepted turn whose session was paused before a worker took it
    session = session_make(status="paused", characters=[("hero", "Hero", "player")])
    execution = _execution_row(session, status=Execution.STATUS_QUEUED)
    # when a worker runs its task
    result = run_execution.apply(args=(str(execution.id),))
    # then the task failed (not SUCCESS) and the execution says why
    assert result.failed() and isinstance(result.result, TurnFailed)
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_REJECTED and execution.error["code"] == "session_not_active"


def test_a_committed_turn_succeeds_its_task():
    session = session_make(characters=[("hero", "Hero", "player")])
    execution = _execution_row(session, status=Execution.STATUS_QUEUED)
    result = run_execution.apply(args=(str(execution.id),))
    assert result.successful() and result.result == Execution.STATUS_COMMITTED


def test_a_worker_in_warm_shutdown_requeues_an_unstarted_turn_for_the_next_worker():
    # given a turn accepted with the player's key, and a worker that began its warm shutdown
    session = session_make(characters=[("hero", "Hero", "player")])
    execution = _execution_row(session, status=Execution.STATUS_QUEUED)
    control.provider_keys_put(str(execution.id), {"my-lab": "sk-player"})
    workers.worker_shutdown_mark(STOPPING)
    try:
        # when that worker claims it
        status = services.execution_run(execution_id=str(execution.id), hostname=STOPPING)
        # then it did not run it: it went back in the queue and its task was sent again
        assert status == Execution.STATUS_QUEUED
        assert inprocess.wait_idle(30)  # the next worker: the in-process pool
    finally:
        workers.worker_shutdown_clear(STOPPING)
    # and the next worker ran it once, from the start of its stream
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_COMMITTED
    assert TurnResult.objects.filter(session=session, committed=True).count() == 1
    frames = list(ExecutionFrame.objects.filter(execution=execution).order_by("index").values_list("index", "type"))
    assert frames[0][0] == 1 and [t for _, t in frames].count("execution.completed") == 1
    # and the key the request left went to the worker that ran it (taken on its claim)
    assert control.request_context_peek(str(execution.id)) is None
