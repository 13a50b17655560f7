"""Turns whose task never reached a worker (README "Faults"): the re-sender sends a still-queued
execution's task once after COVEL_EXECUTION_RESEND_AFTER_SECONDS, the claim keeps it from running
twice, and a request whose task the broker refuses answers 503 service_unavailable and records
nothing (spec 004 §Turn 执行; ARCHITECTURE step 3). Turns run on the in-process worker."""
from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from covel import inprocess
from tests.turns.test_actions_helpers import action_body, post_action, session_make, sse_frames, stream_bytes
from turns import services
from turns.models import Execution, ExecutionFrame, TurnResult
from turns.tasks import resend_executions, run_execution

pytestmark = pytest.mark.django_db(transaction=True)


def accepted_but_lost(session, *, age_seconds: float, request_id: str | None = None) -> Execution:
    """The row POST /api/actions writes for a request, as it stands when the task message was lost
    (a Redis restart emptied the queue): queued, never claimed, accepted ``age_seconds`` ago."""
    body = action_body(session.id, request_id=request_id or f"req-{uuid.uuid4().hex[:8]}",
                       actions=[{"kind": "say", "text": "Is anyone there?"}])
    request = services.action_request_parse(body)
    execution = Execution.objects.create(
        session=session, request_id=request.request_id, type=request.type,
        payload=services.action_request_admit(session, request), trace_id=uuid.uuid4().hex,
        turn_id=str(uuid.uuid4()), origin="player", request_hash=request.request_hash,
    )
    Execution.objects.filter(pk=execution.pk).update(created_at=timezone.now() - timedelta(seconds=age_seconds))
    execution.refresh_from_db()
    execution.body = body
    return execution


def test_lost_execution_is_sent_again_once_and_commits_once(settings):
    settings.COVEL_EXECUTION_RESEND_AFTER_SECONDS = 30
    # given: one accepted turn whose message was lost 40 s ago, one accepted just now
    session = session_make(characters=[("hero", "Hero", "player")])
    lost = accepted_but_lost(session, age_seconds=40)
    other = session_make(characters=[("hero", "Hero", "player")])
    recent = accepted_but_lost(other, age_seconds=1)
    # when: the beat task runs, twice
    first = resend_executions()
    assert inprocess.wait_idle(30)
    second = resend_executions()
    # then: only the idle one was sent, once, and its turn committed once
    assert (first, second) == (1, 0)
    lost.refresh_from_db()
    recent.refresh_from_db()
    assert lost.status == Execution.STATUS_COMMITTED
    assert TurnResult.objects.filter(execution=lost, committed=True).count() == 1
    assert (recent.status, recent.heartbeat_at) == (Execution.STATUS_QUEUED, None)
    # and the original message turning up late runs nothing
    frames = ExecutionFrame.objects.filter(execution=lost).count()
    assert run_execution(str(lost.pk)) is None
    assert ExecutionFrame.objects.filter(execution=lost).count() == frames
    assert TurnResult.objects.filter(execution=lost, committed=True).count() == 1
    connections.close_all()


def test_stream_of_a_lost_execution_waits_with_keepalives_then_ends_with_its_outcome(api, settings):
    import threading

    settings.COVEL_EXECUTION_RESEND_AFTER_SECONDS = 30
    # given: a client streaming (a replay of its requestId) a turn whose message was lost
    session = session_make(characters=[("hero", "Hero", "player")])
    lost = accepted_but_lost(session, age_seconds=40)
    timer = threading.Timer(0.5, resend_executions)
    # when: the re-sender runs while the stream waits
    timer.start()
    try:
        raw = stream_bytes(post_action(api, lost.body)).decode()
    finally:
        timer.join()
    # then: the head went out with a keep-alive, and the stream ended with the committed turn
    frames = sse_frames(raw)
    assert raw.startswith(": keep-alive\n\n")
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True
    assert Execution.objects.get(pk=lost.pk).status == Execution.STATUS_COMMITTED
    connections.close_all()


@pytest.mark.hosted_only
def test_actions_answers_503_and_records_nothing_when_the_broker_refuses_the_task(api, settings):
    from covel.celery import app
    from tests.turns.events_support import free_port

    # given: separate workers (no in-process pool) and a broker that is down
    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, request_id="req-broker-down")
    settings.COVEL_INPROCESS_WORKER = False
    broker_url = app.conf.broker_url
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"
    app._pool = None  # Celery's connection pools are built from broker_url on first use
    app.amqp._producer_pool = None
    try:
        # when
        response = post_action(api, body)
    finally:
        app.conf.broker_url = broker_url
        app._pool = None
        app.amqp._producer_pool = None
    # then: a clean 503 in the error envelope, and no execution recorded
    assert response.status_code == 503, response.content
    assert json.loads(response.content) == {
        "error": "The task queue is unavailable; nothing was recorded, retry shortly",
        "code": "service_unavailable",
        "details": {"retryable": True},
    }
    assert not Execution.objects.filter(request_id="req-broker-down").exists()
    # and the same request succeeds once the queue takes tasks again
    settings.COVEL_INPROCESS_WORKER = True
    frames = sse_frames(stream_bytes(post_action(api, body)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True
    assert Execution.objects.get(request_id="req-broker-down").status == Execution.STATUS_COMMITTED
    connections.close_all()
