"""The action stream of an execution: the worker-side sink and the web-side SSE relay.

Worker side (``ExecutionSink``): every frame the engine emits gets the next ``index``; persisted
frames are written to ``ExecutionFrame`` and then announced on the bus channel
``execution:<id>``; ephemeral frames (``narrative.delta``) only travel over the bus, tagged with
the index of the last persisted frame before them (``after``). Persisted frames are coalesced:
held back and written by one bulk INSERT (one transaction) per flush, after
``FLUSH_WINDOW_SECONDS`` (checked at each emit), at once at the natural boundaries of
``FLUSH_NOW_TYPES`` and the final frame, and at close (see ``ExecutionSink``). Each flush is
announced by one bus message carrying all its frames, ``{"k": "ps", "frames": [...]}`` (the relay
still accepts the one-frame ``{"k": "p", ...}`` of earlier releases).

Web side (``execution_stream``): an async generator of SSE chunks. It subscribes to the bus,
reads the persisted frames from the database (so a client never misses one, whatever the bus
lost), places each ephemeral frame right after the persisted frame it followed, numbers the
envelopes ``seq`` 1, 2, ..., writes the chunks of one wake-up as one body message, and ends
after the final frame (``execution.completed``, or the single ``error.occurred`` of a rejection).
While waiting it sends ``: keep-alive`` comments (the first one at once when nothing is stored
yet, so the response head goes out with it).
Wire shape (spec 004 §SSE 协议): ``data: <SseEnvelope JSON>\\n\\n``, no ``event:`` line.

Recovery (every stream ends; ARCHITECTURE "Things every instance must agree on"):

- Bus: a ``{"resync": true}`` after the Redis listener reconnected, or any message the relay does
  not understand, makes it re-read the stored frames; so does every quiet ``poll_seconds``. A read
  that found nothing new doubles the next quiet wait, up to ``QUIET_POLL_MAX_SECONDS`` (and never
  beyond the keep-alive interval); any bus message or frame brings it back to ``poll_seconds``, so a
  queued turn costs a read every few seconds instead of every second (issue 18), and a lost
  announcement is still found within ``QUIET_POLL_MAX_SECONDS``.
- Database: a read that fails or takes longer than ``DB_READ_TIMEOUT_SECONDS`` closes this
  request's connection (a connection the server dropped stays broken inside Django until it is
  closed) and is retried at the next poll, keep-alives going on meanwhile. When reads keep failing
  for ``COVEL_SSE_DB_OUTAGE_SECONDS`` with no frame arriving, or the execution row is gone, the
  relay ends the stream itself with one ``error.occurred`` (``stream_interrupted_payload``: code
  ``stream_interrupted``, ``retryable: true``). That frame is the relay's own, never stored: the
  execution may still finish; ``GET /api/sessions/:id/execution`` and the event stream tell how.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, AsyncIterator, Callable, NamedTuple

from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, transaction

from covel.sqlrows import rows_insert
from covel.times import wire_timestamp
from covel import eventbus, jsontext, metrics
from turns.event_types import event_type_check

logger = logging.getLogger("covel.turns.sse")

EXECUTION_COMPLETED = "execution.completed"
ERROR_OCCURRED = "error.occurred"
NARRATIVE_DELTA = "narrative.delta"
KEEPALIVE_CHUNK = ": keep-alive\n\n"
POLL_SECONDS = 1.0
#: Longest quiet wait between two safety-net reads of the stored frames (see module docstring).
QUIET_POLL_MAX_SECONDS = 4.0
STALE_CHECK_SECONDS = 5.0
#: Bound of one database read of the relay (frames, reaper check); a slower read counts as failed.
DB_READ_TIMEOUT_SECONDS = 5.0
#: ``error.occurred`` code of a stream the relay ended without the execution's final frame.
STREAM_INTERRUPTED = "stream_interrupted"
#: ``details.reason`` values of that frame.
INTERRUPTED_DATABASE_UNAVAILABLE = "database_unavailable"
INTERRUPTED_EXECUTION_MISSING = "execution_missing"
_MAX_HELD_EPHEMERAL = 2000
#: Seconds a persisted frame may wait in the sink for more frames to share its INSERT. Checked
#: whenever a frame is emitted (no timer thread: a flush never competes with the engine's own
#: transaction for the database). A turn that only computes (the scripted model, in-process tools)
#: is shorter than this, so its frames are written by two INSERTs: the ones emitted before the
#: commit right after it, the final frame with the outcome. Frames are announced only once stored,
#: so a client never sees a frame that a crash could lose; holding them costs latency, not frames.
FLUSH_WINDOW_SECONDS = 0.25
#: Frame types written together with everything before them as soon as they are emitted: the
#: frames a client must answer (interaction.requested) and errors. Before the engine waits on
#: anything outside this process (a model over HTTP) it calls ``flush`` itself (``Tracer.flush``).
FLUSH_NOW_TYPES: frozenset[str] = frozenset({"interaction.requested", ERROR_OCCURRED})


def execution_channel(execution_id: str) -> str:
    """The bus channel of an execution's frames."""
    return f"execution:{execution_id}"


class _PendingFrame(NamedTuple):
    """A persisted frame held back until the next flush (ExecutionSink._flush_locked)."""

    index: int
    type: str
    turn_id: str
    payload: dict[str, Any]
    timestamp: str
    is_final: bool


class ExecutionSink:
    """The EventSink the engine writes an execution's frames to (thread-safe).

    ``emit(type, payload, *, turn_id=None, ephemeral=False)``: ``type`` is a CovelEventType such
    as ``runtime.started``; ``payload`` a JSON-serialisable dict; ``turn_id`` the turn the frame
    belongs to (default: the execution's current turn, see ``turn_id``); ``ephemeral=True`` for
    frames a client may lose (``narrative.delta``): bus only, never stored.
    Called inside a ``transaction.atomic()`` block, a persisted frame is written after that
    transaction commits (or, if it rolls back, at the next flush outside it / at ``close``) so a
    frame never depends on the turn's own transaction; its position in the stream is kept.

    Coalescing: persisted frames are held in ``_pending`` and written by one bulk INSERT per
    flush, then announced on the bus by one ``{"k": "ps", "frames": [...]}`` message in index
    order (publish after persist, so a relay that
    reads the database on any announcement finds the frame). A flush happens when a frame of
    ``FLUSH_NOW_TYPES`` or the final frame is emitted, when the oldest held frame is at least
    ``FLUSH_WINDOW_SECONDS`` old at an emit, before an ephemeral frame is announced (its
    ``after`` frame is stored first), at ``close``/``complete``/``reject``/``end`` and after the
    enclosing transaction commits. Held frames are invisible to clients until then; nothing is
    dropped or reordered.
    """

    def __init__(self, *, execution_id: str, turn_id: str = "", start_index: int = 0) -> None:
        self.execution_id = str(execution_id)
        self.turn_id = turn_id
        self._index = start_index
        self._pending: list = []
        self._pending_since = 0.0  # time.monotonic() of the oldest frame in _pending
        self._lock = threading.RLock()
        self.persisted_count = 0
        self.emitted_count = 0
        self.engine_completed: dict[str, Any] | None = None
        self._announcement: dict[str, Any] | None = None  # committed by complete_in_transaction, not yet announced

    def emit(self, type: str, payload: dict[str, Any], *, turn_id: str | None = None, ephemeral: bool = False) -> None:
        if type == EXECUTION_COMPLETED:
            # The bridge sends the stream's one execution.completed itself (``complete``), after it
            # recorded the outcome; one from the engine would make two.
            self.engine_completed = {"payload": payload, "turn_id": turn_id}
            return
        self._emit(type, payload, turn_id=turn_id, ephemeral=ephemeral, is_final=False)

    def complete(self, payload: dict[str, Any], *, turn_id: str | None = None) -> None:
        """Emit the stream's one ``execution.completed`` (final) and flush everything."""
        self._emit(EXECUTION_COMPLETED, payload, turn_id=turn_id, ephemeral=False, is_final=True)
        self.close()

    def complete_in_transaction(self, payload: dict[str, Any], *, turn_id: str | None = None,
                                prefix: tuple[str, list[Any]] | None = None) -> None:
        """``complete`` inside the caller's transaction: the held frames and the final one are
        inserted by it (one statement; they commit or roll back with the caller's other writes,
        e.g. the execution's status), and announced on the bus by ``announce`` after it commits. ``prefix``: SQL
        run by the same statement (covel.sqlrows.rows_insert). Raises IntegrityError when another
        writer (the reaper) took these indexes."""
        with self._lock:
            self._index += 1
            self.emitted_count += 1
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(_PendingFrame(self._index, EXECUTION_COMPLETED, (turn_id if turn_id is not None else self.turn_id) or "",
                                               payload, wire_timestamp(), True))
            frames, self._pending = self._pending, []
            message = self._frames_write(frames, prefix=prefix)

        def held() -> None:
            self._announcement = message
        transaction.on_commit(held)

    def announce(self) -> None:
        """Announce the frames ``complete_in_transaction`` committed (the caller does this once it
        released the session lock, so a client that sees the stream end finds the session free)."""
        message, self._announcement = self._announcement, None
        if message is not None:
            self._publish(message)

    def reject(self, payload: dict[str, Any]) -> None:
        """Emit the single final ``error.occurred`` of a rejected execution and flush."""
        self._emit(ERROR_OCCURRED, payload, turn_id=None, ephemeral=False, is_final=True)
        self.close()

    def end(self) -> None:
        """Mark the last persisted frame as the stream's end (the engine emitted a rejection's
        ``error.occurred`` through ``emit``) and tell relays."""
        from turns.models import ExecutionFrame

        with self._lock:
            self._flush_locked()
            last = self._index
        if last:
            ExecutionFrame.objects.filter(execution_id=self.execution_id, index=last).update(is_final=True)
        self._publish({"k": "end", "index": last})

    def close(self) -> None:
        """Write every frame still held back (coalescing window, open or rolled-back transaction)."""
        with self._lock:
            self._flush_locked()

    def flush(self) -> None:
        """Write and announce the held frames now: the engine calls this before it waits on I/O
        outside the process (a model call over HTTP), so a client sees ``llm.calling`` while the
        model thinks. Inside a transaction it is a no-op (the frames follow its commit)."""
        self.close()

    def _emit(self, type: str, payload: dict[str, Any], *, turn_id: str | None, ephemeral: bool, is_final: bool) -> None:
        event_type_check(type)
        turn = turn_id if turn_id is not None else self.turn_id
        stamp = wire_timestamp()
        with self._lock:
            self.emitted_count += 1
            if ephemeral:
                self._flush_locked()
                self._publish({"k": "e", "after": self._index, "type": type, "turnId": turn, "payload": payload,
                               "timestamp": stamp})
                return
            self._index += 1
            now = time.monotonic()
            if not self._pending:
                self._pending_since = now
            self._pending.append(_PendingFrame(self._index, type, turn or "", payload, stamp, is_final))
            if connection.in_atomic_block:
                transaction.on_commit(self.close)
                return
            if is_final or type in FLUSH_NOW_TYPES or now - self._pending_since >= FLUSH_WINDOW_SECONDS:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending or connection.in_atomic_block:
            return
        frames, self._pending = self._pending, []
        try:
            message = self._frames_write(frames)
        except IntegrityError:
            # Another writer (the reaper after it judged this worker dead) took these indexes;
            # this execution's stream is already closed.
            logger.warning("execution %s: frames %s..%s already taken", self.execution_id, frames[0].index, frames[-1].index)
            return
        self._publish(message)

    def _frames_write(self, frames: list, *, prefix: tuple[str, list[Any]] | None = None) -> dict[str, Any]:
        """Insert ``frames``; returns their bus announcement. One announcement per flush, not one per
        frame (issue 18: a turn's ~90 frames were ~90 PUBLISH round trips and ~90 relay wake-ups)."""
        from turns.models import ExecutionFrame

        # Plain multi-row INSERT (covel.sqlrows): ~70 frames a full-game turn, and bulk_create's
        # per-field preparation was the largest ORM cost left in a turn (issue 18 profile).
        rows_insert(ExecutionFrame, ("execution", "index", "type", "turn_id", "payload", "timestamp", "is_final"),
                    [(self.execution_id, f.index, f.type, f.turn_id, f.payload, f.timestamp, f.is_final) for f in frames],
                    prefix=prefix)
        self.persisted_count += len(frames)
        return {"k": "ps", "frames": [
            {"index": frame.index, "type": frame.type, "turnId": frame.turn_id, "payload": frame.payload,
             "timestamp": frame.timestamp, "final": frame.is_final}
            for frame in frames
        ]}

    def _publish(self, message: dict[str, Any]) -> None:
        try:
            eventbus.publish(execution_channel(self.execution_id), message)
        except Exception:
            # The bus is a hint: persisted frames are read from the database anyway.
            logger.warning("execution %s: frame announcement failed", self.execution_id, exc_info=True)


def envelope_encode(envelope: dict[str, Any]) -> str:
    """One data-only SSE frame for ``envelope``."""
    return "data: " + jsontext.dumps(envelope) + "\n\n"


class _Relay:
    """Orders persisted and ephemeral frames of one execution and numbers the envelopes."""

    def __init__(self, *, request_id: str, trace_id: str, session_id: str, turn_id: str) -> None:
        self.request_id = request_id
        self.trace_id = trace_id
        self.session_id = session_id
        self.turn_id = turn_id
        self.seq = 0
        self.last_index = 0
        self.held: list[dict[str, Any]] = []
        self.finished = False

    def _envelope(self, type: str, turn_id: str, payload: dict[str, Any], timestamp: str) -> str:
        self.seq += 1
        return envelope_encode({
            "type": type,
            "requestId": self.request_id,
            "traceId": self.trace_id,
            "sessionId": self.session_id,
            "turnId": turn_id or self.turn_id,
            "flowId": self.trace_id,
            "seq": self.seq,
            "timestamp": timestamp,
            "payload": payload,
        })

    def persisted(self, frames: list[dict[str, Any]]) -> list[str]:
        """Chunks for persisted frames (dicts with index/type/turnId/payload/timestamp/final)."""
        out: list[str] = []
        for frame in frames:
            if self.finished:
                break
            if frame["index"] <= self.last_index:
                if frame["index"] == self.last_index and frame["final"]:
                    self.finished = True  # already sent; it was marked final afterwards
                continue
            out.extend(self._release_held(before=frame["index"]))
            self.last_index = frame["index"]
            out.append(self._envelope(frame["type"], frame["turnId"], frame["payload"], frame["timestamp"]))
            if frame["final"]:
                self.finished = True
                self.held.clear()
                return out
        out.extend(self._release_held(before=None))
        return out

    def ephemeral(self, message: dict[str, Any]) -> list[str]:
        """Chunks for an ephemeral frame: sent now, held until its predecessor arrived, or dropped
        when a later persisted frame was already sent (it would be out of order)."""
        if self.finished or message["after"] < self.last_index:
            return []
        if message["after"] > self.last_index:
            if len(self.held) < _MAX_HELD_EPHEMERAL:
                self.held.append(message)
            return []
        return [self._envelope(message["type"], message["turnId"], message["payload"], message["timestamp"])]

    def needs_catch_up(self, message: dict[str, Any]) -> bool:
        """Whether the stored frames must be read before ``message`` can be placed.

        ``p`` with a gap before it, ``e`` after a frame not sent yet, ``end``, the bus's
        ``{"resync": true}`` and any message of another shape (nothing to place: re-read).
        """
        kind = message.get("k")
        if kind == "ps" and _frames_batch(message):
            return message["frames"][0]["index"] > self.last_index + 1
        if kind == "p" and isinstance(message.get("index"), int):
            return message["index"] > self.last_index + 1
        if kind == "e" and isinstance(message.get("after"), int):
            return message["after"] > self.last_index
        return True

    def interrupted(self, reason: str) -> str:
        """The relay's own final chunk: ``error.occurred`` with ``stream_interrupted_payload``."""
        self.finished = True
        self.held.clear()
        return self._envelope(ERROR_OCCURRED, "", stream_interrupted_payload(reason), wire_timestamp())

    def _release_held(self, *, before: int | None) -> list[str]:
        out: list[str] = []
        keep: list[dict[str, Any]] = []
        for message in self.held:
            if message["after"] < self.last_index:
                continue
            if message["after"] == self.last_index and (before is None or before > self.last_index):
                out.append(self._envelope(message["type"], message["turnId"], message["payload"], message["timestamp"]))
            else:
                keep.append(message)
        self.held = keep
        return out


def _frames_batch(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a well-formed ``{"k": "ps", "frames": [...]}`` announcement: a
    non-empty list of frame dicts with consecutive int indexes (what ``_flush_locked`` sends)."""
    frames = message.get("frames")
    if not isinstance(frames, list) or not frames:
        return False
    first = frames[0].get("index") if isinstance(frames[0], dict) else None
    if not isinstance(first, int):
        return False
    return all(isinstance(f, dict) and f.get("index") == first + i for i, f in enumerate(frames))


def _frames_read(execution_id: str, after_index: int) -> list[dict[str, Any]]:
    """Frames after ``after_index``, plus that frame itself (to see a final mark set later)."""
    from turns.selectors import execution_frames_after

    after_index = max(after_index - 1, 0)
    return [
        {"index": f.index, "type": f.type, "turnId": f.turn_id, "payload": f.payload, "timestamp": f.timestamp,
         "final": f.is_final}
        for f in execution_frames_after(execution_id, after_index)
    ]


def stream_interrupted_payload(reason: str) -> dict[str, Any]:
    """Payload of the ``error.occurred`` a relay ends a stream with when it cannot deliver the
    execution's own final frame (spec 004 §SSE 协议: ``message``, ``code``, ``details``; plus
    ``retryable``). ``reason``: INTERRUPTED_DATABASE_UNAVAILABLE or INTERRUPTED_EXECUTION_MISSING.
    The turn may still finish (or have finished): read ``GET /api/sessions/:id/execution``."""
    return {
        "message": "The stream was interrupted before the turn's outcome could be read; "
                   "check the session's execution status, then retry if it did not commit",
        "code": STREAM_INTERRUPTED,
        "retryable": True,
        "details": {"reason": reason},
    }


def _db_guarded(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` on this thread's connection; on any failure close that connection first, so the
    next call opens a new one instead of reusing a connection the server dropped."""
    try:
        return fn(*args)
    except Exception:
        try:
            connection.close()
        except Exception:
            pass
        raise


def _execution_check(execution_id: str, reap: Callable[[str], Any]) -> bool:
    """Ask ``reap`` whether the worker died (it then stores the final frames); False when the
    execution row no longer exists (its session was deleted, or its request was withdrawn)."""
    from turns.models import Execution

    reap(execution_id)
    return Execution.objects.filter(pk=execution_id).exists()


async def execution_stream(
    *, execution_id: str, request_id: str, trace_id: str, session_id: str, turn_id: str = "",
    reap: Callable[[str], Any], keepalive_seconds: float | None = None, poll_seconds: float = POLL_SECONDS,
    db_outage_seconds: float | None = None, fresh: bool = False,
) -> AsyncIterator[str]:
    """Relay one execution's frames as SSE chunks until its final frame (see module docstring).

    Leaving early (client disconnect → the generator is closed) only stops the relay, never the
    execution. Every ``STALE_CHECK_SECONDS`` without progress it calls ``reap(execution_id)``
    (``turns.services.execution_reap_one``: did the worker die?), which then writes the final
    frames itself. The caller passes it so this relay stays below the services it serves.
    keepalive_seconds: default COVEL_SSE_KEEPALIVE_SECONDS; db_outage_seconds: default
    COVEL_SSE_DB_OUTAGE_SECONDS. Never raises: every ending is a final frame.
    fresh: the execution was created by this request, so the stream subscribes before its worker
    has stored much, if anything: the stored frames are not read first (issue 18: a read per turn);
    frames stored before the subscription show up as a gap before the first announcement (read
    then), and a stream that hears nothing reads at its first quiet poll, as every stream does.
    Database reads run thread-sensitive, i.e. on the request's own thread and connection, which
    Django closes when the response ends.
    """
    from django.conf import settings

    keepalive_s = settings.COVEL_SSE_KEEPALIVE_SECONDS if keepalive_seconds is None else keepalive_seconds
    outage_s = settings.COVEL_SSE_DB_OUTAGE_SECONDS if db_outage_seconds is None else db_outage_seconds
    relay = _Relay(request_id=request_id, trace_id=trace_id, session_id=session_id, turn_id=turn_id)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue = asyncio.Queue()
    failing_since: list[float] = []  # monotonic time of the first failed read of the current streak

    def on_message(message: dict[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, message)
        except RuntimeError:  # the loop is gone: the client left
            pass

    async def db(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        # (ok, value). A failure never leaves the generator: it is retried at the next poll and,
        # when it lasts, ends the stream with stream_interrupted.
        try:
            value = await asyncio.wait_for(sync_to_async(_db_guarded)(fn, *args), DB_READ_TIMEOUT_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not failing_since:
                failing_since.append(time.monotonic())
                logger.warning("execution %s: stream cannot read the database (%s: %s); retrying",
                               execution_id, exc.__class__.__name__, exc)
            return False, None
        if failing_since:
            logger.info("execution %s: stream reads the database again", execution_id)
            failing_since.clear()
        return True, value

    async def catch_up() -> tuple[bool, list[str]]:
        ok, frames = await db(_frames_read, execution_id, relay.last_index)
        return ok, relay.persisted(frames) if ok else []

    unsubscribe = await sync_to_async(eventbus.subscribe, thread_sensitive=False)(execution_channel(execution_id), on_message)
    metrics.stream_opened(metrics.STREAM_ACTION)
    try:
        _, chunks = (True, []) if fresh else await catch_up()
        if chunks:
            yield "".join(chunks)
        if not relay.finished and relay.seq == 0:
            # Nothing stored yet (a queued turn): send the response head now, not at the first frame.
            yield KEEPALIVE_CHUNK
        # last_frame: the last chunk of the execution (progress); last_output: the last bytes sent
        # (keep-alives included); last_check: the last reaper check.
        last_output = last_frame = last_check = time.monotonic()
        quiet_wait = poll_seconds
        quiet_max = max(poll_seconds, min(QUIET_POLL_MAX_SECONDS, keepalive_s))
        while not relay.finished:
            try:
                # Never past the next keep-alive, however long the quiet wait has grown.
                wait = min(quiet_wait, max(0.05, keepalive_s - (time.monotonic() - last_output)))
                message = await asyncio.wait_for(inbox.get(), timeout=wait)
            except asyncio.TimeoutError:
                message = None
            messages = [] if message is None else [message]
            while not inbox.empty():
                messages.append(inbox.get_nowait())
            chunks = []
            if messages:
                quiet_wait = poll_seconds
            else:
                ok, read = await catch_up()
                chunks.extend(read)
                # Nothing new and the read worked: wait longer before the next safety-net read.
                quiet_wait = min(quiet_wait * 2, quiet_max) if ok and not read else poll_seconds
            caught_up = False
            for msg in messages:
                if relay.finished:
                    break
                if not caught_up and relay.needs_catch_up(msg):
                    # One read per batch: every persisted frame announced so far is stored already.
                    chunks.extend((await catch_up())[1])
                    caught_up = True
                kind = msg.get("k")
                if kind == "ps" and _frames_batch(msg):
                    # Never across a gap (a failed or partial read): the next read brings it in order.
                    if msg["frames"][0]["index"] <= relay.last_index + 1:
                        chunks.extend(relay.persisted(msg["frames"]))
                elif kind == "p" and isinstance(msg.get("index"), int):
                    # One frame (a sink of an earlier release during a rolling deploy).
                    if msg["index"] <= relay.last_index + 1:
                        chunks.extend(relay.persisted([msg]))
                elif kind == "e" and isinstance(msg.get("after"), int):
                    chunks.extend(relay.ephemeral(msg))
            now = time.monotonic()
            if chunks:
                last_output = last_frame = now
                # One body message per wake-up: every frame that arrived together leaves in one write.
                yield "".join(chunks)
                continue
            if failing_since and now - max(failing_since[0], last_frame) >= outage_s:
                logger.warning("execution %s: no database for %ss; ending the stream as interrupted", execution_id, outage_s)
                yield relay.interrupted(INTERRUPTED_DATABASE_UNAVAILABLE)
                return
            if not failing_since and now - max(last_frame, last_check) >= STALE_CHECK_SECONDS:
                last_check = now
                ok, exists = await db(_execution_check, execution_id, reap)
                if ok and not exists:
                    yield relay.interrupted(INTERRUPTED_EXECUTION_MISSING)
                    return
            if now - last_output >= keepalive_s:
                last_output = now
                yield KEEPALIVE_CHUNK
    finally:
        metrics.stream_closed(metrics.STREAM_ACTION)
        unsubscribe()
