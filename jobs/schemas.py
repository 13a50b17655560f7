"""Wire shapes of runtime jobs (spec 004 §Staged Runtime 后台作业, §后台任务记录 _runtime_jobs).

``runtime_job_out`` is the public projection every response and ``job-status.updated`` event
carries. It never contains the internal frozen ``payload`` (inputs, user settings, model), the
lease owner or the fencing token; ``error`` is a fixed diagnostic text per ``reason``.
"""
from __future__ import annotations

from typing import Any

from covel.times import wire_timestamp

SCHEMA_VERSION = 1

# Statuses (spec 004: queued | claimed | running | committing | succeeded | failed | timed_out |
# cancelled | stale | orphaned).
QUEUED = "queued"
CLAIMED = "claimed"
RUNNING = "running"
COMMITTING = "committing"
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
STALE = "stale"
ORPHANED = "orphaned"

IN_FLIGHT = (CLAIMED, RUNNING, COMMITTING)
UNFINISHED = (QUEUED,) + IN_FLIGHT
CANCELLABLE = (QUEUED, CLAIMED, RUNNING)
RETRYABLE = (FAILED, TIMED_OUT, CANCELLED, STALE, ORPHANED)
FINISHED = (SUCCEEDED,) + RETRYABLE

# Reasons and their fixed public diagnostics.
REASON_RUNTIME_FAILURE = "runtime-reported-failure"
REASON_EXECUTION_FAILED = "execution-failed"
REASON_PRE_EXECUTION = "pre-execution-rejected"
REASON_COMMIT_BARRIER = "commit-barrier-rejected"
REASON_LEASE_EXPIRED = "lease-expired"
REASON_CANCELLED = "cancelled-by-request"
REASON_QUEUE_TIMEOUT = "queue-timeout"
REASON_SESSION_BUSY = "commit-lock-timeout"
REASON_SESSION_DELETED = "session-deleted"

PUBLIC_ERRORS = {
    REASON_RUNTIME_FAILURE: "The runtime reported a failure.",
    REASON_EXECUTION_FAILED: "The job's writes could not be committed.",
    REASON_PRE_EXECUTION: "The session or plugin changed before the job ran.",
    REASON_COMMIT_BARRIER: "The session or plugin changed before the job could commit.",
    REASON_LEASE_EXPIRED: "The worker running this job stopped; the job was not replayed.",
    REASON_CANCELLED: "The job was cancelled.",
    REASON_QUEUE_TIMEOUT: "The job waited in the queue longer than its limit.",
    REASON_SESSION_BUSY: "The session stayed busy; the job could not commit.",
    REASON_SESSION_DELETED: "The session was deleted.",
}


def runtime_job_out(job) -> dict[str, Any]:
    """The public job object of a ``jobs.models.RuntimeJob``:

    ``{schemaVersion, jobId, pluginId, runtimeId, status, origin: {activation, sourceTurnId,
    sourceExecutionId, sourceRuntimeId}, enqueuedAt, updatedAt, attempt, maxQueueMs?,
    maxExecutionMs?, leaseExpiresAt? (in flight), turnId?, executionId? (the background turn and
    execution, once committed), finishedAt?, result?, reason?, error?}``. Timestamps are ISO 8601
    UTC with milliseconds and ``Z``.
    """
    payload = job.payload or {}
    completion = payload.get("completion") or {}
    out: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "jobId": str(job.id),
        "pluginId": job.plugin_id,
        "runtimeId": job.runtime_id,
        "status": job.status,
        "origin": dict(payload.get("origin") or {}),
        "enqueuedAt": wire_timestamp(job.created_at),
        "updatedAt": wire_timestamp(job.updated_at),
        "attempt": job.attempts,
    }
    for key in ("maxQueueMs", "maxExecutionMs"):
        if isinstance(completion.get(key), int):
            out[key] = completion[key]
    if job.status in IN_FLIGHT and job.lease_expires_at is not None:
        out["leaseExpiresAt"] = wire_timestamp(job.lease_expires_at)
    result = job.result if isinstance(job.result, dict) else None
    if result:
        for key in ("turnId", "executionId"):
            if result.get(key):
                out[key] = result[key]
        out["result"] = result
    if job.status in FINISHED:
        out["finishedAt"] = wire_timestamp(job.updated_at)
    error = job.error if isinstance(job.error, dict) else None
    if error and error.get("reason"):
        out["reason"] = error["reason"]
        out["error"] = PUBLIC_ERRORS.get(error["reason"], "The job did not finish.")
    return out
