"""Which Celery workers consume which queue, and the "this worker is shutting down" mark.

Queue consumers (``queue_consumers``): the hosted shape asks the workers themselves over the
broker (``celery inspect active_queues``: a worker answers with the queues its consumer is
subscribed to) and caches the answer in this process for COVEL_WORKER_CHECK_CACHE_SECONDS, so
``GET /api/health`` and the action-stream relays of one web process ask at most once per window.
An inspect waits COVEL_WORKER_INSPECT_TIMEOUT_SECONDS for replies; no reply means no worker. The
embedded shape (``COVEL_INPROCESS_WORKER``) always has its in-process pool on every queue.

Shutdown mark (``worker_shutdown_mark`` / ``worker_shutdown_requested``): Celery's
``worker_shutting_down`` signal fires in a worker's main process while prefork children run the
tasks, so the mark lives in Redis (hosted) where a child can see it, in this process otherwise.
The turn and job services read it to put work that has not started committing back in the queue
for the next worker (spec 004 §服务生命周期 关闭期间各类工作怎样处理, §作业是怎么执行的).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings

logger = logging.getLogger("covel.workers")

#: The queues of the hosted shape (covel.settings.base CELERY_TASK_ROUTES) and what each carries.
QUEUES: dict[str, str] = {
    "turns": "player turns (turns.run_execution)",
    "jobs": "detached runtime jobs and the beat's maintenance tasks",
    "media": "media cleanup",
    "worldgen": "AI world generation",
}
INPROCESS_WORKER = "in-process"
SHUTDOWN_PREFIX = "covel:worker-shutdown:"
#: How long a shutdown mark survives (a restarted worker with the same name clears it on start).
SHUTDOWN_MARK_SECONDS = 3600


@dataclass(frozen=True)
class QueueConsumers:
    """One look at the workers: ``queues`` maps every known queue to the worker node names that
    consume it (empty list: none); ``workers`` lists every worker that answered; ``error`` is set
    when the broker could not be asked (then nothing is known); ``checked_at`` is time.time()."""

    queues: dict[str, list[str]] = field(default_factory=dict)
    workers: list[str] = field(default_factory=list)
    error: str | None = None
    checked_at: float = 0.0

    def has_consumer(self, queue: str) -> bool:
        """True when at least one worker consumes ``queue`` (False also when unknown)."""
        return bool(self.queues.get(queue))


_cache: dict[str, QueueConsumers] = {}
_cache_lock = threading.Lock()


def _inspect() -> QueueConsumers:
    from celery import current_app as app  # covel.celery's app (covel/__init__ imports it)

    timeout = float(settings.COVEL_WORKER_INSPECT_TIMEOUT_SECONDS)
    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
    except Exception as exc:  # the broker is unreachable: nothing is known
        return QueueConsumers(queues={q: [] for q in QUEUES}, error=f"{type(exc).__name__}: {exc}",
                              checked_at=time.time())
    queues: dict[str, list[str]] = {q: [] for q in QUEUES}
    for worker, subscribed in sorted(replies.items()):
        for queue in subscribed or []:
            name = queue.get("name") if isinstance(queue, dict) else None
            if name:
                queues.setdefault(name, []).append(worker)
    return QueueConsumers(queues=queues, workers=sorted(replies), checked_at=time.time())


def queue_consumers(*, max_age_seconds: float | None = None) -> QueueConsumers:
    """Who consumes each queue now (see module docstring); at most ``max_age_seconds`` old
    (default COVEL_WORKER_CHECK_CACHE_SECONDS). Never raises; one inspect at a time per process."""
    if settings.COVEL_INPROCESS_WORKER:
        return QueueConsumers(queues={q: [INPROCESS_WORKER] for q in QUEUES}, workers=[INPROCESS_WORKER],
                              checked_at=time.time())
    max_age = settings.COVEL_WORKER_CHECK_CACHE_SECONDS if max_age_seconds is None else max_age_seconds
    with _cache_lock:
        cached = _cache.get("consumers")
        if cached is not None and time.time() - cached.checked_at < max_age:
            return cached
        fresh = _inspect()
        _cache["consumers"] = fresh
    return fresh


def queue_consumers_metrics():
    """Prometheus metric family ``covel_queue_consumers`` [queue]: workers consuming each queue at
    the last check (a covel.metrics scrape collector; the jobs app installs it)."""
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily("covel_queue_consumers", "Workers consuming each queue (last worker check).",
                               labels=["queue"])
    for queue, names in sorted(queue_consumers().queues.items()):
        family.add_metric([queue], len(names))
    return [family]


def queue_consumers_forget() -> None:
    """Drop the cached answer (tests; a caller that just started or stopped a worker)."""
    with _cache_lock:
        _cache.clear()


# --- shutdown mark ------------------------------------------------------------------------------

_local_marks: dict[str, float] = {}
_redis_state: dict[str, object] = {}


def _redis():
    import redis

    client = _redis_state.get("client")
    if client is None or _redis_state.get("url") != settings.REDIS_URL:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        _redis_state.update(client=client, url=settings.REDIS_URL)
    return client


def _uses_redis() -> bool:
    return bool(settings.STORE_BACKEND == "pg" and settings.REDIS_URL)


def worker_shutdown_mark(hostname: str) -> None:
    """Record that the Celery worker ``hostname`` began a warm shutdown."""
    key = SHUTDOWN_PREFIX + (hostname or "")
    if _uses_redis():
        _redis().set(key, "1", ex=SHUTDOWN_MARK_SECONDS)
    else:
        _local_marks[key] = time.monotonic() + SHUTDOWN_MARK_SECONDS


def worker_shutdown_clear(hostname: str) -> None:
    """Forget a shutdown mark (a worker with this name started)."""
    key = SHUTDOWN_PREFIX + (hostname or "")
    if _uses_redis():
        _redis().delete(key)
    else:
        _local_marks.pop(key, None)


def worker_shutdown_requested(hostname: str) -> bool:
    """True when the worker ``hostname`` is in a warm shutdown (False for an empty name, and when
    the mark cannot be read: the work then finishes here as before)."""
    if not hostname:
        return False
    key = SHUTDOWN_PREFIX + hostname
    if _uses_redis():
        try:
            return bool(_redis().exists(key))
        except Exception:
            logger.warning("worker %s: shutdown mark unreadable", hostname, exc_info=True)
            return False
    expires = _local_marks.get(key)
    return expires is not None and expires > time.monotonic()
