"""Celery tasks of the jobs app. Each takes ids only and calls a service.

Task states tell the truth (Flower, ``covel_celery_tasks_total``): a runtime job that ended failed,
timed_out or stale, and a world generation that ended failed, end their task with ``JobFailed``
(an expected error: no traceback, acknowledged, never retried — the outcome is recorded).
"""
from __future__ import annotations

from celery import shared_task

from covel.taskqueue import TASK_GENERATE_WORLD, TASK_MEMORY_INDEX_REBUILD, TASK_MEMORY_INDEX_UPDATE, TASK_RUN_RUNTIME_JOB

from jobs import schemas as S, services, worldgen
from jobs.models import WorldGeneration

#: Runtime job statuses whose task ends as failed.
FAILED_JOB_STATUSES = (S.FAILED, S.TIMED_OUT, S.STALE)


class JobFailed(Exception):
    """The runtime job or world generation ran and failed; its status is in the message."""


@shared_task(name=TASK_GENERATE_WORLD, acks_late=True, ignore_result=True, throws=(JobFailed,))
def generate_world(generation_id: str) -> str | None:
    """Run one AI world generation (queue ``worldgen``). Safe to deliver twice: the service claims
    the queued row and a second delivery finds it claimed and exits. Raises JobFailed when the
    generation ended failed."""
    from jobs.worldgen_revise import revise_run
    from jobs.worldgen_translate import translate_run

    status = worldgen.generation_run(generation_id, runners={"translate": translate_run, "revise": revise_run})
    if status == WorldGeneration.STATUS_FAILED:
        raise JobFailed(f"world generation {generation_id} failed")
    return status


@shared_task(name=TASK_RUN_RUNTIME_JOB, bind=True, acks_late=True, ignore_result=True, throws=(JobFailed,))
def run_runtime_job(self, job_id: str) -> str | None:
    """Run one detached runtime job (queue ``jobs``). Safe to deliver twice: the service claims the
    job by lease + compare-and-set and a second delivery finds it taken and exits; a job whose
    worker died is orphaned by the reaper, never replayed (spec 004 §Staged Runtime 后台作业).
    Returns the status it left the job in; raises JobFailed for failed / timed_out / stale."""
    status = services.job_task_run(job_id, hostname=self.request.hostname or "")
    if status in FAILED_JOB_STATUSES:
        raise JobFailed(f"runtime job {job_id} {status}")
    return status


@shared_task(name="jobs.reap_runtime_jobs", ignore_result=True)
def reap_runtime_jobs() -> int:
    """Orphan jobs with expired leases, time out queued jobs, re-send lost ones (beat)."""
    return services.jobs_reap()


@shared_task(name=TASK_MEMORY_INDEX_REBUILD, ignore_result=True)
def memory_index_rebuild(session_id: str, generation: int) -> int:
    """The background re-index of POST /api/sessions/:id/memory-index/rebuild (queue ``jobs``).
    Safe to run twice: items already embedded for the generation are skipped."""
    from turns.engine import memory_index

    return memory_index.memory_index_reindex(session_id, generation, memory_index.memory_choice_default())


@shared_task(name=TASK_MEMORY_INDEX_UPDATE, ignore_result=True)
def memory_index_update(session_id: str) -> int:
    """Index what a commit added to the session (queue ``jobs``), when its index is locked to the
    server's embedding model. Safe to run twice: items already embedded are skipped."""
    from turns.engine import memory_index

    return memory_index.memory_index_update(session_id, memory_index.memory_choice_default())
