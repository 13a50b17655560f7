"""Reads of runtime jobs (spec 004 §Staged Runtime 后台作业)."""
from __future__ import annotations

from jobs.models import RuntimeJob
from jobs.schemas import UNFINISHED


def runtime_job_list(session_id: str) -> list[RuntimeJob]:
    """The session's retained jobs ordered by enqueuedAt, jobId (spec 004 GET .../runtime-jobs)."""
    return list(RuntimeJob.objects.filter(session_id=session_id).order_by("created_at", "id"))


def runtime_job_get(session_id: str, job_id: str) -> RuntimeJob | None:
    """The job ``job_id`` of the session, or None (also for a malformed id)."""
    import uuid

    try:
        uuid.UUID(str(job_id))
    except ValueError:
        return None
    return RuntimeJob.objects.filter(session_id=session_id, pk=job_id).first()


def runtime_jobs_queued_count(session_id: str) -> int:
    """How many of the session's jobs wait in the queue."""
    return RuntimeJob.objects.filter(session_id=session_id, status="queued").count()


def runtime_jobs_unfinished(session_id: str) -> list[RuntimeJob]:
    """Queued and in-flight jobs of the session, oldest first."""
    return list(RuntimeJob.objects.filter(session_id=session_id, status__in=UNFINISHED).order_by("created_at", "id"))
