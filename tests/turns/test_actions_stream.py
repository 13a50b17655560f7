"""The action stream end to end on the embedded worker: SSE shape, rejections inside the stream,
idempotent replays, serialization of concurrent actions and a client leaving mid-stream
(spec 004 §Actions（SSE 桥接）, §SSE 协议). Turns run on the in-process worker against the real
engine with the offline scripted provider, so these tests use committed transactions."""
from __future__ import annotations

import json
import threading

import pytest
from django.db import connections
from django.test import AsyncClient, Client

from covel import inprocess
from tests.turns.test_actions_helpers import (
    action_body, post_action, session_make, sse_frames, stream_bytes, stream_read,
)
from sessions.locks import session_lock
from tests.turns.events_support import db
from turns.models import Execution, ExecutionFrame

pytestmark = pytest.mark.django_db(transaction=True)

ENVELOPE_KEYS = {"type", "requestId", "traceId", "sessionId", "turnId", "flowId", "seq", "timestamp", "payload"}


def _player_session(**kwargs):
    return session_make(characters=[("hero", "Hero", "player")], **kwargs)


def test_stream_is_data_only_envelopes_ending_with_one_execution_completed(api):
    # given
    session = _player_session()
    body = action_body(session.id, request_id="req-shape", actions=[{"kind": "say", "text": "I light a lantern."}])
    # when
    response = post_action(api, body)
    raw = stream_bytes(response).decode()
    # then
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert "event:" not in raw
    frames = sse_frames(raw)
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    execution = Execution.objects.get()
    for frame in frames:
        assert set(frame) == ENVELOPE_KEYS
        assert frame["requestId"] == "req-shape"
        assert frame["sessionId"] == session.id
        assert frame["traceId"] == frame["flowId"] == execution.trace_id
        assert frame["timestamp"].endswith("Z")
    types = [f["type"] for f in frames]
    assert types.count("execution.completed") == 1 and types[-1] == "execution.completed"
    assert frames[-1]["payload"] == {"committed": True, "turnId": execution.turn_id, "origin": "player"}
    assert frames[-1]["turnId"] == execution.turn_id
    assert execution.status == Execution.STATUS_COMMITTED
    assert execution.outcome == frames[-1]["payload"]
    stored = list(ExecutionFrame.objects.filter(execution=execution).order_by("index").values_list("type", flat=True))
    assert stored == [t for t in types if t != "narrative.delta"]


def test_repeated_request_id_replays_without_running_again(api):
    # given: a finished request
    session = _player_session()
    body = action_body(session.id, request_id="req-twice")
    first = stream_read(post_action(api, body))
    inprocess.wait_idle()
    frames_before = ExecutionFrame.objects.count()
    # when: the same request again
    second = stream_read(post_action(api, body))
    # then: the stored stream (persisted frames) is replayed; nothing ran twice
    assert Execution.objects.count() == 1
    assert ExecutionFrame.objects.count() == frames_before
    assert [f["type"] for f in second] == [f["type"] for f in first if f["type"] != "narrative.delta"]
    assert second[-1]["payload"] == first[-1]["payload"]
    assert first[-1]["payload"]["committed"] is True


def test_busy_session_streams_a_single_session_busy(api, settings):
    # given: someone else holds the session's lock for longer than the wait bound
    settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 0.3
    session = _player_session()
    with session_lock(session.id):
        # when
        frames = stream_read(post_action(api, action_body(session.id)))
    # then
    assert [f["type"] for f in frames] == ["error.occurred"]
    assert frames[0]["payload"] == {"message": "Session is busy, please retry", "code": "session_busy"}
    assert Execution.objects.get().status == Execution.STATUS_REJECTED


def test_checks_run_again_inside_the_lock(api):
    # given: the request passes its checks while another holder keeps the lock
    session = _player_session()
    result: dict = {}
    lock_held = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        with session_lock(session.id):
            lock_held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    lock_held.wait(5)

    def post() -> None:
        try:
            result["frames"] = stream_read(post_action(Client(), action_body(session.id, actions=[{"kind": "say", "text": "hi"}])))
        finally:
            connections.close_all()

    poster = threading.Thread(target=post)
    poster.start()
    _wait_for(lambda: Execution.objects.filter(status=Execution.STATUS_RUNNING).exists())
    # when: the seat goes away before the lock frees
    type(session).objects.filter(pk=session.pk).update(seats=[{"id": "gm", "controller": "human", "role": "host", "characters": []}])
    release.set()
    holder.join(10)
    poster.join(20)
    # then
    frames = result["frames"]
    assert [f["type"] for f in frames] == ["error.occurred"]
    assert frames[0]["payload"]["code"] == "seat_not_found"


def test_input_already_committed_is_refused_in_the_stream(api):
    from turns.models import TurnResult

    session = _player_session()
    TurnResult.objects.create(session=session, turn_id="t-old", committed=True, input_message_id="msg-7")
    body = action_body(session.id)
    body["payload"]["inputMessageId"] = "msg-7"
    frames = stream_read(post_action(api, body))
    assert [f["type"] for f in frames] == ["error.occurred"]
    assert frames[0]["payload"]["code"] == "input_already_committed"
    assert TurnResult.objects.filter(session=session).count() == 1


def test_concurrent_actions_on_one_session_serialize(api):
    # given
    session = _player_session()
    results: dict[str, list] = {}

    def play(request_id: str, text: str) -> None:
        try:
            body = action_body(session.id, request_id=request_id, actions=[{"kind": "say", "text": text}])
            results[request_id] = stream_read(post_action(Client(), body))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=play, args=(f"req-{i}", f"Line {i}")) for i in range(2)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # then: both committed, and no frame of one lies between the frames of the other
    assert all(r[-1]["payload"]["committed"] is True for r in results.values())
    owners = [
        f.execution_id for f in ExecutionFrame.objects.exclude(type="execution.completed").order_by("id")
    ]
    first = owners[0]
    switch = owners.index(next(o for o in owners if o != first))
    assert all(o == first for o in owners[:switch]) and all(o != first for o in owners[switch:])


async def test_client_leaving_mid_stream_does_not_stop_the_turn():
    from asgiref.sync import sync_to_async

    # given
    session = await sync_to_async(_player_session)()
    client = AsyncClient()
    response = await client.post("/api/actions", data=json.dumps(action_body(session.id)), content_type="application/json")
    assert response.status_code == 200
    iterator = response.streaming_content.__aiter__()
    first = await iterator.__anext__()
    while first.startswith(b":"):  # keep-alive comments (the first one opens the response at once)
        first = await iterator.__anext__()
    # when: the client goes away after the first frame
    await iterator.aclose()
    # then: the turn still runs to its commit and the stream's frames are all stored
    assert await sync_to_async(inprocess.wait_idle)(30)
    execution = await sync_to_async(Execution.objects.get)()
    assert first.decode().startswith("data: ")
    assert execution.status == Execution.STATUS_COMMITTED
    last = await sync_to_async(lambda: ExecutionFrame.objects.filter(execution=execution).order_by("-index").first())()
    assert (last.type, last.payload["committed"], last.is_final) == ("execution.completed", True, True)
    await sync_to_async(connections.close_all)()


def _wait_for(predicate, timeout_seconds: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


# --- recovery: bus resyncs and database errors (ARCHITECTURE "Every stream ends") ----------------
#
# These streams relay an execution no worker of this process runs: the row is written as "running
# elsewhere" and the request is sent again with the same requestId (a replay), so only the relay
# is at work. Its frames are then stored the way a worker stores them, without a bus announcement,
# so the relay learns of them only by reading the database.


def _execution_elsewhere(body: dict) -> Execution:
    """The Execution row of ``body`` as a worker in another process has it: claimed, heartbeating."""
    from django.utils import timezone

    from turns.services import action_request_parse

    request = action_request_parse(body)
    now = timezone.now()
    return Execution.objects.create(
        session_id=request.session_id, request_id=request.request_id, type=request.type, payload=request.payload,
        trace_id="trace-elsewhere", turn_id="turn-elsewhere", origin="player", request_hash=request.request_hash,
        status=Execution.STATUS_RUNNING, claimed_by="elsewhere:1:1", claimed_at=now, heartbeat_at=now,
        started_at=now,
    )


def _frames_store(execution_id, *, committed: bool = True) -> None:
    """Store a short turn's frames and outcome, as the worker does, with no bus announcement."""
    outcome = {"committed": committed, "turnId": "turn-elsewhere", "origin": "player"}
    stamp = "2026-01-01T00:00:00.000Z"
    ExecutionFrame.objects.bulk_create([
        ExecutionFrame(execution_id=execution_id, index=1, type="execution.started", turn_id="turn-elsewhere",
                       payload={}, timestamp=stamp),
        ExecutionFrame(execution_id=execution_id, index=2, type="execution.completed", turn_id="turn-elsewhere",
                       payload=outcome, timestamp=stamp, is_final=True),
    ])
    Execution.objects.filter(pk=execution_id).update(status=Execution.STATUS_COMMITTED, outcome=outcome)


async def _stream_open(body: dict):
    """POST /api/actions (a replay of the stored execution) → the async chunk iterator."""
    response = await AsyncClient().post("/api/actions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.streaming_content.__aiter__()


async def _stream_rest(iterator, timeout_seconds: float = 20.0) -> tuple[list[str], list[dict]]:
    """Read to the end: (every chunk, the envelopes)."""
    import asyncio

    chunks: list[str] = []

    async def drain() -> None:
        async for chunk in iterator:
            chunks.append(chunk.decode() if isinstance(chunk, bytes) else chunk)

    await asyncio.wait_for(drain(), timeout_seconds)
    return chunks, sse_frames("".join(chunks))


async def _relay_connection():
    """The raw DB-API connection of the thread the relay's reads run on (thread-sensitive calls
    outside a request share one thread, as the test client's streams do), opened if needed."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def raw():
        connection.ensure_connection()
        return connection.connection

    return await sync_to_async(raw)()


async def test_bus_resync_makes_the_relay_read_the_stored_frames_and_end():
    from asgiref.sync import sync_to_async

    from covel import eventbus
    from turns.sse import execution_channel

    # given: a stream waiting for an execution whose worker is elsewhere
    session = await sync_to_async(_player_session)()
    body = action_body(session.id, request_id="req-resync")
    execution = await sync_to_async(_execution_elsewhere)(body)
    stream = await _stream_open(body)
    first = await stream.__anext__()
    # when: its frames are stored while the bus is away, then the bus comes back with a resync,
    # and another message of no known shape arrives too
    await db(_frames_store, execution.pk)  # another thread, as a worker's
    await sync_to_async(eventbus.publish)(execution_channel(str(execution.pk)), eventbus.RESYNC)
    await sync_to_async(eventbus.publish)(execution_channel(str(execution.pk)), {"unexpected": 1})
    chunks, frames = await _stream_rest(stream)
    # then: the head went out at once (a keep-alive), and the stream ends with the stored frames
    assert first == b": keep-alive\n\n"
    assert [f["type"] for f in frames] == ["execution.started", "execution.completed"]
    assert [f["seq"] for f in frames] == [1, 2]
    assert frames[-1]["payload"] == {"committed": True, "turnId": "turn-elsewhere", "origin": "player"}
    await sync_to_async(connections.close_all)()


async def test_relay_recovers_when_the_server_drops_its_database_connection(settings):
    from asgiref.sync import sync_to_async

    # given: a stream waiting for an execution whose worker is elsewhere
    session = await sync_to_async(_player_session)()
    body = action_body(session.id, request_id="req-dropped")
    execution = await sync_to_async(_execution_elsewhere)(body)
    stream = await _stream_open(body)
    assert await stream.__anext__() == b": keep-alive\n\n"
    # when: the relay's connection is ended under it (PostgreSQL: by the server, as a restart does;
    # SQLite: closed underneath Django), then the frames are stored
    raw = await _relay_connection()
    if settings.STORE_BACKEND == "pg":
        from tests.fault_support import pg_backend_terminate

        await sync_to_async(pg_backend_terminate)(raw.info.backend_pid)
    else:
        raw.close()
    await db(_frames_store, execution.pk)  # another thread, as a worker's
    chunks, frames = await _stream_rest(stream)
    # then: the relay opened a new connection and delivered the stored final frame
    assert [f["type"] for f in frames] == ["execution.started", "execution.completed"]
    assert frames[-1]["payload"]["committed"] is True
    assert await _relay_connection() is not raw
    await sync_to_async(connections.close_all)()


@pytest.mark.hosted_only
async def test_relay_ends_with_a_retryable_error_when_the_database_stays_away(settings):
    import asyncio
    import time

    from asgiref.sync import sync_to_async

    from tests.fault_support import pg_connections_refused

    settings.COVEL_SSE_DB_OUTAGE_SECONDS = 2
    settings.COVEL_SSE_KEEPALIVE_SECONDS = 1
    # given: a stream waiting for an execution whose worker is elsewhere
    session = await sync_to_async(_player_session)()
    body = action_body(session.id, request_id="req-outage")
    execution = await sync_to_async(_execution_elsewhere)(body)
    stream = await _stream_open(body)
    assert await stream.__anext__() == b": keep-alive\n\n"
    raw = await _relay_connection()
    # when: the database ends the relay's connection and refuses new ones
    with pg_connections_refused(terminate=[raw.info.backend_pid]):
        started = time.monotonic()
        chunks, frames = await _stream_rest(stream, timeout_seconds=15)
        elapsed = time.monotonic() - started
    # then: keep-alives while it waited, then one retryable error.occurred ends the stream
    assert chunks.count(": keep-alive\n\n") >= 1, chunks
    assert [f["type"] for f in frames] == ["error.occurred"]
    assert frames[0]["seq"] == 1 and frames[0]["requestId"] == "req-outage"
    assert frames[0]["payload"] == {
        "message": frames[0]["payload"]["message"], "code": "stream_interrupted", "retryable": True,
        "details": {"reason": "database_unavailable"},
    }
    assert 2 <= elapsed < 8, elapsed
    # and the execution itself was not touched by the relay
    await asyncio.sleep(0)
    assert (await sync_to_async(Execution.objects.get)(pk=execution.pk)).status == Execution.STATUS_RUNNING
    assert not await sync_to_async(ExecutionFrame.objects.filter(execution_id=execution.pk).exists)()
    await sync_to_async(connections.close_all)()
