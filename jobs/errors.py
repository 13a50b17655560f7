"""Errors of the runtime job endpoints (spec 004 §Staged Runtime 后台作业)."""
from __future__ import annotations

from covel.errors import ApiError

RUNTIME_JOB_NOT_CANCELLABLE = "runtime_job_not_cancellable"
RUNTIME_JOB_NOT_RETRYABLE = "runtime_job_not_retryable"
BACKGROUND_QUEUE_FULL = "background_queue_full"
SESSION_NOT_ACTIVE = "session_not_active"


class RuntimeJobNotCancellable(ApiError):
    """409: the job does not exist, already entered committing, or already ended."""

    status = 409
    code = RUNTIME_JOB_NOT_CANCELLABLE


class RuntimeJobNotRetryable(ApiError):
    """409: the job does not exist or is not in failed / timed_out / cancelled / stale / orphaned."""

    status = 409
    code = RUNTIME_JOB_NOT_RETRYABLE


class BackgroundQueueFull(ApiError):
    """429: the session already has the maximum number of queued runtime jobs."""

    status = 429
    code = BACKGROUND_QUEUE_FULL


class SessionNotActive(ApiError):
    """409: a retry needs an active session."""

    status = 409
    code = SESSION_NOT_ACTIVE
