"""Request rate limits counted per deployment (spec 004: "同一客户端对同一路径每分钟最多 N 次", 429
``rate_limit_exceeded`` with Retry-After).

Hosted (Redis configured): one counter per (limit, client, key) and minute in Redis, shared by every
web process, so a client spreading requests over processes meets the same limit. Embedded: the same
windows in this process (it is the only one). A fixed one-minute window is what the spec states
("per minute"); the counter keys expire with their window, so Redis holds only the current minute.
If Redis cannot be reached the request is let through and the failure logged: a rate limit must
not turn a Redis outage into an API outage (the routes themselves report the outage).

Client identity: ``REMOTE_ADDR``, or — when ``COVEL_CLIENT_IP_HEADER`` names a header a trusted
proxy sets (e.g. ``X-Forwarded-For``) — its first address.
"""
from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

from covel.errors import ApiError

logger = logging.getLogger("covel.ratelimit")
WINDOW_SECONDS = 60


class RateLimitExceeded(ApiError):
    """429 rate_limit_exceeded; ``retry_after_seconds`` goes to the Retry-After header."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(message=f"Too many requests; retry in {retry_after_seconds} s",
                         details={"retryAfterSeconds": retry_after_seconds})
        self.retry_after_seconds = retry_after_seconds
        self.headers = {"Retry-After": str(retry_after_seconds)}


def client_identity(request) -> str:
    """The address a limit counts: the trusted proxy header's first hop when configured, else REMOTE_ADDR."""
    header = settings.COVEL_CLIENT_IP_HEADER
    if header:
        forwarded = request.headers.get(header, "")
        first = forwarded.split(",", 1)[0].strip()
        if first:
            return first[:64]
    return request.META.get("REMOTE_ADDR") or "unknown"


_local: dict[str, int] = {}
_local_lock = threading.Lock()
_redis_state: dict[str, object] = {}


def redis_client():
    """This process's Redis client for counters (REDIS_URL; 1 s connect and socket timeouts)."""
    client = _redis_state.get("client")
    if client is None:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        _redis_state["client"] = client
    return client


def _count(key: str, window: int) -> int:
    """This window's count for ``key`` after one more hit."""
    if settings.STORE_BACKEND == "pg" and settings.REDIS_URL:  # the hosted shape: count per deployment
        client = redis_client()
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS * 2)
        count, _ = pipe.execute()
        return int(count)
    with _local_lock:
        if len(_local) > 50_000:  # old windows of idle clients
            current = f":{window}"
            for stale in [k for k in _local if not k.endswith(current)]:
                del _local[stale]
        _local[key] = _local.get(key, 0) + 1
        return _local[key]


def rate_limit_hit(request, name: str, *, per_minute: int, key: str = "") -> None:
    """Count one request of this client against limit ``name`` (and ``key``, e.g. the path).
    Raises RateLimitExceeded (429, Retry-After: seconds left in the window) past ``per_minute``."""
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    counter = f"covel:rl:{name}:{client_identity(request)}:{key}:{window}"
    try:
        count = _count(counter, window)
    except Exception as exc:  # Redis down: let the request through (see module docstring)
        logger.warning("rate limit %s not counted: %s", name, exc.__class__.__name__)
        _redis_state.pop("client", None)
        return
    if count > per_minute:
        raise RateLimitExceeded(max(1, int(WINDOW_SECONDS - (now % WINDOW_SECONDS)) + 1))


def rate_limits_reset() -> None:
    """Forget every counter of this deployment (tests): the in-process ones, and in the hosted shape
    the ``covel:rl:*`` keys of the configured Redis database."""
    with _local_lock:
        _local.clear()
    if settings.STORE_BACKEND == "pg" and settings.REDIS_URL:
        client = redis_client()
        keys = list(client.scan_iter(match="covel:rl:*", count=500))
        if keys:
            client.delete(*keys)
