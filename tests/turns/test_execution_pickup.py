"""A turn no worker picks up ends its stream (issue 23, README "The hosted shape"): with Celery workers
(no in-process pool) and none consuming the ``turns`` queue, a queued execution older than
COVEL_EXECUTION_PICKUP_SECONDS is ended with ``error.occurred`` ``no_worker_available`` and stays
retryable; one on a queue that a worker consumes keeps waiting. The broker here is Celery's
in-memory transport: nothing consumes it, and ``celery inspect`` gets no reply."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from covel import workers
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns import services
from turns.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_workers_only(settings):
    """Tasks go to the broker (nobody consumes it); worker checks answer quickly and are not cached."""
    settings.COVEL_INPROCESS_WORKER = False
    settings.COVEL_WORKER_INSPECT_TIMEOUT_SECONDS = 0.2
    settings.COVEL_WORKER_CHECK_CACHE_SECONDS = 1
    settings.COVEL_EXECUTION_PICKUP_SECONDS = 30
    workers.queue_consumers_forget()
    yield
    workers.queue_consumers_forget()


def _accepted(api, session):
    response = post_action(api, action_body(session.id))
    assert response.status_code == 200
    return response, Execution.objects.get(session=session)


def test_a_turn_no_worker_picked_up_ends_its_stream_with_no_worker_available(api, celery_workers_only):
    # given an accepted turn that waited past the pickup bound with no worker on the turns queue
    session = session_make(characters=[("hero", "Hero", "player")])
    response, execution = _accepted(api, session)
    Execution.objects.filter(pk=execution.pk).update(created_at=timezone.now() - timedelta(seconds=31))
    # when the relay (or the beat) asks whether its worker is gone
    assert services.execution_reap_one(str(execution.id)) is True
    # then the stream ends with the code and committed: false
    frames = stream_read(response)
    assert [f["type"] for f in frames] == ["error.occurred", "execution.completed"]
    error = frames[0]["payload"]
    assert error["code"] == "no_worker_available" and error["retryable"] is True
    assert error["details"]["queue"] == "turns" and error["details"]["waitedSeconds"] >= 31
    assert frames[1]["payload"]["committed"] is False
    # and the execution is retryable, not running
    status = api.get(f"/api/sessions/{session.id}/execution").json()
    assert status["state"] == "interrupted" and status["retry"]["type"] == "submit_actions"
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_INTERRUPTED and execution.error["code"] == "no_worker_available"


def test_a_turn_within_the_pickup_bound_keeps_waiting(api, celery_workers_only):
    session = session_make(characters=[("hero", "Hero", "player")])
    _, execution = _accepted(api, session)
    assert services.execution_reap_one(str(execution.id)) is False
    assert Execution.objects.get(pk=execution.pk).status == Execution.STATUS_QUEUED


def test_the_in_process_worker_always_consumes_every_queue(settings):
    settings.COVEL_INPROCESS_WORKER = True
    consumers = workers.queue_consumers()
    assert all(consumers.has_consumer(queue) for queue in workers.QUEUES)
