"""GET /api/events/stream machinery (spec 004 §事件系统, §SSE 协议): feeds, replay, limits, frames.

Shape of one web process:

- One ``_Hub`` per event loop (daphne has one) holds one ``_Feed`` per watched session. A feed
  subscribes once to the bus channel ``session:<id>`` (``covel.eventbus``: Redis pub/sub hosted,
  in-process embedded), and on every wake-up reads the new rows of the durable log
  (``turns.SessionEvent``) with ONE query, renders each frame once, and keeps the newest
  ``_BUFFER_MAX`` in memory. Subscribers are async generators parked on the feed (one future
  each, ``_Feed.wait``); no thread and no Redis connection per subscriber.
- A hub-wide poll (``COVEL_EVENT_POLL_MS``) compares every watched session's ``event_seq`` with
  its feed in one query, so a lost wake-up delays but never drops an event.
- Replay: a subscriber whose cursor is older than the feed's buffer reads the log itself, in
  pages. Any gap (trimmed rows, other epoch, malformed or future cursor) becomes ``system.reset``.
- A wake-up that carries the committed rows (``eventbus.notify(..., events)``, shape
  ``turns.events.wire_events``) and continues the feed's head is rendered from the message: no log read on the
  live path (issue 18). Any other wake-up re-reads the log as above.
- Database reads run on a small fixed pool (``_DB_THREADS``); connect-time work runs
  thread-sensitive, which ``EventStreamThreadContext`` pins to one shared thread for all stream
  requests (otherwise Django would keep one idle thread per open stream).
- Django serves a stream request only up to the response head (middleware, authorization,
  limits); ``EventStreamThreadContext`` then streams the frames itself, so an open stream holds
  no Django request, response or per-request tasks (memory per idle stream: README "Event fan-out").
- Recovery (every stream ends; README "Faults"): a bus ``{"resync": true}`` (the Redis listener
  reconnected) or any wake-up without a usable ``seq`` re-reads the log. Every database read is
  bounded (``_DB_READ_TIMEOUT_SECONDS``) and a failing one closes its thread's connection, so the
  next read reconnects; the hub remembers since when reads fail. Streams keep their keep-alives
  meanwhile; when reads have failed for COVEL_SSE_DB_OUTAGE_SECONDS, every stream of the hub ends
  with ``error.occurred`` (code ``stream_interrupted``, ``retryable: true``, ``id:`` = the
  stream's cursor) and the client reconnects with that cursor.
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator, NamedTuple

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections
from django.http import StreamingHttpResponse

from covel.errors import ApiError
from covel import eventbus, metrics
from turns.events import (
    TOPIC_SYSTEM,
    TOPICS,
    TYPE_CONNECTED,
    TYPE_HEARTBEAT,
    TYPE_RESET,
    cursor_parse,
    session_events_oldest_seq,
)

logger = logging.getLogger("covel.events.stream")

STREAM_PATH = "/api/events/stream"
_BUFFER_MAX = 1024
_PAGE = 500
#: Frames of one wake-up are joined into body chunks of about this many bytes (one send each).
_CHUNK_BYTES = 64 * 1024
_DB_THREADS = 2
#: Bound of one database read (a slower one counts as failed; its thread may stay stuck).
_DB_READ_TIMEOUT_SECONDS = 5.0
TYPE_ERROR = "error.occurred"
#: Code of the error.occurred that ends a stream whose database stayed unreachable.
STREAM_INTERRUPTED = "stream_interrupted"

# Reasons carried in system.reset payloads.
RESET_INVALID_CURSOR = "invalid_cursor"
RESET_EPOCH_CHANGED = "epoch_changed"
RESET_CURSOR_AHEAD = "cursor_ahead"
RESET_CURSOR_EXPIRED = "cursor_expired"
RESET_SESSION_DELETED = "session_deleted"


# Client-visible errors of this endpoint (kept next to the limits they enforce).
class ConnectionLimitExceeded(ApiError):
    """429 connection_limit_exceeded: this session already has the maximum open streams here."""

    status = 429
    code = "connection_limit_exceeded"


class GlobalConnectionLimitExceeded(ApiError):
    """429 global_connection_limit_exceeded: this web process holds the maximum open streams."""

    status = 429
    code = "global_connection_limit_exceeded"


class RateLimitExceeded(ApiError):
    """429 rate_limit_exceeded: more than RATE_LIMIT_RPM stream requests a minute from one address."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, retry_after_seconds: float) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message="Too many requests", details={"retryAfterSeconds": round(retry_after_seconds, 1)})


# ---------------------------------------------------------------------------------------------
# Limits: counted per deployment in Redis when hosted, per process when embedded (README "Event fan-out")


class ConnectionSlot:
    """One counted open stream; ``release()`` is idempotent and thread-safe."""

    __slots__ = ("_registry", "session_id", "member", "_released")

    def __init__(self, registry: "ConnectionRegistry", session_id: str, member: str = "") -> None:
        self._registry = registry
        self.session_id = session_id
        self.member = member
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._registry._release(self.session_id, self.member)


class ConnectionRegistry:
    """Counts open event streams of this process, globally and per session (the embedded shape's
    caps, and the local view a hosted process keeps beside the deployment's counts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._per_session: dict[str, int] = {}
        self._total = 0

    def acquire(self, session_id: str) -> ConnectionSlot:
        """Count a new stream. Raises GlobalConnectionLimitExceeded (COVEL_SSE_MAX_CONNECTIONS) or
        ConnectionLimitExceeded (COVEL_SSE_MAX_CONNECTIONS_PER_SESSION), both 429."""
        with self._lock:
            if self._total >= settings.COVEL_SSE_MAX_CONNECTIONS:
                raise GlobalConnectionLimitExceeded(message="Too many event stream connections")
            count = self._per_session.get(session_id, 0)
            if count >= settings.COVEL_SSE_MAX_CONNECTIONS_PER_SESSION:
                raise ConnectionLimitExceeded(message="Too many event stream connections for this session")
            self._count_locked(session_id)
        return ConnectionSlot(self, session_id)

    def count(self, session_id: str | None = None) -> int:
        """Open streams in this process, of one session or in total."""
        with self._lock:
            return self._total if session_id is None else self._per_session.get(session_id, 0)

    def _count_locked(self, session_id: str) -> None:
        self._per_session[session_id] = self._per_session.get(session_id, 0) + 1
        self._total += 1

    def _release(self, session_id: str, member: str = "") -> None:
        with self._lock:
            count = self._per_session.get(session_id, 0) - 1
            if count > 0:
                self._per_session[session_id] = count
            else:
                self._per_session.pop(session_id, None)
            self._total = max(0, self._total - 1)


# Two sorted sets per deployment (member = one open stream, score = its lease's expiry in Redis
# time): every stream and each session's streams. Acquire drops expired leases and checks both caps
# in one script, so two processes can never both take the last slot. The hash tag keeps the keys in
# one slot for a Redis Cluster. Hand-rolled because no library we use counts leased members across
# processes (redis-py gives the script runner; the lease rule is ours: a process that dies without
# releasing frees its slots when their leases run out).
_ACQUIRE_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 2 end
local expiry = t + tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[4]) * 2))
redis.call('EXPIRE', KEYS[2], math.ceil(tonumber(ARGV[4]) * 2))
return 0
"""
_RENEW_LUA = """
local now = redis.call('TIME')
local expiry = tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
  redis.call('ZADD', KEYS[2], 'XX', expiry, ARGV[i])
end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) * 2))
redis.call('EXPIRE', KEYS[2], math.ceil(tonumber(ARGV[1]) * 2))
return 0
"""


class DeploymentConnectionRegistry(ConnectionRegistry):
    """The hosted shape's caps: open streams counted across every web process in Redis.

    Each slot is a leased member (``COVEL_SSE_SLOT_LEASE_SECONDS``, renewed every third of it by
    one keeper thread per process), so the slots of a process that crashed free themselves. When
    Redis cannot be reached the process falls back to its own counts (logged): a cap must not turn
    a Redis outage into refused streams.
    """

    _ALL = "covel:sse:{conn}:all"

    def __init__(self) -> None:
        super().__init__()
        self._members: dict[str, dict[str, None]] = {}  # session id -> its open members (here)
        self._scripts: dict[str, Any] = {}
        self._keeper: threading.Thread | None = None
        self._wake = threading.Event()
        self._gone: list[tuple[str, str]] = []  # released (session id, member) to remove in Redis

    @staticmethod
    def _session_key(session_id: str) -> str:
        return f"covel:sse:{{conn}}:s:{session_id}"

    def _script(self, name: str, source: str):
        script = self._scripts.get(name)
        if script is None:
            from covel.ratelimit import redis_client

            script = self._scripts[name] = redis_client().register_script(source)
        return script

    def acquire(self, session_id: str) -> ConnectionSlot:
        """Count a new stream in the deployment (Redis); same errors as ConnectionRegistry.acquire.
        Blocking (one Redis round trip): call it off the event loop."""
        import uuid

        member = f"{os.getpid()}:{uuid.uuid4().hex}"
        try:
            verdict = int(self._script("acquire", _ACQUIRE_LUA)(
                keys=[self._ALL, self._session_key(session_id)],
                args=[member, settings.COVEL_SSE_MAX_CONNECTIONS, settings.COVEL_SSE_MAX_CONNECTIONS_PER_SESSION,
                      settings.COVEL_SSE_SLOT_LEASE_SECONDS]))
        except Exception as exc:  # Redis outage: count in this process only
            logger.warning("stream connection caps fall back to this process (Redis: %s)", exc)
            return super().acquire(session_id)
        if verdict == 1:
            raise GlobalConnectionLimitExceeded(message="Too many event stream connections")
        if verdict == 2:
            raise ConnectionLimitExceeded(message="Too many event stream connections for this session")
        with self._lock:
            self._count_locked(session_id)
            self._members.setdefault(session_id, {})[member] = None
            self._keeper_start_locked()
        return ConnectionSlot(self, session_id, member)

    def _release(self, session_id: str, member: str = "") -> None:
        super()._release(session_id, member)
        if not member:
            return
        with self._lock:
            members = self._members.get(session_id, {})
            members.pop(member, None)
            if not members:
                self._members.pop(session_id, None)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a plain thread: give the slot back now
            try:
                from covel.ratelimit import redis_client

                pipe = redis_client().pipeline(transaction=False)
                pipe.zrem(self._ALL, member)
                pipe.zrem(self._session_key(session_id), member)
                pipe.execute()
                return
            except Exception as exc:  # left to the keeper (or to the lease)
                logger.warning("could not release a stream slot in Redis: %s", exc)
        with self._lock:
            self._gone.append((session_id, member))
            self._keeper_start_locked()
        self._wake.set()  # on the event loop: the keeper removes it (no blocking call here)

    def _keeper_start_locked(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper = threading.Thread(target=self._keep, name="covel-sse-slots", daemon=True)
            self._keeper.start()

    def _keep(self) -> None:
        lease = settings.COVEL_SSE_SLOT_LEASE_SECONDS
        while True:
            self._wake.wait(max(0.5, lease / 3))
            self._wake.clear()
            with self._lock:
                gone, self._gone = self._gone, []
                held = {sid: list(m) for sid, m in self._members.items()}
            try:
                from covel.ratelimit import redis_client

                if gone:
                    pipe = redis_client().pipeline(transaction=False)
                    for session_id, member in gone:
                        pipe.zrem(self._ALL, member)
                        pipe.zrem(self._session_key(session_id), member)
                    pipe.execute()
                renew = self._script("renew", _RENEW_LUA)
                for session_id, members in held.items():
                    renew(keys=[self._ALL, self._session_key(session_id)], args=[lease, *members])
            except Exception as exc:  # retried on the next round; leases outlive one missed renewal
                logger.warning("could not renew or release stream slots in Redis: %s", exc)
                with self._lock:
                    self._gone = gone + self._gone


def connection_registry_for_shape() -> ConnectionRegistry:
    """The registry this process uses: per deployment (Redis) when hosted, else per process."""
    if settings.STORE_BACKEND == "pg" and settings.REDIS_URL:
        return DeploymentConnectionRegistry()
    return ConnectionRegistry()


class RateLimiter:
    """Token bucket per client address: RATE_LIMIT_RPM requests a minute, bursts up to that many."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def hit(self, address: str) -> None:
        """Spend one request of ``address``. Raises RateLimitExceeded (429) when none is left."""
        rpm = settings.RATE_LIMIT_RPM
        now = time.monotonic()
        with self._lock:
            tokens, stamp = self._buckets.get(address, (float(rpm), now))
            tokens = min(float(rpm), tokens + (now - stamp) * rpm / 60.0)
            if tokens < 1.0:
                self._buckets[address] = (tokens, now)
                raise RateLimitExceeded((1.0 - tokens) * 60.0 / rpm)
            self._buckets[address] = (tokens - 1.0, now)
            if len(self._buckets) > 10_000:
                self._forget_idle(now, rpm)

    def reset(self) -> None:
        """Forget every address (a fresh minute for everyone)."""
        with self._lock:
            self._buckets.clear()

    def _forget_idle(self, now: float, rpm: int) -> None:
        full_after = 60.0  # any bucket untouched for a minute is full again
        for address, (_, stamp) in list(self._buckets.items()):
            if now - stamp >= full_after:
                del self._buckets[address]


connection_registry = connection_registry_for_shape()
rate_limiter = RateLimiter()


# ---------------------------------------------------------------------------------------------
# Connect-time work (sync; runs thread-sensitive)


@dataclass(frozen=True)
class StreamStart:
    """Where a new stream starts: after ``seq`` of ``epoch``; ``head`` is the log's newest seq.

    ``reset_reason`` is set when the client's cursor cannot be honoured; the stream then opens
    with ``system.reset`` and continues from ``head``.
    """

    session_id: str
    epoch: str
    head: int
    seq: int
    reset_reason: str | None = None


def topics_parse(raw: str | None) -> frozenset[str] | None:
    """``topics=a,b`` → frozenset; None (all topics) when absent or blank.

    Raises ApiError 400 ``Invalid topics: x, y`` for topics outside turns.events.TOPICS.
    """
    if raw is None:
        return None
    topics = [t.strip() for t in raw.split(",") if t.strip()]
    if not topics:
        return None
    unknown = [t for t in topics if t not in TOPICS]
    if unknown:
        raise ApiError(400, None, f"Invalid topics: {', '.join(unknown)}")
    return frozenset(topics)


def stream_start(request, session_id: str, raw_cursor: str | None) -> StreamStart:
    """Authorize the session (404 session_not_found, then 401 per tier) and place the cursor.

    No cursor: start at the newest event (live only). A cursor of another epoch, malformed, ahead
    of the log, or older than the oldest retained event: ``reset_reason`` set, start at head.
    """
    from sessions.auth import session_get_authorized

    session = session_get_authorized(request, session_id)
    epoch, head = session.event_epoch, session.event_seq
    if raw_cursor is None:
        return StreamStart(session.pk, epoch, head, head)
    cursor = cursor_parse(raw_cursor)
    reason = None
    if cursor is None:
        reason = RESET_INVALID_CURSOR
    elif cursor.epoch != epoch:
        reason = RESET_EPOCH_CHANGED
    elif cursor.seq > head:
        reason = RESET_CURSOR_AHEAD
    elif cursor.seq < head:
        oldest = session_events_oldest_seq(session.pk)
        if oldest is None or cursor.seq < oldest - 1:
            reason = RESET_CURSOR_EXPIRED
    if reason is not None:
        return StreamStart(session.pk, epoch, head, head, reason)
    return StreamStart(session.pk, epoch, head, cursor.seq)


# ---------------------------------------------------------------------------------------------
# Frames


def _timestamp(moment: datetime | None = None) -> str:
    moment = (moment or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def frame_bytes(event_type: str, data: dict, event_id: str | None = None) -> bytes:
    """One named SSE frame: ``event: <type>``, optional ``id:``, one ``data:`` line, blank line."""
    head = f"event: {event_type}\n" + (f"id: {event_id}\n" if event_id else "")
    return (head + "data: " + _dumps(data) + "\n\n").encode("utf-8")


def subscription_event(event_id: str, topic: str, event_type: str, session_id: str, payload: dict, at=None) -> dict:
    """The SubscriptionEvent envelope (spec 004 §SSE 协议 信封格式). ``at``: a datetime (now when
    None) or an already rendered ``timestamp`` string (``_timestamp``'s format)."""
    return {"id": event_id, "topic": topic, "type": event_type, "sessionId": session_id,
            "timestamp": at if isinstance(at, str) else _timestamp(at), "payload": payload}


def _system_frame(event_type: str, session_id: str, cursor: str, payload: dict, *, with_id: bool) -> bytes:
    data = subscription_event(cursor, TOPIC_SYSTEM, event_type, session_id, payload)
    return frame_bytes(event_type, data, cursor if with_id else None)


class _Row(NamedTuple):
    seq: int
    topic: str
    type: str
    frame: bytes


def _load_rows(session_id: str, epoch: str, after_seq: int, limit: int) -> list[_Row]:
    from turns.models import SessionEvent

    rows = (
        SessionEvent.objects.filter(session_id=session_id, seq__gt=after_seq)
        .order_by("seq")
        .values_list("seq", "topic", "type", "payload", "created_at")[:limit]
    )
    out = []
    for seq, topic, event_type, payload, created_at in rows:
        event_id = f"{epoch}:{seq}"
        data = subscription_event(event_id, topic, event_type, session_id, payload, created_at)
        out.append(_Row(seq, topic, event_type, frame_bytes(event_type, data, event_id)))
    return out


def _rows_from_wire(session_id: str, epoch: str, after_seq: int, events) -> list[_Row] | None:
    """The rows of an inline ``notify`` message with seq > ``after_seq``, rendered like
    ``_load_rows``; None when they cannot stand in for the log read (malformed, or not starting
    right after ``after_seq``: the reader then re-reads the log)."""
    if not isinstance(events, list):
        return None
    out: list[_Row] = []
    expected = after_seq + 1
    try:
        for event in events:
            seq, topic, event_type, payload, at = event["seq"], event["topic"], event["type"], event["payload"], event["at"]
            if not (isinstance(seq, int) and isinstance(topic, str) and isinstance(event_type, str) and isinstance(at, str)):
                return None
            if seq <= after_seq:
                continue
            if seq != expected:
                return None
            expected += 1
            event_id = f"{epoch}:{seq}"
            data = subscription_event(event_id, topic, event_type, session_id, payload, at)
            out.append(_Row(seq, topic, event_type, frame_bytes(event_type, data, event_id)))
    except (KeyError, TypeError):
        return None
    return out


def _session_heads(session_ids: list[str]) -> dict[str, tuple[str, int]]:
    from sessions.models import Session

    return {pk: (epoch, seq) for pk, epoch, seq in
            Session.objects.filter(pk__in=session_ids).values_list("pk", "event_epoch", "event_seq")}


# ---------------------------------------------------------------------------------------------
# Database pool shared by every feed of the process

_db_executor: ThreadPoolExecutor | None = None
_db_lock = threading.Lock()


def _db_pool() -> ThreadPoolExecutor:
    global _db_executor
    with _db_lock:
        if _db_executor is None:
            _db_executor = ThreadPoolExecutor(max_workers=_DB_THREADS, thread_name_prefix="covel-events-db")
        return _db_executor


def _connection_drop() -> None:
    try:
        connections["default"].close()
    except Exception:
        pass


def _db_call(fn, *args):
    try:
        return fn(*args)
    except (InterfaceError, OperationalError):
        # A connection the server dropped (restart, idle timeout): reconnect once.
        _connection_drop()
    except Exception:
        _connection_drop()
        raise
    try:
        return fn(*args)
    except Exception:
        # Still failing: leave no broken connection behind for the next read of this thread.
        _connection_drop()
        raise


async def _db(fn, *args):
    """``fn(*args)`` on the pool, bounded by _DB_READ_TIMEOUT_SECONDS (asyncio.TimeoutError)."""
    future = asyncio.get_running_loop().run_in_executor(_db_pool(), functools.partial(_db_call, fn, *args))
    return await asyncio.wait_for(future, _DB_READ_TIMEOUT_SECONDS)


def db_connections_close(timeout_seconds: float = 5.0) -> None:
    """Close the database connections held by this module's threads (test teardown, shutdown)."""
    executors = [e for e in (_db_executor, _sse_executor) if e is not None]
    for executor in executors:
        workers = executor._max_workers
        barrier = threading.Barrier(workers)

        def close_here() -> None:
            connections.close_all()
            try:
                barrier.wait(timeout_seconds)  # holds this thread so each job lands on its own thread
            except threading.BrokenBarrierError:
                pass

        futures = [executor.submit(close_here) for _ in range(workers)]
        for future in futures:
            future.result(timeout_seconds + 1)


# ---------------------------------------------------------------------------------------------
# Feeds and the per-loop hub


class _Feed:
    """The shared reader of one session's log for one event loop.

    Wake-ups: ``generation`` counts them; a subscriber notes it, reads, and parks with ``wait(gen)``
    (returns at once when a wake-up came in between). One future per parked subscriber and no
    per-feed ``asyncio.Event`` (its deque alone is 760 bytes, most feeds have one subscriber).
    """

    __slots__ = ("hub", "session_id", "epoch", "head", "floor", "buffer", "generation", "_waiters", "refs",
                 "closed_reason", "_refreshing", "_dirty", "_task", "_unsubscribe", "__weakref__")

    def __init__(self, hub: "_Hub", session_id: str, epoch: str, head: int) -> None:
        self.hub = hub
        self.session_id = session_id
        self.epoch = epoch
        self.head = head  # newest seq loaded
        self.floor = head  # the buffer holds exactly floor+1 .. head
        self.buffer: deque[_Row] | None = None  # created with the first row (most feeds stay idle)
        self.generation = 0  # wake-ups so far
        self._waiters: list[asyncio.Future] | None = None  # parked subscribers' futures
        self.refs = 0
        self.closed_reason: str | None = None
        self._refreshing = False
        self._dirty = False
        self._task: asyncio.Task | None = None
        self._unsubscribe = None

    def start(self) -> None:
        # Hosted, Redis confirms a new channel's SUBSCRIBE asynchronously (the loop must not wait):
        # the first read runs once it is live. Bound methods, not closures: less per feed.
        self._unsubscribe = eventbus.subscribe(f"session:{self.session_id}", self._on_message, ready=self._on_ready)

    def _on_message(self, message: dict) -> None:  # runs on the bus thread
        try:
            self.hub.loop.call_soon_threadsafe(self._on_signal, message)
        except RuntimeError:  # loop closed
            pass

    def _on_ready(self) -> None:  # the subscription is live (bus thread; inline when it already was)
        try:
            self.hub.loop.call_soon_threadsafe(self._on_live)
        except RuntimeError:  # loop closed
            pass

    async def wait(self, generation: int) -> None:
        """Park until the wake-up after ``generation`` (at once when it already happened)."""
        if self.generation != generation:
            return
        waiter = self.hub.loop.create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            waiters = self._waiters  # a wake-up swapped the list out: nothing to remove
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)  # cancelled (the client left)

    def _on_live(self) -> None:
        # Catch whatever committed between the connect-time read and the subscription going live.
        if self._unsubscribe is not None:
            self.refresh()

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def close(self, reason: str) -> None:
        """End every stream of this feed with a system.reset carrying ``reason``."""
        self.closed_reason = reason
        self.stop()
        self._wake()

    def _on_signal(self, message: dict) -> None:
        seq = message.get("seq")
        if isinstance(seq, int) and seq <= self.head:
            return
        if isinstance(seq, int) and "events" in message and self.closed_reason is None:
            # The committed rows came with the wake-up (eventbus.notify): no read of the log when
            # they continue right after what this feed holds and reach the announced head.
            rows = _rows_from_wire(self.session_id, self.epoch, self.head, message["events"])
            if rows and rows[-1].seq == seq:
                self._extend(rows)
                return
        self.refresh()

    def refresh(self) -> None:
        """Read new rows of the log (coalesced: at most one query in flight per feed)."""
        if self.closed_reason is not None:
            return
        if self._refreshing:
            self._dirty = True
            return
        self._refreshing = True
        self._task = self.hub.loop.create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        try:
            while True:
                self._dirty = False
                rows = await self.hub.db(_load_rows, self.session_id, self.epoch, self.head, _PAGE)
                if rows:
                    self._extend(rows)
                if len(rows) < _PAGE and not self._dirty:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The hub's poll notices the rows we missed once the database answers again.
            logger.warning("event feed of session %s could not read the log (%s); the poll retries",
                           self.session_id, exc.__class__.__name__)
        finally:
            self._refreshing = False
            self._task = None

    def _extend(self, rows: list[_Row]) -> None:
        if self.buffer is None:
            self.buffer = deque()
        for row in rows:
            if row.seq <= self.head:
                continue
            if row.seq != self.head + 1:
                # Rows between were trimmed before we read them: readers behind get system.reset.
                self.buffer.clear()
                self.floor = row.seq - 1
            self.buffer.append(row)
            self.head = row.seq
        while len(self.buffer) > _BUFFER_MAX:
            self.floor = self.buffer.popleft().seq
        self._wake()

    def _wake(self) -> None:
        self.generation += 1
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def buffered_after(self, cursor: int) -> list[_Row] | None:
        """Rows with seq > ``cursor`` when memory has them all ([] when none is newer); None when
        ``cursor`` is older than the buffer (``read_after`` reads the log)."""
        if cursor >= self.head:
            return []
        if cursor >= self.floor:
            return list(itertools.islice(self.buffer, cursor - self.floor, None))
        return None

    async def read_after(self, cursor: int) -> tuple[list[_Row], bool]:
        """Rows with seq > ``cursor`` (from memory when buffered, else a page from the log) and
        whether events right after ``cursor`` are gone (trimmed)."""
        rows = self.buffered_after(cursor)
        if rows is not None:
            return rows, False
        rows = await self.hub.db(_load_rows, self.session_id, self.epoch, cursor, _PAGE)
        if not rows or rows[0].seq != cursor + 1:
            return [], True
        return rows, False


class _Hub:
    """Feeds of one event loop, plus the safety-net poll."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.feeds: dict[str, _Feed] = {}
        self._poller: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        #: loop.time() of the first failed read of the current streak; None while reads succeed.
        self.db_failing_since: float | None = None

    async def db(self, fn, *args):
        """A database read for this hub's feeds (``_db``) that keeps ``db_failing_since``; raises
        what the read raised (asyncio.TimeoutError for a slow one)."""
        try:
            value = await _db(fn, *args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.db_failing_since is None:
                self.db_failing_since = self.loop.time()
                logger.warning("event streams cannot read the database (%s: %s); retrying",
                               exc.__class__.__name__, exc)
            raise
        if self.db_failing_since is not None:
            logger.info("event streams read the database again")
            self.db_failing_since = None
        return value

    def db_outage_seconds(self) -> float:
        """How long the reads have been failing (0 while they succeed)."""
        return 0.0 if self.db_failing_since is None else self.loop.time() - self.db_failing_since

    def attach(self, start: StreamStart) -> _Feed:
        # The stream's connect-time read just succeeded: whatever outage the hub remembers is over
        # (its streams may all have ended, leaving no poll to notice).
        self.db_failing_since = None
        feed = self.feeds.get(start.session_id)
        if feed is None or feed.epoch != start.epoch or feed.closed_reason is not None:
            feed = _Feed(self, start.session_id, start.epoch, start.head)
            self.feeds[start.session_id] = feed
            feed.start()
        feed.refs += 1
        if self._poller is None or self._poller.done():
            self._poller = self.loop.create_task(self._poll())
        if self._ticker is None or self._ticker.done():
            self._ticker = self.loop.create_task(self._tick())
        return feed

    def detach(self, feed: _Feed) -> None:
        feed.refs -= 1
        if feed.refs <= 0:
            feed.stop()
            if self.feeds.get(feed.session_id) is feed:
                del self.feeds[feed.session_id]

    async def _tick(self) -> None:
        # Keep-alive clock of every stream: a third of the shortest interval, so a comment or
        # heartbeat is at most that late.
        while self.feeds:
            interval = min(settings.COVEL_SSE_KEEPALIVE_SECONDS, settings.COVEL_SSE_HEARTBEAT_SECONDS) / 3.0
            await asyncio.sleep(max(0.2, interval))
            for feed in list(self.feeds.values()):
                feed._wake()

    async def _poll(self) -> None:
        while self.feeds:
            await asyncio.sleep(settings.COVEL_EVENT_POLL_MS / 1000.0)
            ids = list(self.feeds)
            try:
                heads: dict[str, tuple[str, int]] = {}
                for i in range(0, len(ids), 500):
                    heads.update(await self.db(_session_heads, ids[i:i + 500]))
            except asyncio.CancelledError:
                raise
            except Exception:
                continue  # logged by self.db once per outage; streams end after the outage bound
            for session_id in ids:
                feed = self.feeds.get(session_id)
                if feed is None:
                    continue
                head = heads.get(session_id)
                if head is None:
                    feed.close(RESET_SESSION_DELETED)
                    del self.feeds[session_id]
                elif head[0] != feed.epoch:
                    feed.close(RESET_EPOCH_CHANGED)
                    del self.feeds[session_id]
                elif head[1] > feed.head:
                    feed.refresh()


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub]" = weakref.WeakKeyDictionary()


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = _Hub(loop)
    return hub


# ---------------------------------------------------------------------------------------------
# The stream


def _connected_frame(start: StreamStart, topics: frozenset[str] | None) -> bytes:
    cursor = f"{start.epoch}:{start.seq}"
    topic_list = sorted(topics) if topics else "all"
    data = subscription_event(cursor, TOPIC_SYSTEM, TYPE_CONNECTED, start.session_id, {"topics": topic_list, "cursor": cursor})
    # The spec's example puts topics/cursor at the top level of the connected frame; keep both.
    data.update({"topics": topic_list, "cursor": cursor})
    # With the cursor as its id, a client that drops before the next event reconnects from here
    # (Last-Event-ID) instead of "live from now", and misses nothing.
    return frame_bytes(TYPE_CONNECTED, data, cursor)


def stream_interrupted_frame(session_id: str, cursor: str) -> bytes:
    """The ``error.occurred`` that ends a stream whose database stayed unreachable: payload
    ``{message, code: "stream_interrupted", retryable: true, details: {reason}}`` (spec 004 §SSE 协议
    error payload fields, plus ``retryable``); ``id:`` is the stream's cursor, to reconnect from."""
    payload = {
        "message": "The event stream lost its database; reconnect with the last event id",
        "code": STREAM_INTERRUPTED,
        "retryable": True,
        "details": {"reason": "database_unavailable"},
    }
    return _system_frame(TYPE_ERROR, session_id, cursor, payload, with_id=True)


async def event_stream(start: StreamStart, topics: frozenset[str] | None, slot: ConnectionSlot) -> AsyncIterator[bytes]:
    """Frames of one subscriber: ``system.connected`` (``id:`` = the cursor it starts from);
    ``system.reset`` when the cursor could not be honoured; then every event after the cursor in
    seq order, filtered by ``topics`` (``system.reset`` always passes), with ``: keep-alive``
    comments every COVEL_SSE_KEEPALIVE_SECONDS and ``system.heartbeat`` every
    COVEL_SSE_HEARTBEAT_SECONDS. Ends with ``system.reset`` when the session is deleted or
    re-epoched, or with ``stream_interrupted_frame`` once the database has been unreachable for
    COVEL_SSE_DB_OUTAGE_SECONDS. Releases ``slot`` when it ends (or the client leaves).
    """
    hub = _hub()
    feed = hub.attach(start)
    metrics.stream_opened(metrics.STREAM_EVENTS)
    try:
        session_id, epoch = start.session_id, start.epoch
        cursor = start.seq
        yield _connected_frame(start, topics)
        if start.reset_reason is not None:
            cursor = start.head
            yield _system_frame(TYPE_RESET, session_id, f"{epoch}:{cursor}", {"reason": start.reset_reason}, with_id=True)

        loop = asyncio.get_running_loop()
        keepalive_s = settings.COVEL_SSE_KEEPALIVE_SECONDS
        heartbeat_s = settings.COVEL_SSE_HEARTBEAT_SECONDS
        outage_s = settings.COVEL_SSE_DB_OUTAGE_SECONDS
        next_keepalive = loop.time() + keepalive_s
        next_heartbeat = loop.time() + heartbeat_s
        while True:
            generation = feed.generation
            if feed.closed_reason is not None:
                yield _system_frame(TYPE_RESET, session_id, f"{epoch}:{cursor}", {"reason": feed.closed_reason}, with_id=False)
                return
            if hub.db_outage_seconds() >= outage_s:
                yield stream_interrupted_frame(session_id, f"{epoch}:{cursor}")
                return
            rows, gap = feed.buffered_after(cursor), False  # live subscribers: memory, no await
            if rows is None:
                try:
                    rows, gap = await feed.read_after(cursor)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # A replay page the database could not give (counted by the hub): keep-alives go
                    # on below and the next wake-up tries again.
                    rows, gap = [], False
            if gap:
                cursor = feed.head
                yield _system_frame(TYPE_RESET, session_id, f"{epoch}:{cursor}", {"reason": RESET_CURSOR_EXPIRED}, with_id=True)
                continue
            if rows:
                # The frames of this wake-up in as few body chunks as _CHUNK_BYTES allows: one send
                # (one socket write) per subscriber per wake-up, not per event (a turn commits
                # dozens at once), without copying a whole replay page per subscriber.
                chunk: list[bytes] = []
                size = 0
                for row in rows:
                    if row.seq <= cursor:
                        continue
                    cursor = row.seq
                    if topics is None or row.topic in topics or row.type == TYPE_RESET:
                        chunk.append(row.frame)
                        size += len(row.frame)
                        if size >= _CHUNK_BYTES:
                            yield chunk[0] if len(chunk) == 1 else b"".join(chunk)
                            chunk, size = [], 0
                if chunk:
                    yield chunk[0] if len(chunk) == 1 else b"".join(chunk)
                continue
            now = loop.time()
            if now >= next_heartbeat:
                yield _system_frame(TYPE_HEARTBEAT, session_id, f"{epoch}:{cursor}", {}, with_id=False)
                next_heartbeat = now + heartbeat_s
                next_keepalive = now + keepalive_s
            elif now >= next_keepalive:
                yield b": keep-alive\n\n"
                next_keepalive = now + keepalive_s
            # No per-subscriber timer: the hub's ticker wakes every feed often enough for the
            # keep-alive deadlines above (timers per stream cost memory and CPU at fan-out).
            await feed.wait(generation)
    finally:
        metrics.stream_closed(metrics.STREAM_EVENTS)
        hub.detach(feed)
        slot.release()


class EventStreamResponse(StreamingHttpResponse):
    """``text/event-stream`` response that frees its connection slot even if never iterated.

    With ``request`` served through ``EventStreamThreadContext`` (real ASGI), Django only sends the
    head (status and headers after every middleware); the wrapper then streams the frames itself
    once Django has released the request. Elsewhere (e.g. Django's test client) Django streams them.
    """

    def __init__(self, start: StreamStart, topics: frozenset[str] | None, slot: ConnectionSlot, request=None) -> None:
        frames = event_stream(start, topics, slot)
        handoff = getattr(request, "scope", {}).get(_HANDOFF) if request is not None else None
        if handoff is not None:
            handoff.frames, handoff.slot = frames, slot
            content = _handoff_point(handoff)
        else:
            content = frames
        super().__init__(content, content_type="text/event-stream; charset=utf-8")
        self._slot = slot
        self._handoff = handoff
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"

    def close(self) -> None:
        if self._handoff is None or not self._handoff.ready:
            self._slot.release()  # else the handed-off stream owns the slot
        super().close()


# ---------------------------------------------------------------------------------------------
# ASGI: one shared thread for the sync parts of every stream request; streaming after Django

_sse_executor: ThreadPoolExecutor | None = None
_HANDOFF = "covel.event_stream.handoff"  # ASGI scope key


def _sse_thread() -> ThreadPoolExecutor:
    global _sse_executor
    with _db_lock:
        if _sse_executor is None:
            _sse_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="covel-sse")
        return _sse_executor


class _Handoff:
    """A stream passed from the view (``EventStreamResponse``) to ``EventStreamThreadContext``.

    ``armed``: Django began sending our (empty) body; ``ready``: it sent the head and we held back
    its end-of-body message, so the wrapper streams ``frames`` and owns ``slot``; ``gone``: the
    client disconnected (seen by Django, or later by the stream's watcher).
    """

    __slots__ = ("frames", "slot", "armed", "ready", "gone", "head_sent")

    def __init__(self) -> None:
        self.frames: AsyncIterator[bytes] | None = None
        self.slot: ConnectionSlot | None = None
        self.armed = False
        self.ready = False
        self.gone = False
        self.head_sent = False  # the server wrote the response head (with the first frame)


async def _handoff_point(handoff: _Handoff) -> AsyncIterator[bytes]:
    # The body Django iterates: nothing. Marks that the response being sent is ours.
    handoff.armed = True
    return
    yield b""  # unreachable; makes this an async generator


async def _client_gone(receive, handoff: _Handoff, main: asyncio.Task) -> None:
    # Reads the client's messages until it leaves, then ends the stream (cancels ``main``).
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except asyncio.CancelledError:
        raise  # the stream ended first
    except Exception:  # a broken receive means the client is gone too
        pass
    handoff.gone = True
    main.cancel()


async def _stream_after_django(handoff: _Handoff, receive, send) -> None:
    """Send ``handoff.frames`` as body chunks until the stream ends or the client disconnects."""
    frames = handoff.frames
    main = asyncio.current_task()
    gone = asyncio.get_running_loop().create_task(_client_gone(receive, handoff, main))
    try:
        try:
            async for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                if not handoff.head_sent:
                    handoff.head_sent = True
                    _server_head_release(send)
        finally:
            await frames.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not handoff.gone:
            raise
        main.uncancel()  # the cancellation was ours: the client went away
    finally:
        gone.cancel()
        handoff.slot.release()


def _server_head_release(send) -> None:
    """Let daphne's Twisted request drop the response headers once they are on the wire.

    Twisted keeps every header of the response head on the request object until the response ends
    (~1.5 KB per open stream with our security and CORS headers) and never reads them after
    writing the head. daphne's ``send`` is ``functools.partial(server.handle_reply, request)``;
    ``responseHeaders`` is a public attribute of ``twisted.web.http.Request``. Under any other
    server (or another shape of ``send``) this does nothing.
    """
    request = send.args[0] if isinstance(send, functools.partial) and send.args else None
    if getattr(request, "startedWriting", False) and hasattr(request, "responseHeaders"):
        from twisted.web.http_headers import Headers

        request.responseHeaders = Headers()


async def _django_part(app, scope, handoff: _Handoff, receive, send) -> None:
    # Django's share of a stream request, on its own task: the context variables Django and
    # asgiref set (thread-sensitive context, locals) go with it instead of staying in the context
    # of the long-lived stream task.
    async def receive_noting_disconnect():
        message = await receive()
        if message["type"] == "http.disconnect":
            handoff.gone = True
        return message

    async def send_head(message):
        if handoff.armed and not handoff.ready and message["type"] == "http.response.body" and not message.get("more_body", False):
            handoff.ready = True  # Django's end of our empty body: the stream continues after
            return
        await send(message)

    async with ThreadSensitiveContext(executor=_sse_thread()):
        await app({**scope, _HANDOFF: handoff}, receive_noting_disconnect, send_head)


class EventStreamThreadContext:
    """ASGI wrapper for /api/events/stream.

    - The request's thread-sensitive work (sync middleware, the authorization query,
      ``response.close``) runs on one shared thread. Django otherwise gives every request its own
      thread-sensitive thread, kept until the response ends: one idle thread per subscriber.
    - Django handles the request up to the response head, then finishes (request, response,
      middleware state and its two tasks per request are freed); this wrapper streams the frames
      itself, from a clean task context (Django's part runs on a task of its own). An open idle
      stream then costs the connection, one parked generator, one waiter future and one task
      waiting for the client's disconnect (18–19 KiB RSS under daphne, whose own floor is 12–13;
      README "Event fan-out", tests/bench/idle_streams.py).
    - Serve it as the outermost application (covel.asgi): it passes every other request through.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") != STREAM_PATH:
            return await self.app(scope, receive, send)
        handoff = _Handoff()
        try:
            await asyncio.get_running_loop().create_task(_django_part(self.app, scope, handoff, receive, send))
        except BaseException:
            if handoff.slot is not None:
                handoff.slot.release()
            raise
        del scope  # served as the outermost application (covel.asgi), nothing else holds it now
        if handoff.ready and not handoff.gone:
            await _stream_after_django(handoff, receive, send)
        elif handoff.slot is not None:
            # The head never went out (client gone, or another response), or the client left
            # while Django sent it: the stream never starts.
            handoff.slot.release()
