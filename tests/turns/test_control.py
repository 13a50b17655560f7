"""POST /api/sessions/:id/abort and /steer (spec 004 §回合中控制（W4）): control requests reach the
worker running the turn over the control channel (turns.control) and are acknowledged; a steer
message reaches the story runtime's next model call and is saved with the committed turn.

Turns run on the in-process worker (and, in the hosted run, one test on a real Celery worker
process) against the real engine with the offline scripted model, slowed down with
COVEL_SCRIPTED_DELTA_DELAY_MS so a turn is still streaming when the abort arrives.
"""
from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from sessions.models import ChatMessage, Session, TurnMessage
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.worker_support import WORKER_START_SECONDS, celery_worker_process  # noqa: F401 (fixture)
from sessions.locks import session_lock
from tests.turns.prompt_support import model_calls_of, runtime_prompt
from turns.models import Execution, ExecutionFrame, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)

DELAY_MS = "40"
WAIT_SECONDS = 20


@pytest.fixture
def slow_model(monkeypatch):
    """Every streamed delta of the scripted model waits DELAY_MS first (also in a worker started later)."""
    monkeypatch.setenv("COVEL_SCRIPTED_DELTA_DELAY_MS", DELAY_MS)


def _player_session():
    return session_make(characters=[("hero", "Hero", "player")])


def _play_in_thread(session_id: str, request_id: str, results: dict) -> threading.Thread:
    def play() -> None:
        try:
            results[request_id] = stream_read(post_action(Client(), action_body(
                session_id, request_id=request_id, actions=[{"kind": "say", "text": "I walk into the fog."}])))
        finally:
            connections.close_all()

    thread = threading.Thread(target=play)
    thread.start()
    return thread


def _wait_for(condition, seconds: float = WAIT_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def _model_streaming(request_id: str):
    """The execution once its story runtime called the model (the narration is streaming)."""
    execution = Execution.objects.filter(request_id=request_id).first()
    if execution and ExecutionFrame.objects.filter(execution=execution, type="llm.calling").exists():
        return execution
    return None


def _post(client, path: str, body=None):
    return client.post(path, data=json.dumps(body if body is not None else {}), content_type="application/json")


def _assert_aborted_without_commit(session: Session, frames: list[dict], execution: Execution) -> None:
    types = [f["type"] for f in frames]
    assert types.count("execution.completed") == 1 and types[-1] == "execution.completed"
    assert frames[-1]["payload"]["committed"] is False
    assert frames[-1]["payload"]["abortReason"] == "aborted-by-player"
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_ABORTED
    assert ChatMessage.objects.filter(session=session).count() == 0
    assert TurnMessage.objects.filter(session=session).count() == 0
    assert not TurnResult.objects.filter(session=session, committed=True).exists()
    assert Session.objects.get(pk=session.pk).completed_player_turns == 0


def test_abort_stops_a_streaming_turn_and_commits_nothing(api, slow_model):
    # given a turn whose narration is streaming
    session = _player_session()
    results: dict = {}
    thread = _play_in_thread(session.id, "req-abort", results)
    execution = _wait_for(lambda: _model_streaming("req-abort"))
    # when
    response = _post(api, f"/api/sessions/{session.id}/abort")
    thread.join(WAIT_SECONDS)
    # then the stop was acknowledged by the worker and the stream ended uncommitted
    assert not thread.is_alive()
    assert response.status_code == 200, response.content
    execution.refresh_from_db()
    assert response.json() == {"ok": True, "requestIds": ["req-abort"], "turnId": execution.turn_id}
    frames = results["req-abort"]
    _assert_aborted_without_commit(session, frames, execution)
    assert frames[-1]["payload"]["turnId"] == execution.turn_id
    assert "narrative.completed" not in [f["type"] for f in frames]
    # and the status endpoint reports a retryable stop
    status = api.get(f"/api/sessions/{session.id}/execution").json()
    assert status["state"] == "failed" and status["abortReason"] == "aborted-by-player"


def test_abort_after_the_action_finished_is_409(api):
    # given a finished turn
    session = _player_session()
    frames = stream_read(post_action(api, action_body(session.id, request_id="req-done")))
    assert frames[-1]["payload"]["committed"] is True
    # when
    response = _post(api, f"/api/sessions/{session.id}/abort")
    # then
    assert response.status_code == 409
    assert response.json()["code"] == "no_active_turn"


def test_abort_with_no_turn_is_409_and_unknown_session_is_404(api):
    session = _player_session()
    idle = _post(api, f"/api/sessions/{session.id}/abort")
    missing = _post(api, "/api/sessions/no-such-session/abort")
    assert idle.status_code == 409 and idle.json()["code"] == "no_active_turn"
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"


def test_abort_of_an_action_waiting_for_the_session_lock_never_starts_it(api):
    # given an action claimed by the worker but waiting for the session lock
    session = _player_session()
    results: dict = {}
    with session_lock(session.id):
        thread = _play_in_thread(session.id, "req-waiting", results)
        execution = _wait_for(lambda: Execution.objects.filter(
            request_id="req-waiting", status=Execution.STATUS_RUNNING).first())
        # when
        response = _post(api, f"/api/sessions/{session.id}/abort")
    thread.join(WAIT_SECONDS)
    # then it was acknowledged as waiting and its stream is one uncommitted execution.completed
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "requestIds": ["req-waiting"]}
    frames = results["req-waiting"]
    assert [f["type"] for f in frames] == ["execution.completed"]
    assert frames[0]["payload"] == {"committed": False, "turnId": execution.turn_id, "origin": "player",
                                    "abortReason": "aborted-by-player"}
    _assert_aborted_without_commit(session, frames, execution)
    execution.refresh_from_db()
    assert execution.started_at is None
    assert not TurnResult.objects.filter(session=session).exists()


def test_abort_of_a_queued_action_no_worker_claimed_ends_its_stream(api):
    # given an execution row whose task no worker picked up yet (hosted: still in the broker)
    session = _player_session()
    execution = Execution.objects.create(
        session=session, request_id="req-queued", type="submit_actions",
        payload={"actions": [{"kind": "say", "text": "Hello", "seatId": "main", "actorId": "hero", "source": "player"}]},
        trace_id=uuid.uuid4().hex, turn_id=str(uuid.uuid4()), origin="player",
    )
    # when
    response = _post(api, f"/api/sessions/{session.id}/abort")
    # then the row is aborted directly and its stream holds only the completion
    assert response.status_code == 200
    assert response.json() == {"ok": True, "requestIds": ["req-queued"]}
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_ABORTED
    frames = list(ExecutionFrame.objects.filter(execution=execution).values_list("type", "is_final", "payload"))
    assert frames == [("execution.completed", True, {"committed": False, "turnId": execution.turn_id,
                                                     "origin": "player", "abortReason": "aborted-by-player"})]
    # and a late delivery of its task does nothing
    from turns.tasks import run_execution

    run_execution.apply(args=(str(execution.id),))
    execution.refresh_from_db()
    assert execution.status == Execution.STATUS_ABORTED
    assert ChatMessage.objects.filter(session=session).count() == 0


def test_abort_is_409_when_no_worker_acknowledges(api, settings):
    # given the database says a turn runs, but no process runs it (its worker is elsewhere or gone)
    settings.COVEL_CONTROL_ACK_SECONDS = 0.3
    session = _player_session()
    now = timezone.now()
    Execution.objects.create(
        session=session, request_id="req-orphan", type="submit_actions", payload={}, trace_id=uuid.uuid4().hex,
        turn_id=str(uuid.uuid4()), status=Execution.STATUS_RUNNING, claimed_at=now, heartbeat_at=now, started_at=now,
    )
    # when
    abort = _post(api, f"/api/sessions/{session.id}/abort")
    steer = _post(api, f"/api/sessions/{session.id}/steer", {"message": "Look behind you."})
    # then
    assert abort.status_code == 409 and abort.json()["code"] == "turn_not_reachable"
    assert steer.status_code == 409 and steer.json()["code"] == "turn_not_reachable"


def _assert_steer_merged_and_saved(session: Session, frames: list[dict], message: str) -> None:
    """The story runtime made one more model call whose request carries the steer message, and the
    committed turn saved it (chat record + prompt history) between the player input and the prose."""
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True
    model_facing = f"[steer] {message}"
    calls = model_calls_of(session.id, turn_ids={f.get("turnId") for f in frames if f.get("turnId")})
    steered = [c for c in calls if {"role": "user", "content": model_facing} in c["messages"]]
    assert steered and steered[0]["step"] >= 2  # it arrived while step 1 streamed
    applied = TraceEvent.objects.get(session=session, type="steer.applied")
    assert applied.payload["message"] == message and applied.payload["step"] == steered[0]["step"]
    assert {"role": "user", "content": model_facing} in runtime_prompt(session.id, applied.runtime_id)
    chat = list(ChatMessage.objects.filter(session=session).order_by("created_at", "id").values_list("role", "kind", "content"))
    story = ChatMessage.objects.get(session=session, kind="story")
    assert chat == [("user", "text", "I walk into the fog."), ("user", "steer", message), ("assistant", "story", story.content)]
    assert frames[[f["type"] for f in frames].index("narrative.completed")]["payload"]["text"] == story.content
    prompt = list(TurnMessage.objects.filter(session=session).order_by("id").values_list("role", "content"))
    assert prompt == [("user", {"text": "I walk into the fog."}), ("user", {"text": model_facing, "steer": True}),
                      ("assistant", {"text": story.content})]


def test_steer_reaches_the_story_runtimes_next_model_call_and_is_saved_with_the_turn(api, slow_model):
    # given a turn whose narration is streaming
    session = _player_session()
    results: dict = {}
    thread = _play_in_thread(session.id, "req-steer", results)
    execution = _wait_for(lambda: _model_streaming("req-steer"))
    # when the player interjects
    response = _post(api, f"/api/sessions/{session.id}/steer", {"message": "A bell rings somewhere."})
    thread.join(WAIT_SECONDS)
    # then the worker's engine took it, merged it into one more story model call and saved it
    assert not thread.is_alive()
    assert response.status_code == 200, response.content
    execution.refresh_from_db()
    assert response.json() == {"ok": True, "requestId": "req-steer", "turnId": execution.turn_id}
    _assert_steer_merged_and_saved(session, results["req-steer"], "A bell rings somewhere.")
    # and after the turn there is nothing to steer
    late = _post(api, f"/api/sessions/{session.id}/steer", {"message": "Too late."})
    assert late.status_code == 409 and late.json()["code"] == "no_active_turn"


def test_steer_of_a_turn_whose_story_can_take_no_more_messages_is_409_steer_closed(api):
    # given a running turn (the database row and its worker's control listener) whose story
    # runtime already made its last model call
    from turns.control import ExecutionControl

    session = _player_session()
    now = timezone.now()
    execution = Execution.objects.create(
        session=session, request_id="req-closed", type="submit_actions", payload={}, trace_id=uuid.uuid4().hex,
        turn_id=str(uuid.uuid4()), status=Execution.STATUS_RUNNING, claimed_at=now, heartbeat_at=now, started_at=now,
    )
    listener = ExecutionControl(str(execution.pk))
    try:
        listener.claimed()
        listener.started()
        listener.token.steer_take_or_close()
        # when
        response = _post(api, f"/api/sessions/{session.id}/steer", {"message": "Wait!"})
    finally:
        listener.close()
    # then the worker refused it and nothing reached the engine
    assert response.status_code == 409 and response.json()["code"] == "steer_closed"
    assert listener.token.steer_take() == []


def test_steer_checks_body_session_and_running_turn(api):
    session = _player_session()
    no_turn = _post(api, f"/api/sessions/{session.id}/steer", {"message": "Hello"})
    missing = _post(api, "/api/sessions/no-such-session/steer", {"message": "Hello"})
    blank = _post(api, f"/api/sessions/{session.id}/steer", {"message": "  "})
    extra = _post(api, f"/api/sessions/{session.id}/steer", {"message": "Hi", "priority": 1})
    not_text = _post(api, f"/api/sessions/{session.id}/steer", {"message": 3})
    too_long = _post(api, f"/api/sessions/{session.id}/steer", {"message": "x" * 100_001})
    assert no_turn.status_code == 409 and no_turn.json()["code"] == "no_active_turn"
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
    for response in (blank, extra, not_text, too_long):
        assert response.status_code == 400 and response.json()["code"] == "invalid_request_body"


@pytest.fixture
def slow_celery_worker(slow_model, celery_worker_process):  # noqa: F811 (fixture from worker_support)
    """A real Celery worker process started with the slowed-down scripted model."""
    return celery_worker_process


@pytest.mark.hosted_only
def test_abort_reaches_a_turn_running_on_a_real_celery_worker(api, slow_celery_worker):
    # given a turn streaming on a separate worker process (control travels over Redis)
    session = _player_session()
    results: dict = {}
    thread = _play_in_thread(session.id, "req-remote", results)
    execution = _wait_for(lambda: _model_streaming("req-remote"), WORKER_START_SECONDS)
    # when
    response = _post(api, f"/api/sessions/{session.id}/abort")
    thread.join(WORKER_START_SECONDS)
    # then the worker acknowledged, stopped the model stream and committed nothing
    assert response.status_code == 200, response.content
    assert response.json()["requestIds"] == ["req-remote"]
    execution.refresh_from_db()
    assert execution.claimed_by.split(":")[1] != str(__import__("os").getpid())
    _assert_aborted_without_commit(session, results["req-remote"], execution)


@pytest.mark.hosted_only
def test_steer_reaches_a_turn_running_on_a_real_celery_worker(api, slow_celery_worker):
    # given a turn streaming on a separate worker process (control travels over Redis)
    session = _player_session()
    results: dict = {}
    thread = _play_in_thread(session.id, "req-remote-steer", results)
    execution = _wait_for(lambda: _model_streaming("req-remote-steer"), WORKER_START_SECONDS)
    # when
    response = _post(api, f"/api/sessions/{session.id}/steer", {"message": "A bell rings somewhere."})
    thread.join(WORKER_START_SECONDS)
    # then that worker's story runtime took it into its next model call and saved it with the turn
    assert response.status_code == 200, response.content
    assert response.json()["requestId"] == "req-remote-steer"
    execution.refresh_from_db()
    assert execution.claimed_by.split(":")[1] != str(__import__("os").getpid())
    _assert_steer_merged_and_saved(session, results["req-remote-steer"], "A bell rings somewhere.")
