"""Process-to-process signals: wake-ups for SSE readers and ephemeral frames (``narrative.delta``).

API: ``publish(channel, message)`` and ``subscribe(channel, callback) -> unsubscribe``. Channels are
plain strings such as ``session:<id>`` (message ``{"seq": n}``: the session log grew to ``n``) and
``execution:<id>`` (frames of a running execution).

Backends: ``local`` (embedded default) dispatches inside this process; ``redis`` (hosted) publishes
through Redis pub/sub and one listener thread per process dispatches every message to this process's
subscribers, so every web process sees what any worker published. A signal is only a hint: readers
re-read the durable log, so a lost message delays but never drops an event.
Callbacks run on the publishing/listener thread and must not block (hand off to an event loop with
``loop.call_soon_threadsafe``). After the Redis listener reconnects, every channel with subscribers
gets ``RESYNC`` = ``{"resync": true}`` (messages sent during the outage are lost; readers re-read the
log). A subscriber must therefore accept, besides its channel's own shapes, this message on any
channel (``is_resync``), and treat any message it does not understand the same way: as "re-read".

The listener's Redis connection is named ``LISTENER_CLIENT_NAME_PREFIX + <pid>`` (``CLIENT LIST``),
so an operator, or a test, can find and drop exactly this process's subscription.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from typing import Any, Callable

from django.conf import settings

logger = logging.getLogger("covel.eventbus")

Callback = Callable[[dict[str, Any]], None]
_PREFIX = "covel:"
#: The message every subscriber gets after the Redis listener reconnected (see module docstring).
RESYNC: dict[str, Any] = {"resync": True}
#: ``CLIENT SETNAME`` of the listener connection, followed by this process's pid.
LISTENER_CLIENT_NAME_PREFIX = "covel-eventbus-"
#: Seconds between reconnect attempts of the listener while Redis is unreachable.
_RECONNECT_SECONDS = 0.5

_listeners: dict[str, set[Callback]] = defaultdict(set)
_lock = threading.Lock()
_redis_state: dict[str, Any] = {}


def start() -> None:
    """Start this process's bus listener now (web start-up). Hosted: raises RuntimeError when the
    Redis pub/sub subscription cannot be established — the server refuses to start instead of
    silently falling back to in-process delivery (spec 004 §多实例能力边界). Embedded: no-op."""
    if backend_name() == "redis":
        _ensure_redis_listener()


def backend_name() -> str:
    """``redis`` when REDIS_URL is configured and the store is pg, else ``local``."""
    return "redis" if settings.REDIS_URL and settings.STORE_BACKEND == "pg" else "local"


def subscribe(channel: str, callback: Callback) -> Callable[[], None]:
    """Register ``callback(message)`` for ``channel``; returns an idempotent unsubscribe function."""
    if backend_name() == "redis":
        _ensure_redis_listener()
    with _lock:
        _listeners[channel].add(callback)

    def unsubscribe() -> None:
        with _lock:
            listeners = _listeners.get(channel)
            if listeners is not None:
                listeners.discard(callback)
                if not listeners:
                    _listeners.pop(channel, None)

    return unsubscribe


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
        _redis_client().publish(_PREFIX + channel, json.dumps(message, ensure_ascii=False, default=str))
    else:
        dispatch_local(channel, message)


def is_resync(message: dict[str, Any]) -> bool:
    """True for the ``RESYNC`` message (the bus lost messages; re-read the durable state)."""
    return isinstance(message, dict) and message.get("resync") is True


def notify(session_id: str, seq: int) -> None:
    """Wake every reader of ``session_id``: its event log now reaches ``seq``."""
    publish(f"session:{session_id}", {"seq": seq})


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
    import time

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    connected_before = False
    outage_logged = False
    while True:
        client = None
        try:
            # No retries inside redis-py: its pub/sub would reconnect and re-subscribe silently, and
            # we would never learn that messages were lost (no RESYNC). Keep-alive and the health
            # check notice a Redis that went away without closing the socket.
            client = redis.Redis.from_url(
                url, socket_connect_timeout=2, socket_keepalive=True, health_check_interval=30,
                retry=Retry(NoBackoff(), 0), client_name=f"{LISTENER_CLIENT_NAME_PREFIX}{os.getpid()}",
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.psubscribe(_PREFIX + "*")
            # Wait for the subscription confirmation so publishes after subscribe() are not missed.
            while pubsub.get_message(timeout=1.0) is None and not pubsub.subscribed:
                pass
            ready.set()
            if outage_logged:
                logger.warning("event bus listener reconnected to Redis")
            outage_logged = False
            if connected_before:
                # Messages published while we were disconnected are gone: wake every reader so it
                # re-reads the durable log now rather than at its next poll.
                _dispatch_resync()
            connected_before = True
            for raw in pubsub.listen():
                if raw.get("type") != "pmessage":
                    continue
                channel = raw["channel"].decode() if isinstance(raw["channel"], bytes) else raw["channel"]
                try:
                    message = json.loads(raw["data"])
                except ValueError:
                    continue
                dispatch_local(channel[len(_PREFIX):], message)
        except Exception as exc:
            # One line per outage, not one per attempt.
            if not outage_logged:
                logger.warning("event bus listener lost Redis (%s: %s); reconnecting every %ss",
                               exc.__class__.__name__, exc, _RECONNECT_SECONDS)
                outage_logged = True
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
            time.sleep(_RECONNECT_SECONDS)


def _dispatch_resync() -> None:
    with _lock:
        channels = list(_listeners)
    for channel in channels:
        dispatch_local(channel, dict(RESYNC))
