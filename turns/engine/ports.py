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


RuntimeJobsUnfinishedCount = Callable[[str], int]  # (session_id) -> queued/claimed/running/committing jobs

_runtime_jobs_unfinished_count: RuntimeJobsUnfinishedCount | None = None


def runtime_jobs_unfinished_count_install(count: RuntimeJobsUnfinishedCount) -> None:
    """Install the counter of a session's unfinished (durable detached) runtime jobs (the jobs app)."""
    global _runtime_jobs_unfinished_count
    _runtime_jobs_unfinished_count = count


def runtime_jobs_unfinished_count(session_id: str) -> int:
    """Unfinished runtime jobs of ``session_id`` (browser-checkpoint's 有后台作业时上传 rule); 0 without the jobs app."""
    if _runtime_jobs_unfinished_count is None:
        return 0
    return _runtime_jobs_unfinished_count(session_id)


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


MediaPut = Callable[..., "dict[str, Any]"]  # (*, session_id, data: bytes, declared_type) -> {id, mime, sha256, sizeBytes}

_media_put: MediaPut | None = None


def media_put_install(put: MediaPut) -> None:
    """Install the process-wide media store (the turns app installs ``media.services.media_put`` at start-up)."""
    global _media_put
    _media_put = put


def media_put(*, session_id: str, data: bytes, declared_type: str | None = None) -> dict[str, Any]:
    """Store bytes in the session's media library (ctx.media.put / ingestUrl; spec 004 §图像/媒体生成输出).
    Returns the MediaRef ``{id, mime, sha256, sizeBytes}``; raises the store's errors (an ApiError with
    ``code``/``message``) or PortMissing."""
    if _media_put is None:
        raise PortMissing("no media store is installed: add the media app to INSTALLED_APPS")
    return _media_put(session_id=session_id, data=data, declared_type=declared_type)


RuntimeJobsSettleWait = Callable[[str], "dict[str, Any]"]  # (session_id) -> {waitedMs, pending}

_runtime_jobs_settle_wait: RuntimeJobsSettleWait | None = None


def runtime_jobs_settle_wait_install(wait: RuntimeJobsSettleWait) -> None:
    """Install the settle barrier (the jobs app, at start-up: ``jobs.services.runtime_jobs_settle_wait``)."""
    global _runtime_jobs_settle_wait
    _runtime_jobs_settle_wait = wait


def runtime_jobs_settle_wait(session_id: str) -> dict[str, Any]:
    """Wait for the session's unfinished ``settle`` runtime jobs before an execution (spec 004
    §插件记忆). ``{"waitedMs": 0, "pending": []}`` when no job store is installed."""
    if _runtime_jobs_settle_wait is None:
        return {"waitedMs": 0, "pending": []}
    return _runtime_jobs_settle_wait(session_id)


MemoryIndexChanged = Callable[[str], None]  # (session_id) -> None; schedules the index update after commit

_memory_index_changed: MemoryIndexChanged | None = None


def memory_index_changed_install(changed: MemoryIndexChanged) -> None:
    """Install what a commit calls so the session's memory index follows it (the jobs app: the
    ``jobs.memory_index_update`` task after the transaction commits)."""
    global _memory_index_changed
    _memory_index_changed = changed


def memory_index_changed(session_id: str) -> None:
    """A commit wrote messages, lorebook, characters or plugin data of ``session_id``; call inside
    its transaction. Does nothing when no index updater is installed."""
    if _memory_index_changed is not None:
        _memory_index_changed(session_id)


SettlementsRetry = Callable[..., "tuple[int, list[str]]"]  # (session_id, *, plugin_registry, router, code_grants, plugin_settings)

_settlements_retry: SettlementsRetry | None = None


def settlements_retry_install(retry: SettlementsRetry) -> None:
    """Install the pre-turn retry of pending dimension settlements (the turns app installs
    ``turns.settlement_retry.pending_settlements_retry`` at start-up)."""
    global _settlements_retry
    _settlements_retry = retry


def settlements_retry(session_id: str, **kwargs: Any) -> tuple[int, list[str]]:
    """Retry the session's pending dimension settlements once before a player turn (spec 004
    §维度编辑与待结算恢复 与回合的关系). Returns (how many sources were retried, resultIds still
    pending); (0, []) when no retry is installed."""
    if _settlements_retry is None:
        return 0, []
    return _settlements_retry(session_id, **kwargs)


AssetGenerationStage = Callable[..., list]  # (*, session, plugin_id, runtime_id, turn_id, payload) -> [NewEvent]

_asset_generation_stage: AssetGenerationStage | None = None


def asset_generation_stage_install(stage: AssetGenerationStage) -> None:
    """Install the asset generation job port (the turns app installs ``turns.assets.asset_job_stage``)."""
    global _asset_generation_stage
    _asset_generation_stage = stage


def asset_generation_stage(*, session: Any, plugin_id: str, runtime_id: str | None, turn_id: str,
                           payload: dict[str, Any]) -> list:
    """Stage a media generation job for an ``asset.generate`` request inside the commit transaction;
    returns the events to append. Raises PortMissing when no generator is installed."""
    if _asset_generation_stage is None:
        raise PortMissing("no asset generator is installed: add the turns app to INSTALLED_APPS")
    return _asset_generation_stage(session=session, plugin_id=plugin_id, runtime_id=runtime_id, turn_id=turn_id,
                                   payload=payload)
