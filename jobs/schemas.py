"""Wire shapes of runtime jobs (spec 004 §Staged Runtime 后台作业, §后台任务记录 _runtime_jobs).

``runtime_job_out`` is the public projection every response and ``job-status.updated`` event
carries. It never contains the internal frozen ``payload`` (inputs, user settings, model), the
lease owner or the fencing token; ``error`` is a fixed diagnostic text per ``reason``.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from covel.openapi import Wire, WireIn
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
REASON_EXECUTION_TIMEOUT = "execution-timeout"
REASON_SESSION_BUSY = "commit-lock-timeout"
REASON_SESSION_DELETED = "session-deleted"
REASON_FOLLOWER_NOT_EMITTED = "follower-not-emitted"
#: payload ``phase`` of a manual job run for expectsBackgroundFollower (turns.plugin_rpc PHASE_PROMPT).
PHASE_PROMPT = "prompt"

PUBLIC_ERRORS = {
    REASON_RUNTIME_FAILURE: "The runtime reported a failure.",
    REASON_EXECUTION_FAILED: "The job's writes could not be committed.",
    REASON_PRE_EXECUTION: "The session or plugin changed before the job ran.",
    REASON_COMMIT_BARRIER: "The session or plugin changed before the job could commit.",
    REASON_LEASE_EXPIRED: "The worker running this job stopped; the job was not replayed.",
    REASON_CANCELLED: "The job was cancelled.",
    REASON_QUEUE_TIMEOUT: "The job waited in the queue longer than its limit.",
    REASON_EXECUTION_TIMEOUT: "The job ran longer than its maxExecutionMs; nothing was committed.",
    REASON_SESSION_BUSY: "The session stayed busy; the job could not commit.",
    REASON_SESSION_DELETED: "The session was deleted.",
    REASON_FOLLOWER_NOT_EMITTED: "The entry runtime finished without starting a background follower.",
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


# --- documented shapes (covel/openapi.py): the routes' answers, not checked at run time ---------


class PingIn(WireIn):
    """POST /api/ai/ping: at most one target; none tests the story slot (or any configured one)."""

    preset_id: str | None = Field(None, min_length=1)
    model_ref: str | None = Field(None, min_length=1, description="A customPresets entry of X-Slot-Config")
    slot: str | None = Field(None, min_length=1)


class PingOut(Wire):
    """200 even when the probe failed (``ok: false`` with error and errorKind)."""

    ok: bool
    latency_ms: int
    tested_target: dict[str, Any]
    ttfb_ms: int | None = None
    text: str | None = None
    error: str | None = None
    error_kind: str | None = None
    code: str | None = None


class ProviderModelsIn(WireIn):
    provider: str = Field(min_length=1)
    base_url: str | None = Field(None, description="An http(s) URL; request-supplied targets pass the SSRF guard")
    protocol: str | None = None


class ProviderModelsOut(Wire):
    ok: bool
    models: list[str]
    base_url: str | None
    protocol: str
    error: str | None = None
    error_kind: str | None = None
    code: str | None = None


class ProtocolsOut(Wire):
    protocols: list[dict[str, Any]]


class WorldBriefIn(WireIn):
    pack: str | None = None
    content: list[str] | None = None
    contracts: list[str] | None = None
    additional_instructions: str | None = Field(None, max_length=2000)


class GenerateWorldIn(WireIn):
    """POST /api/ai/generate-world."""

    concept: str = Field(min_length=1, max_length=4000)
    locale: str | None = None
    model: str | None = None
    save_target: Literal["server-file", "server-store", "return-only"] | None = None
    idle_timeout_ms: int | None = Field(None, ge=1000, le=1_800_000)
    brief: WorldBriefIn | None = None


class ReviseWorldIn(WireIn):
    """POST /api/ai/revise-world."""

    world_id: str
    instruction: str = Field(min_length=1, max_length=2000)
    world: dict[str, Any] | None = Field(None, description="A browser-saved WorldRecord: the result is only returned")
    model: str | None = None
    idle_timeout_ms: int | None = Field(None, ge=1000, le=1_800_000)


class TranslateWorldIn(WireIn):
    """POST /api/worlds/:id/translate."""

    locale: str = Field(description="The language tag to add (any case: en-us is en-US)")
    idle_timeout_ms: int | None = Field(None, ge=1000, le=1_800_000)


class RuntimeJobOut(Wire):
    """The public runtime job object (runtime_job_out)."""

    schema_version: int
    job_id: str
    plugin_id: str
    runtime_id: str
    status: Literal["queued", "claimed", "running", "committing", "succeeded", "failed", "timed_out", "cancelled",
                    "stale", "orphaned"]
    origin: dict[str, Any]
    enqueued_at: str
    updated_at: str
    attempt: int
    max_queue_ms: int | None = None
    max_execution_ms: int | None = None
    lease_expires_at: str | None = None
    turn_id: str | None = None
    execution_id: str | None = None
    finished_at: str | None = None
    result: dict[str, Any] | None = None
    reason: str | None = None
    error: str | None = None


class RuntimeJobsOut(Wire):
    items: list[RuntimeJobOut]


class ModelDbOut(Wire):
    source: Literal["bundled", "cache"]
    upstream: str | None
    count: int
    providers: list[str]


class ModelSearchOut(Wire):
    items: list[dict[str, Any]]


class ModelLookupOut(Wire):
    model: str
    source: str | None = None
    matched_model_id: str | None = None
    match_kind: str | None = None
    candidates: list[str] | None = None
    capability: dict[str, Any] | None = None


class ModelDbRefreshOut(Wire):
    ok: bool
    count: int
    persisted: bool


class LlmConfigOut(Wire):
    """Slots in effect; source / envKeyOverrides / error only for private callers."""

    slots: dict[str, dict[str, Any]]
    providers: dict[str, dict[str, Any]]
    source: dict[str, Any] | None = None
    env_key_overrides: list[str] | None = None
    error: str | None = None


class LlmConfigReloadOut(Wire):
    ok: bool
    slots: dict[str, dict[str, Any]]
    error: str | None = None


class PresetsOut(Wire):
    items: list[dict[str, Any]]


class ProviderKeysOut(Wire):
    providers: dict[str, dict[str, bool]]


class ConfigInfoOut(Wire):
    """Path fields are null for public callers of demo/commercial."""

    is_desktop: bool
    requires_auth: bool
    deployment_tier: str
    store_backend: str
    covel_home: str | None
    data_root: str | None
    llm_config_path: str | None
    worlds_dir: str | None
    plugins_dir: str | None
    media_root: str | None
    config_path: str | None = Field(description="desktop mode: <covelHome>/config.toml")
    keys_path: str | None = Field(description="desktop mode: <covelHome>/keys.env")
    settings_path: str | None = Field(description="desktop mode: <covelHome>/settings.json")
    proxy_path: str | None = Field(description="desktop mode: <covelHome>/proxy.json")
    logs_dir: str | None = Field(description="desktop mode: <covelHome>/logs")
    pending_data_root: str | None = Field(description="desktop mode: config.toml's data_root awaiting a restart")


class ServerSettingOut(Wire):
    value: Any
    source: Literal["env", "setting", "default"]
    settable: bool


class ServerSettingsOut(Wire):
    settings: dict[str, ServerSettingOut]


class ServerSettingsIn(WireIn):
    entries: dict[str, Any] = Field(description="key → value, or null to go back to the default")


class RawConfigFileOut(Wire):
    name: str
    path: str
    exists: bool
    applies: str


class RawConfigFilesOut(Wire):
    items: list[RawConfigFileOut]


class RawConfigFileContentOut(RawConfigFileOut):
    content: str
    digest: str


class RawConfigFileIn(WireIn):
    content: str
    base_digest: str = Field(description="`digest` of the version read (409 config_file_changed otherwise)")


class RawConfigFileSavedOut(RawConfigFileContentOut):
    backup: str | None
    reload: LlmConfigReloadOut | None = Field(description="llm.toml's reload; null for config.toml (applies at restart)")


# --- desktop mode (jobs/desktop_services.py) ---------------------------------------------------


class ConfigKeysOut(Wire):
    items: list[str] = Field(description="providers with a key saved in keys.env; never a value")


class ConfigKeysIn(WireIn):
    """``{provider: key | null}``; "" or null deletes the saved key."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": {"type": ["string", "null"]}})


class DesktopSettingsOut(Wire):
    entries: dict[str, Any]


class DesktopSettingsIn(WireIn):
    entries: dict[str, Any] = Field(description="key → value, or null to remove the key")


class ProxyOut(Wire):
    mode: Literal["direct", "system", "http", "socks"]
    url: str | None = Field(None, description="the saved proxy URL, password shown as ***")
    effective: str = Field(description='"direct" or the proxy an https request uses now (password masked)')
    system_available: bool


class ProxyIn(WireIn):
    mode: Literal["direct", "system", "http", "socks"]
    url: str | None = Field(None, description="http(s):// or socks5(h):// [user:password@]host:port; http/socks only")


class AppUpdateOut(Wire):
    version: str
    name: str
    published_at: str | None


class DataRootIn(WireIn):
    data_root: str = Field(description="absolute directory of the database (covel.db); ~ allowed")


class DataRootOut(Wire):
    ok: bool
    data_root: str
    config_path: str
    restart_required: bool


class OpenFolderIn(WireIn):
    target: Literal["config", "data", "logs", "llm.toml", "keys.env"]


class OpenFolderOut(Wire):
    ok: bool
    created: bool
