"""Celery tasks of the jobs app. Each takes ids only and calls a service."""
from __future__ import annotations

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_shutting_down

from covel.taskqueue import TASK_GENERATE_WORLD, TASK_RUN_RUNTIME_JOB

from jobs import leases, services, worldgen


@shared_task(name=TASK_GENERATE_WORLD, acks_late=True, ignore_result=True)
def generate_world(generation_id: str) -> None:
    """Run one AI world generation (queue ``worldgen``). Safe to deliver twice: the service claims
    the queued row and a second delivery finds it claimed and exits."""
    worldgen.generation_run(generation_id)


@shared_task(name=TASK_RUN_RUNTIME_JOB, bind=True, acks_late=True, ignore_result=True)
def run_runtime_job(self, job_id: str) -> None:
    """Run one detached runtime job (queue ``jobs``). Safe to deliver twice: the service claims the
    job by lease + compare-and-set and a second delivery finds it taken and exits; a job whose
    worker died is orphaned by the reaper, never replayed (spec 004 §Staged Runtime 后台作业)."""
    services.job_task_run(job_id, hostname=self.request.hostname or "")


@shared_task(name="jobs.reap_runtime_jobs", ignore_result=True)
def reap_runtime_jobs() -> int:
    """Orphan jobs with expired leases, time out queued jobs, re-send lost ones (beat)."""
    return services.jobs_reap()


@worker_shutting_down.connect
def _worker_shutting_down(sender=None, **_kwargs) -> None:
    # Sent in the worker's main process; prefork children read the mark through jobs.leases.
    leases.worker_shutdown_mark(str(sender or ""))


@celeryd_after_setup.connect
def _worker_started(sender=None, **_kwargs) -> None:
    leases.worker_shutdown_clear(str(sender or ""))
