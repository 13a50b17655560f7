"""Process-to-process signals: wake-ups for SSE readers and ephemeral frames (``narrative.delta``).

API: ``publish(channel, message)`` and ``subscribe(channel, callback, *, ready=None) -> unsubscribe``.
Channels are plain strings such as ``session:<id>`` (message ``{"seq": n}``: the session log grew to
``n``) and ``execution:<id>`` (frames of a running execution).

Backends: ``local`` (embedded default) dispatches inside this process; ``redis`` (hosted) publishes
through Redis pub/sub, so every web process sees what any worker published. Each process holds one
listener connection and thread and ``SUBSCRIBE``s on it exactly the channels it has subscribers
for: the first subscriber of a channel subscribes it, the last one leaving unsubscribes it (README
"Event fan-out"). A process therefore receives only the messages of the sessions, executions and
control channels it serves — a worker between turns receives nothing — instead of every message of
the deployment (a ``PSUBSCRIBE covel:*`` cost a loaded web process 41% of its CPU, issue 18).
The listener thread starts with the first subscription (or ``start()``, web start-up).

A subscription is live once Redis confirmed it. ``subscribe`` without ``ready`` blocks until then
(bounded by ``_CONFIRM_SECONDS``; callers such as a control request publish right after and expect
the answer); with ``ready`` it returns at once and calls ``ready()`` (on the listener thread, or
inline when already live) — an event loop must not block, so a session feed re-reads the log from
its ``ready``. A signal is only a hint: readers re-read the durable log, so a lost message delays but
never drops an event.
Callbacks run on the publishing/listener thread and must not block (hand off to an event loop with
``loop.call_soon_threadsafe``). After the Redis listener reconnects, every channel with subscribers
is subscribed again and, once Redis confirmed it, gets ``RESYNC`` = ``{"resync": true}`` (messages
sent during the outage are lost; readers re-read the log). A subscriber must therefore accept,
besides its channel's own shapes, this message on any channel (``is_resync``), and treat any
message it does not understand the same way: as "re-read".

The listener's Redis connection is named ``LISTENER_CLIENT_NAME_PREFIX + <pid>`` (``CLIENT LIST``),
so an operator, or a test, can find and drop exactly this process's subscription.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, Callable

from django.conf import settings

from covel import jsontext

logger = logging.getLogger("covel.eventbus")

Callback = Callable[[dict[str, Any]], None]
_PREFIX = "covel:"
#: The message every subscriber gets after the Redis listener reconnected (see module docstring).
RESYNC: dict[str, Any] = {"resync": True}
#: ``CLIENT SETNAME`` of the listener connection, followed by this process's pid.
LISTENER_CLIENT_NAME_PREFIX = "covel-eventbus-"
#: Seconds between reconnect attempts of the listener while Redis is unreachable.
_RECONNECT_SECONDS = 0.5
#: Longest wait of a blocking ``subscribe`` for Redis to confirm the subscription (then it returns
#: anyway: the listener reconnects and sends RESYNC if the connection is broken).
_CONFIRM_SECONDS = 2.0
#: While subscribed, the listener PINGs after this many seconds without traffic and gives the
#: connection up when no PONG arrives within _PONG_SECONDS (a Redis gone without closing the socket).
_PING_SECONDS = 30.0
_PONG_SECONDS = 10.0

_listeners: dict[str, set[Callback]] = defaultdict(set)
_lock = threading.Lock()  # guards _listeners (taken by every dispatch)
_redis_state: dict[str, Any] = {}
# The listener connection's subscription state, guarded by _wire_lock (taken before _lock):
# pubsub (None while disconnected), broken (a SUBSCRIBE/UNSUBSCRIBE from a caller failed: the
# listener must reconnect), pending {channel: SUBSCRIBEs sent and not yet confirmed}, live (confirmed
# channels), ready {channel: [(token, fn)]} and resync (channels owed a RESYNC when confirmed).
_wire_lock = threading.Lock()
_wire: dict[str, Any] = {"pubsub": None, "broken": False, "pending": {}, "live": set(), "ready": {}, "resync": set()}


def start() -> None:
    """Start this process's bus listener now (web start-up). Hosted: raises RuntimeError when the
    Redis pub/sub subscription cannot be established — the server refuses to start instead of
    silently falling back to in-process delivery (spec 004 §多实例能力边界). Embedded: no-op."""
    if backend_name() == "redis":
        _ensure_redis_listener()


def backend_name() -> str:
    """``redis`` when REDIS_URL is configured and the store is pg, else ``local``."""
    return "redis" if settings.REDIS_URL and settings.STORE_BACKEND == "pg" else "local"


def subscribe(channel: str, callback: Callback, *, ready: Callable[[], None] | None = None) -> Callable[[], None]:
    """Register ``callback(message)`` for ``channel``; returns an idempotent unsubscribe function.

    Hosted, the first subscriber of ``channel`` in this process makes the listener ``SUBSCRIBE``
    it. Without ``ready`` this call returns once the subscription is live (at most
    ``_CONFIRM_SECONDS``); with ``ready`` it returns at once and ``ready()`` runs when it is live
    (listener thread; inline when it already is, and always inline embedded). Raises RuntimeError
    when the hosted listener cannot start (Redis unreachable).
    """
    if backend_name() != "redis":
        with _lock:
            _listeners[channel].add(callback)
        if ready is not None:
            ready()
        return _unsubscriber(channel, callback, None)
    _ensure_redis_listener()
    waited: threading.Event | None = None
    if ready is None and threading.current_thread() is not _redis_state.get("thread"):
        waited = threading.Event()
        ready = waited.set
    token = object()
    call_now = False
    with _wire_lock:
        with _lock:
            first = channel not in _listeners
            _listeners[channel].add(callback)
        if first:
            _wire_send("SUBSCRIBE", channel)
        if channel in _wire["live"] and not _wire["pending"].get(channel):
            call_now = True
        elif ready is not None:
            _wire["ready"].setdefault(channel, []).append((token, ready))
        sent = _wire["pubsub"] is not None and not _wire["broken"]
    if call_now and ready is not None:
        ready()
    elif waited is not None and sent and not waited.wait(_CONFIRM_SECONDS):
        logger.warning("event bus: Redis did not confirm the subscription of %s within %ss", channel, _CONFIRM_SECONDS)
    return _unsubscriber(channel, callback, token)


def _unsubscriber(channel: str, callback: Callback, token: object | None) -> Callable[[], None]:
    def unsubscribe() -> None:
        with _wire_lock:
            with _lock:
                listeners = _listeners.get(channel)
                if listeners is None or callback not in listeners:
                    return
                listeners.discard(callback)
                last = not listeners
                if last:
                    _listeners.pop(channel, None)
            waiting = _wire["ready"].get(channel)
            if waiting:
                waiting[:] = [entry for entry in waiting if entry[0] is not token]
                if not waiting:
                    _wire["ready"].pop(channel, None)
            if last and token is not None:
                _wire["live"].discard(channel)
                _wire["resync"].discard(channel)
                _wire_send("UNSUBSCRIBE", channel)

    return unsubscribe


def _wire_send(command: str, channel: str) -> None:
    """SUBSCRIBE/UNSUBSCRIBE ``channel`` on the listener connection (caller holds _wire_lock).

    Sent from the caller's thread: redis-py's PubSub serialises every command it sends under its own
    lock, and only the listener thread reads the connection (its health-check PINGs are off; the
    listener sends its own through the same locked path). A failed send marks the connection broken:
    the listener reconnects, subscribes every channel that has subscribers and sends RESYNC.
    While disconnected nothing is sent; the reconnect subscribes what is wanted then.
    """
    pubsub = _wire["pubsub"]
    if pubsub is None or _wire["broken"]:
        return
    try:
        if command == "SUBSCRIBE":
            pubsub.subscribe(_PREFIX + channel)
            _wire["pending"][channel] = _wire["pending"].get(channel, 0) + 1
        else:
            pubsub.unsubscribe(_PREFIX + channel)
    except Exception as exc:
        logger.warning("event bus: %s %s failed (%s); the listener reconnects", command, channel, exc.__class__.__name__)
        _wire["broken"] = True


def subscribed_channels() -> list[str]:
    """Channels this process's listener holds on Redis now (confirmed), sorted; [] embedded."""
    with _wire_lock:
        return sorted(_wire["live"])


def dispatch_local(channel: str, message: dict[str, Any]) -> None:
    """Deliver ``message`` to this process's subscribers of ``channel``; a failing callback is logged."""
    with _lock:
        callbacks = list(_listeners.get(channel, ()))
    for callback in callbacks:
        try:
            callback(message)
        except Exception:
            logger.exception("eventbus callback failed on %s", channel)


def publish(channel: str, message: dict[str, Any]) -> None:
    """Send ``message`` (JSON-serialisable) to every subscriber of ``channel`` in every process.

    Raises redis.RedisError when the hosted backend cannot publish (callers decide what a failed
    fan-out means; the durable log is already written).
    """
    if backend_name() == "redis":
        _redis_client().publish(_PREFIX + channel, jsontext.dumps(message))
    else:
        dispatch_local(channel, message)


def is_resync(message: dict[str, Any]) -> bool:
    """True for the ``RESYNC`` message (the bus lost messages; re-read the durable state)."""
    return isinstance(message, dict) and message.get("resync") is True


#: Largest encoded ``notify`` message (characters of JSON) that carries its events inline; a bigger
#: commit publishes ``{"seq": n}`` alone and readers read the rows from the log.
NOTIFY_INLINE_MAX = 32 * 1024


def notify(session_id: str, seq: int, events: list[dict[str, Any]] | None = None) -> None:
    """Wake every reader of ``session_id``: its event log now reaches ``seq``.

    Message ``{"seq": seq}``; with ``events`` (the committed rows in the log's wire shape,
    ``turns.event_stream.wire_events``: consecutive seqs ending at ``seq``) it is
    ``{"seq": seq, "events": [...]}`` when that encodes to at most NOTIFY_INLINE_MAX characters
    (always embedded, where nothing is encoded), so readers render the frames without reading the
    log back (issue 18: delivery latency). The rows are still only a hint: a reader that cannot use
    them (gap, other shape) re-reads the log.
    Raises like ``publish``.
    """
    channel = f"session:{session_id}"
    if events:
        message = {"seq": seq, "events": events}
        if backend_name() != "redis":
            dispatch_local(channel, message)
            return
        data = jsontext.dumps(message)
        if len(data) <= NOTIFY_INLINE_MAX:
            _redis_client().publish(_PREFIX + channel, data)
            return
    publish(channel, {"seq": seq})


def _redis_client():
    import redis

    client = _redis_state.get("client")
    if client is None or _redis_state.get("url") != settings.REDIS_URL:
        # Bounded timeouts: a hung Redis turns into a fan-out failure, not a stuck commit.
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2, health_check_interval=30
        )
        _redis_state["client"] = client
        _redis_state["url"] = settings.REDIS_URL
    return client


def _ensure_redis_listener() -> None:
    with _lock:
        thread = _redis_state.get("thread")
        if thread is not None and thread.is_alive() and _redis_state.get("listen_url") == settings.REDIS_URL:
            return
        ready = threading.Event()
        thread = threading.Thread(target=_listen, args=(settings.REDIS_URL, ready), name="covel-eventbus", daemon=True)
        _redis_state["thread"] = thread
        _redis_state["listen_url"] = settings.REDIS_URL
        thread.start()
    if not ready.wait(5):
        raise RuntimeError("event bus: Redis pub/sub listener did not start (is REDIS_URL reachable?)")


def _listen(url: str, ready: threading.Event) -> None:
    import os

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    me = threading.current_thread()
    connected_before = False
    outage_logged = False
    while _redis_state.get("thread") is me:  # a listener for another REDIS_URL replaced this one
        client = pubsub = None
        try:
            # No retries inside redis-py (its pub/sub would reconnect and re-subscribe silently, and
            # we would never learn that messages were lost: no RESYNC) and no redis-py health check
            # (its PING is sent outside PubSub's lock; we send our own, see _PING_SECONDS).
            client = redis.Redis.from_url(
                url, socket_connect_timeout=2, socket_timeout=5, socket_keepalive=True, health_check_interval=0,
                retry=Retry(NoBackoff(), 0), client_name=f"{LISTENER_CLIENT_NAME_PREFIX}{os.getpid()}",
            )
            client.ping()  # reachable (start() fails otherwise); the pub/sub reuses this connection
            pubsub = client.pubsub()
            with _wire_lock:
                with _lock:
                    wanted = list(_listeners)
                _wire.update(pubsub=pubsub, broken=False, pending={}, live=set())
                # Messages published while we were disconnected are gone: every reader re-reads
                # the durable log as soon as its channel is live again.
                _wire["resync"] = set(wanted) if connected_before else set()
                if wanted:
                    pubsub.subscribe(*(_PREFIX + channel for channel in wanted))
                    _wire["pending"] = dict.fromkeys(wanted, 1)
            ready.set()
            if outage_logged:
                logger.warning("event bus listener reconnected to Redis")
            outage_logged = False
            connected_before = True
            last_traffic = time.monotonic()
            ping_sent: float | None = None
            while _redis_state.get("thread") is me:
                if _wire["broken"]:
                    raise redis.ConnectionError("a subscription command failed")
                if not pubsub.subscribed and (_wire["pending"] or _wire["live"]):
                    # redis-py clears this flag when it reads the confirmation of an UNSUBSCRIBE that
                    # left it no channel, even if a caller's SUBSCRIBE raced in: keep reading then.
                    pubsub.subscribed_event.set()
                raw = pubsub.get_message(timeout=1.0)
                now = time.monotonic()
                if raw is not None:
                    last_traffic = now
                    ping_sent = None
                    _handle(raw)
                elif not pubsub.subscribed:
                    ping_sent = None  # nothing to lose while nothing is subscribed
                elif ping_sent is not None and now - ping_sent > _PONG_SECONDS:
                    raise redis.TimeoutError("no PONG from Redis")
                elif ping_sent is None and now - last_traffic > _PING_SECONDS:
                    pubsub.ping()
                    ping_sent = now
        except Exception as exc:
            # One line per outage, not one per attempt.
            if not outage_logged:
                logger.warning("event bus listener lost Redis (%s: %s); reconnecting every %ss",
                               exc.__class__.__name__, exc, _RECONNECT_SECONDS)
                outage_logged = True
        with _wire_lock:
            if _wire["pubsub"] is pubsub:
                _wire.update(pubsub=None, live=set(), pending={})
        for closable in (pubsub, client):
            try:
                if closable is not None:
                    closable.close()
            except Exception:
                pass
        if _redis_state.get("thread") is me:
            time.sleep(_RECONNECT_SECONDS)


def _handle(raw: dict[str, Any]) -> None:
    """One message read by the listener: a publish (dispatched) or a subscription confirmation."""
    kind = raw.get("type")
    if kind not in ("message", "subscribe"):
        return
    channel = raw["channel"].decode() if isinstance(raw["channel"], bytes) else raw["channel"]
    channel = channel[len(_PREFIX):]
    if kind == "message":
        try:
            message = jsontext.loads(raw["data"])
        except ValueError:
            return
        dispatch_local(channel, message)
        return
    with _wire_lock:
        left = _wire["pending"].get(channel, 0) - 1
        if left > 0:  # a later SUBSCRIBE of this channel is still on its way
            _wire["pending"][channel] = left
            return
        _wire["pending"].pop(channel, None)
        with _lock:
            wanted = channel in _listeners
        if not wanted:
            return
        _wire["live"].add(channel)
        waiting = _wire["ready"].pop(channel, [])
        resync = channel in _wire["resync"]
        _wire["resync"].discard(channel)
    for _, fn in waiting:
        try:
            fn()
        except Exception:
            logger.exception("eventbus ready callback failed on %s", channel)
    if resync:
        dispatch_local(channel, dict(RESYNC))
