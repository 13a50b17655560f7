"""In-process worker for the embedded default: Celery tasks run on a thread pool inside the web process.

With ``COVEL_INPROCESS_WORKER`` true, ``task.apply_async`` (and so ``delay``/``delay_on_commit``)
submits the task to this pool instead of a broker. The task body is the same code a Celery worker
runs (``Task.apply``), including retries; exceptions are logged, never swallowed silently.

In-process timers (``timers_start``, COVEL_INPROCESS_TIMERS): the embedded shape has no Celery
beat, so the web process runs the same ``CELERY_BEAT_SCHEDULE`` (reapers, the execution re-sender)
on one daemon thread, each entry submitted to this pool at its interval.
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
            if isinstance(result.result, tuple(getattr(task, "throws", ()) or ())):
                # An expected failure (the turn or job failed and its outcome is recorded).
                logger.info("in-process task %s failed: %s", task.name, result.result)
            else:
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


_timers_thread: threading.Thread | None = None
_timers_stop = threading.Event()


def timers_start() -> bool:
    """Start the in-process beat (see module docstring) once per process; True when it runs.

    Does nothing unless both COVEL_INPROCESS_WORKER and COVEL_INPROCESS_TIMERS are set. Entries of
    ``CELERY_BEAT_SCHEDULE`` need a numeric ``schedule`` (seconds); others are skipped with a log
    line. A task still running when its next tick comes is not submitted again.
    """
    global _timers_thread
    if not (settings.COVEL_INPROCESS_WORKER and settings.COVEL_INPROCESS_TIMERS):
        return False
    with _pool_lock:
        if _timers_thread is not None and _timers_thread.is_alive():
            return True
        entries = []
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
            schedule = entry.get("schedule")
            if not isinstance(schedule, (int, float)) or schedule <= 0:
                logger.warning("in-process timers: %s has no interval in seconds; skipped", name)
                continue
            entries.append((name, entry["task"], float(schedule)))
        _timers_stop.clear()
        _timers_thread = threading.Thread(target=_timers_run, args=(entries,), name="covel-timers", daemon=True)
        _timers_thread.start()
    return True


def timers_stop(timeout_seconds: float = 5.0) -> None:
    """Stop the in-process timers (tests; a web process just exits). Tasks already submitted finish."""
    global _timers_thread
    _timers_stop.set()
    thread = _timers_thread
    if thread is not None:
        thread.join(timeout_seconds)
    _timers_thread = None


def _timers_run(entries: list[tuple[str, str, float]]) -> None:
    import time

    from celery import current_app

    due = {name: time.monotonic() + interval for name, _, interval in entries}
    running: dict[str, Future] = {}
    while not _timers_stop.is_set():
        now = time.monotonic()
        for name, task_name, interval in entries:
            if now < due[name]:
                continue
            due[name] = now + interval
            previous = running.get(name)
            if previous is not None and not previous.done():
                continue
            try:
                running[name] = submit(current_app.tasks[task_name], (), {})
            except Exception:
                logger.exception("in-process timers: could not submit %s", task_name)
        _timers_stop.wait(max(0.1, min(due.values(), default=now + 1.0) - time.monotonic()))
