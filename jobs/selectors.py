"""Reads of runtime jobs (spec 004 §Staged Runtime 后台作业)."""
from __future__ import annotations

from typing import Any

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


#: The queues the overview reports, and the table whose rows are that queue's work.
OVERVIEW_QUEUES = ("turns", "jobs", "worldgen")


def background_overview(*, now=None) -> dict[str, Any]:
    """The operators' view of background work (admin overview page, ``/metrics``, tests/bench):

    ``{"queues": {queue: {"counts": {status: n}, "oldestQueuedAt": datetime | None,
    "oldestQueuedSeconds": float | None}}, "leaseHolders": [worker id, ...]}`` for the queues
    ``turns`` (turn executions), ``jobs`` (runtime jobs) and ``worldgen`` (world generations).
    Per table a count by status and, when something is queued, the oldest queued ``created_at``,
    plus one read of the workers holding live runtime-job leases: at most 7 queries whatever the
    row count, each on the status index (bench: tests/bench/jobs_overview.py)."""
    from django.db.models import Count, Min
    from django.utils import timezone

    from jobs.models import WorldGeneration
    from turns.models import Execution

    now = now or timezone.now()
    out: dict[str, Any] = {"queues": {}}
    for queue, model in zip(OVERVIEW_QUEUES, (Execution, RuntimeJob, WorldGeneration)):
        # Two reads that each stay on the status index: counts by status (index only), then the
        # oldest of the few queued rows (one grouped query with MIN(created_at) reads every row).
        counts = dict(model.objects.order_by().values_list("status").annotate(n=Count("pk")).values_list("status", "n"))
        oldest = (model.objects.filter(status="queued").aggregate(at=Min("created_at"))["at"]
                  if counts.get("queued") else None)
        out["queues"][queue] = {"counts": counts, "oldestQueuedAt": oldest,
                                "oldestQueuedSeconds": max(0.0, (now - oldest).total_seconds()) if oldest else None}
    owners = (RuntimeJob.objects.filter(status__in=UNFINISHED[1:], lease_expires_at__gt=now).exclude(lease_owner="")
              .values_list("lease_owner", flat=True))
    out["leaseHolders"] = sorted({owner.split("@", 1)[-1] if "@" in owner else owner for owner in owners})
    return out


def background_metrics():
    """Prometheus metric families from ``background_overview`` (covel.metrics scrape collector):
    ``covel_queue_depth`` / ``covel_queue_oldest_age_seconds`` [queue] and the rows by status
    ``covel_executions`` / ``covel_runtime_jobs_by_status`` / ``covel_world_generations`` [status]."""
    from prometheus_client.core import GaugeMetricFamily

    overview = background_overview()
    depth = GaugeMetricFamily("covel_queue_depth", "Work items waiting in each queue (queued rows).", labels=["queue"])
    age = GaugeMetricFamily("covel_queue_oldest_age_seconds", "Age of the oldest queued item (0: none).", labels=["queue"])
    names = {"turns": ("covel_executions", "Turn executions by status."),
             "jobs": ("covel_runtime_jobs_by_status", "Runtime jobs by status."),
             "worldgen": ("covel_world_generations", "World generations by status.")}
    families = [depth, age]
    for queue, data in overview["queues"].items():
        depth.add_metric([queue], data["counts"].get("queued", 0))
        age.add_metric([queue], data["oldestQueuedSeconds"] or 0.0)
        family = GaugeMetricFamily(*names[queue], labels=["status"])
        for status, count in sorted(data["counts"].items()):
            family.add_metric([status], count)
        families.append(family)
    return families
