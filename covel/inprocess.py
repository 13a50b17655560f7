"""In-process worker for the embedded default: Celery tasks run on a thread pool inside the web process.

With ``COVEL_INPROCESS_WORKER`` true, ``task.apply_async`` (and so ``delay``/``delay_on_commit``)
submits the task to this pool instead of a broker. The task body is the same code a Celery worker
runs (``Task.apply``), including retries; exceptions are logged, never swallowed silently.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from celery.contrib.django.task import DjangoTask
from django.conf import settings
from django.db import close_old_connections, connections

logger = logging.getLogger("covel.worker")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_pending: set[Future] = set()
_pending_lock = threading.Lock()


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.COVEL_INPROCESS_WORKER_THREADS, thread_name_prefix="covel-worker"
            )
        return _pool


def _run(task: "InProcessAwareTask", args: tuple, kwargs: dict, task_id: str | None):
    close_old_connections()
    try:
        result = task.apply(args=args, kwargs=kwargs, task_id=task_id)
        if result.failed():
            logger.error("in-process task %s failed: %r\n%s", task.name, result.result, result.traceback)
        return result.result
    finally:
        # Worker threads are long-lived: give the connection back instead of leaking one per thread.
        connections.close_all()


def submit(task: "InProcessAwareTask", args: tuple, kwargs: dict, task_id: str | None = None) -> Future:
    """Queue ``task(*args, **kwargs)`` on the pool; returns its Future (value: the task's return)."""
    future = _get_pool().submit(_run, task, args, kwargs, task_id)
    with _pending_lock:
        _pending.add(future)
    future.add_done_callback(_forget)
    return future


def _forget(future: Future) -> None:
    with _pending_lock:
        _pending.discard(future)


def wait_idle(timeout_seconds: float = 30.0) -> bool:
    """Block until every submitted task finished (tasks queued meanwhile included). False on timeout."""
    import time

    deadline = time.monotonic() + timeout_seconds
    while True:
        with _pending_lock:
            pending = list(_pending)
        if not pending:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        for future in pending:
            try:
                future.result(timeout=max(0.0, remaining))
            except Exception:
                pass


class _InProcessResult:
    """The AsyncResult-like handle returned when a task runs in-process."""

    def __init__(self, future: Future, task_id: str | None):
        self.future = future
        self.id = task_id

    def get(self, timeout: float | None = None):
        return self.future.result(timeout=timeout)

    def ready(self) -> bool:
        return self.future.done()


class InProcessAwareTask(DjangoTask):
    """Celery Task that honours COVEL_INPROCESS_WORKER: in-process pool instead of the broker.

    Derives from Celery's DjangoTask so ``delay_on_commit`` (STYLE.md) is available on every task.
    """

    abstract = True

    def apply_async(self, args=None, kwargs=None, task_id=None, **options):
        if settings.COVEL_INPROCESS_WORKER and not self.app.conf.task_always_eager:
            import uuid

            task_id = task_id or str(uuid.uuid4())
            return _InProcessResult(submit(self, tuple(args or ()), dict(kwargs or {}), task_id), task_id)
        return super().apply_async(args=args, kwargs=kwargs, task_id=task_id, **options)
