"""The Celery app. Hosted: Redis broker, workers per queue (turns, jobs, media, worldgen).

Embedded: the same tasks run on the in-process worker (``covel.inprocess``) — every task class
derives from ``InProcessAwareTask``, so ``delay``/``delay_on_commit`` stay the one way to schedule.

Worker-side hooks (signals, connected here so every worker process has them): workers and beat
log through Django's ``LOGGING`` (one log format per shape); task ends are counted and timed for
Prometheus (covel/metrics.py, imported lazily: its multiprocess mode depends on settings); a pool
child that exits drops its live gauges; a warm shutdown is marked for the pool children
(covel.workers: the turn and job services put unstarted work back in the queue); each pool child
keeps its PostgreSQL connection pool across tasks (Celery's Django fix-up would close it around
every task); a worker with COVEL_WORKER_METRICS_PORT serves its own
``/metrics``; and a hosted worker warns at start about missing secrets (covel.startup).
"""
import os
import time

from celery import Celery
from celery.signals import (
    celeryd_after_setup, setup_logging, task_postrun, task_prerun, worker_init, worker_process_init,
    worker_process_shutdown, worker_ready, worker_shutting_down,
)

from covel.settings import default_settings_module

os.environ.setdefault("DJANGO_SETTINGS_MODULE", default_settings_module())

app = Celery("covel", task_cls="covel.inprocess:InProcessAwareTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_task_started: dict[str, float] = {}
_CELERY_STATES = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried"}


@setup_logging.connect
def _logging_from_django(**_kwargs) -> None:
    # Connected, so Celery does not install its own (plain) handlers on the root logger.
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@task_prerun.connect
def _task_started_at(task_id=None, **_kwargs) -> None:
    if task_id:
        _task_started[task_id] = time.monotonic()


@task_postrun.connect
def _task_ended(task_id=None, task=None, state=None, **_kwargs) -> None:
    from covel import metrics

    started = _task_started.pop(task_id, None) if task_id else None
    metrics.celery_task_observe(task=getattr(task, "name", "") or "", state=_CELERY_STATES.get(state or "", (state or "unknown").lower()),
                                seconds=time.monotonic() - started if started is not None else None)


@worker_process_init.connect
def _pool_child_started(**_kwargs) -> None:
    """A forked pool child must not use the parent's database pool (its sockets are the parent's,
    its threads did not survive the fork): forget it, without closing what the parent still uses,
    so the child opens its own on first use."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.connection = None
    pools = getattr(connections["default"].__class__, "_connection_pools", None)
    if isinstance(pools, dict):
        pools.clear()


def _db_connections_release(sender=None, **_kwargs) -> None:
    """Before and after every task: give this process's Django connections back (to the pool when
    pooled: no network; closed otherwise), as Celery's Django fix-up does, but keep the pool."""
    from django.db import DatabaseError, InterfaceError, connections

    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except InterfaceError:
            pass
        except DatabaseError as exc:  # the fix-up's rule: a connection already gone is fine
            if "closed" not in str(exc) and "not connected" not in str(exc):
                raise


def _db_connections_release_after(sender=None, **kwargs) -> None:
    _db_connections_release(sender=sender, **kwargs)
    from django.core.cache import close_caches

    close_caches()


@worker_init.connect
def _db_pool_kept_across_tasks(**_kwargs) -> None:
    """Celery's Django fix-up (celery.fixups.django.DjangoWorkerFixup) closes the whole connection
    pool of a prefork child before and after every task, so every task opened a new pool and new
    PostgreSQL connections (issue 18: ~4 connections per turn, each a backend start). Its task
    handlers are swapped for ``_db_connections_release`` (connections back to the pool, pool kept;
    a pool inherited over fork is already dropped by ``_pool_child_started``).

    Runs after the fix-up's own ``worker_init`` handler (connected when the app was created, so
    earlier); the fix-up has no setting for this, hence the swap. Without a Django fix-up (no
    DJANGO_SETTINGS_MODULE) nothing changes."""
    from celery.fixups.django import DjangoFixup

    for fixup in getattr(app, "_fixups", None) or []:
        if isinstance(fixup, DjangoFixup):
            worker_fixup = fixup.worker_fixup
            task_prerun.disconnect(worker_fixup.on_task_prerun)
            task_postrun.disconnect(worker_fixup.on_task_postrun)
            task_prerun.connect(_db_connections_release, weak=False, dispatch_uid="covel-db-release-prerun")
            task_postrun.connect(_db_connections_release_after, weak=False, dispatch_uid="covel-db-release-postrun")


@worker_process_shutdown.connect
def _pool_child_exited(pid=None, **_kwargs) -> None:
    from covel import metrics

    metrics.process_exited(int(pid or os.getpid()))


@worker_ready.connect
def _worker_ready(**_kwargs) -> None:
    from django.conf import settings

    from covel import metrics
    from covel.startup import secrets_warn

    secrets_warn()
    metrics.logger.info("worker metrics: %s", f"multiprocess files in {os.environ['PROMETHEUS_MULTIPROC_DIR']}"
                        if metrics.is_multiprocess() else "this process only (PROMETHEUS_MULTIPROC_DIR unset)")
    if settings.COVEL_WORKER_METRICS_PORT:
        metrics.metrics_serve(settings.COVEL_WORKER_METRICS_PORT, settings.COVEL_WORKER_METRICS_HOST or "127.0.0.1")


@worker_shutting_down.connect
def _worker_shutting_down(sender=None, **_kwargs) -> None:
    # Sent in the worker's main process; prefork children read the mark through covel.workers.
    from covel.workers import worker_shutdown_mark

    worker_shutdown_mark(str(sender or ""))


@celeryd_after_setup.connect
def _worker_started(sender=None, **_kwargs) -> None:
    from covel.workers import worker_shutdown_clear

    worker_shutdown_clear(str(sender or ""))
