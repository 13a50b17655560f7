"""What the turn engine needs from outside the engine, as small ports the layers above fill in.

The engine is a library (STYLE.md, ``.importlinter``): it knows no job queue, web or channel
framework. Where a turn's commit must reach one, it calls a port:

- ``runtime_jobs_queued_count(session_id) -> int``: how many runtime jobs of the session wait
  (plugin-rpc refuses more background runs with 429 background_queue_full); installed by ``jobs``.
- ``runtime_jobs_stage(session, jobs) -> [NewEvent]``: write the RuntimeJob rows of a turn's
  detached runtimes inside the commit transaction and schedule their tasks after it commits
  (spec 004 §Staged Runtime 后台作业). The ``jobs`` app installs it in ``JobsConfig.ready``
  (``jobs.services.runtime_jobs_enqueue``); a caller may pass its own to ``execution_run``.
"""
from __future__ import annotations

from typing import Any, Callable

RuntimeJobsStage = Callable[..., list]  # (*, session, jobs: [{jobId, pluginId, runtimeId, payload}]) -> [NewEvent]

_runtime_jobs_stage: RuntimeJobsStage | None = None


class PortMissing(RuntimeError):
    """A turn needed a port no installed app provides (e.g. ``jobs`` missing from INSTALLED_APPS)."""


def runtime_jobs_stage_install(stage: RuntimeJobsStage) -> None:
    """Install the process-wide runtime-jobs port (called once at app start-up)."""
    global _runtime_jobs_stage
    _runtime_jobs_stage = stage


def runtime_jobs_stage(*, session: Any, jobs: list[dict[str, Any]]) -> list:
    """Stage runtime jobs through the installed port. Raises PortMissing when none is installed."""
    if _runtime_jobs_stage is None:
        raise PortMissing("no runtime job store is installed: add the jobs app to INSTALLED_APPS")
    return _runtime_jobs_stage(session=session, jobs=jobs)


RuntimeJobsQueuedCount = Callable[[str], int]  # (session_id) -> queued runtime jobs of the session

_runtime_jobs_queued_count: RuntimeJobsQueuedCount | None = None


def runtime_jobs_queued_count_install(count: RuntimeJobsQueuedCount) -> None:
    """Install the process-wide counter of a session's queued runtime jobs (the jobs app, at start-up)."""
    global _runtime_jobs_queued_count
    _runtime_jobs_queued_count = count


def runtime_jobs_queued_count(session_id: str) -> int:
    """Queued runtime jobs of ``session_id`` (plugin-rpc's background_queue_full check). Raises PortMissing."""
    if _runtime_jobs_queued_count is None:
        raise PortMissing("no runtime job store is installed: add the jobs app to INSTALLED_APPS")
    return _runtime_jobs_queued_count(session_id)


ModelCapability = Callable[..., "dict[str, Any] | None"]  # (model, *, provider, protocol) -> model-db lookup or None

_model_capability: ModelCapability | None = None


def model_capability_install(lookup: ModelCapability) -> None:
    """Install the process-wide model-capability lookup (the jobs app's model database, at start-up)."""
    global _model_capability
    _model_capability = lookup


def model_capability(model: str, *, provider: str, protocol: str) -> dict[str, Any] | None:
    """What the model database knows of ``model`` (spec 004 §模型数据库): ``{source, capability:
    {contextWindow, maxOutputTokens, tools, ...}}``, or None when no lookup is installed. The
    engine treats ``source: protocol-default`` as "unknown" and sends what the runtime declares."""
    if _model_capability is None:
        return None
    return _model_capability(model, provider=provider, protocol=protocol)
