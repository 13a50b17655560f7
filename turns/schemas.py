"""Request and response shapes of POST /api/actions and GET /api/sessions/:id/execution (spec 004
§Actions（SSE 桥接）, §刷新与未完成回合恢复).

Every model forbids unknown fields and coerces nothing: a request that does not match is
400 invalid_action_request before anything is written.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from covel.openapi import Wire, WireIn

# Spec 004 §Actions: "requestId、sessionId 和 runtime / 回合 ID 必须是长度有限的安全标识符".
SAFE_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
# A runtime id as the manifests define it: "<plugin>" (a plugin's single runtime) or "<plugin>/<runtime>".
RUNTIME_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*(/[A-Za-z0-9_][A-Za-z0-9_.:\-]*)?$"
ACTION_KIND_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*(/[A-Za-z0-9_][A-Za-z0-9_.:\-]*)?$"

RequestId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=128, pattern=SAFE_ID_PATTERN)]
SessionId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=SAFE_ID_PATTERN)]
TurnId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=64, pattern=SAFE_ID_PATTERN)]
EntityId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=SAFE_ID_PATTERN)]
RuntimeId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=RUNTIME_ID_PATTERN)]
ActionKind = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=ACTION_KIND_PATTERN)]
ModelRef = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)]

MAX_ACTIONS = 8
# MAX_PLAYER_MESSAGE_CHARS (spec 004 §submit_actions, §form_rejected).
MAX_PLAYER_MESSAGE_CHARS = 100_000
MAX_LORE_OVERRIDE_CHARS = 500_000
MAX_RETRY_RUNTIMES = 20

ACTION_TYPES = ("submit_actions", "start_session", "retry_turn", "retry_runtime", "retry_failed_runtimes")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class InteractionRef(_Strict):
    """Which committed interaction an action answers (spec 004 §玩家交互)."""

    turnId: TurnId
    interactionId: EntityId
    type: Literal["form", "choice", "confirmation"]


class ActionIn(_Strict):
    """One action of submit_actions. ``source`` is never accepted (the server sets ``player``)."""

    kind: ActionKind
    seatId: Optional[EntityId] = None
    actorId: Optional[EntityId] = None
    text: Optional[Annotated[str, StringConstraints(strict=True, max_length=MAX_PLAYER_MESSAGE_CHARS)]] = None
    fields: Optional[dict[str, Any]] = None
    interaction: Optional[InteractionRef] = None


class SubmitActionsPayload(_Strict):
    actions: list[ActionIn] = Field(min_length=1, max_length=MAX_ACTIONS)
    inputMessageId: Optional[EntityId] = None
    recoverFromTurnId: Optional[TurnId] = None

    @model_validator(mode="after")
    def _total_text(self) -> "SubmitActionsPayload":
        total = sum(len(a.text or "") for a in self.actions)
        if total > MAX_PLAYER_MESSAGE_CHARS:
            raise ValueError(f"actions text totals {total} characters; the limit is {MAX_PLAYER_MESSAGE_CHARS}")
        return self


class StartSessionPayload(_Strict):
    loreOverride: Optional[Annotated[str, StringConstraints(strict=True, max_length=MAX_LORE_OVERRIDE_CHARS)]] = None
    recoverFromTurnId: Optional[TurnId] = None


class RetryTurnPayload(_Strict):
    recoverFromTurnId: Optional[TurnId] = None


class RetryRuntimePayload(_Strict):
    runtimeId: RuntimeId
    retryFromTurnId: Optional[TurnId] = None
    recoverFromTurnId: Optional[TurnId] = None


class RetryFailedRuntimesPayload(_Strict):
    runtimeIds: list[RuntimeId] = Field(min_length=1, max_length=MAX_RETRY_RUNTIMES)
    retryFromTurnId: TurnId
    recoverFromTurnId: Optional[TurnId] = None

    @model_validator(mode="after")
    def _distinct(self) -> "RetryFailedRuntimesPayload":
        if len(set(self.runtimeIds)) != len(self.runtimeIds):
            raise ValueError("runtimeIds must not repeat")
        return self


PAYLOAD_MODELS: dict[str, type[_Strict]] = {
    "submit_actions": SubmitActionsPayload,
    "start_session": StartSessionPayload,
    "retry_turn": RetryTurnPayload,
    "retry_runtime": RetryRuntimePayload,
    "retry_failed_runtimes": RetryFailedRuntimesPayload,
}


class ActionRequestIn(_Strict):
    """The body of POST /api/actions: exactly these five top-level fields (``locale`` is refused).

    ``payload`` is then validated by ``PAYLOAD_MODELS[type]`` (see turns.services.action_request_parse).
    """

    requestId: RequestId
    type: Literal["submit_actions", "start_session", "retry_turn", "retry_runtime", "retry_failed_runtimes"]
    sessionId: SessionId
    model: Optional[ModelRef] = None
    payload: dict[str, Any]


class RetryOut(Schema):
    type: str
    payload: dict[str, Any]


class SessionExecutionStatusOut(Schema):
    """SessionExecutionStatus (spec 004 §刷新与未完成回合恢复)."""

    state: Literal["idle", "running", "completed", "failed", "interrupted", "unknown"]
    turnId: Optional[str] = None
    requestId: Optional[str] = None
    startedAt: Optional[str] = None
    origin: Optional[Literal["player", "continuation"]] = None
    abortReason: Optional[str] = None
    retry: Optional[RetryOut] = None


# --- documented shapes (covel/openapi.py): the routes' answers, not checked at run time ---------


class UiSlotsQuery(WireIn):
    """GET /api/sessions/:id/ui-slots query."""

    prefix: str | None = Field(None, description="Slot names starting with this, e.g. `stage.`")
    slot: str | None = Field(None, description="One exact slot name (400 unknown_ui_slot for a name the host does not know)")
    key: str | None = Field(None, description="One character id (keyed slots such as `character.visual@1`)")


class UiSlotSnapshot(Wire):
    """One slot's current value; ``revision`` identifies the value (not an ordering counter)."""

    slot: str
    key: str | None = None
    value: Any = Field(description="The slot's value; null when a keyed value was removed or nothing was committed yet")
    revision: str


class UiSlotsOut(Wire):
    items: list[UiSlotSnapshot]


class AbortOut(Wire):
    ok: bool
    request_ids: list[str]
    turn_id: str | None = None


class SteerIn(WireIn):
    message: str = Field(min_length=1, description="The player's message for the running turn's story runtime")


class SteerOut(Wire):
    ok: bool
    request_id: str
    turn_id: str | None


class ApprovalRequiredOut(Wire):
    """202 before any stream or write: a community plugin the request would run lacks a grant."""

    status: Literal["approval-required"]
    approval_id: str
    pending: dict[str, Any]


class ViewOut(Wire):
    """GET /api/sessions/:id/view: the SessionSnapshot a client opens a session with."""

    session: dict[str, Any] = Field(description="SessionOut")
    messages: list[dict[str, Any]] = Field(description="The newest messages (MessageOut), oldest first")
    messages_cursor: str | None = Field(description="Cursor of older messages for /messages/page; null when none")
    characters: list[dict[str, Any]]
    plugins: list[str] = Field(description="The session's runnable plugin ids")
    plugin_data: list[dict[str, Any]]
    execution_steps: list[dict[str, Any]] = Field(description="Recent trace events; llm.calling without its prompt")
    event_cursor: str = Field(description="`<epoch>:<seq>` to follow /api/events/stream from")
    submitted_interactions: list[dict[str, Any]]
    dimensions: dict[str, Any]
    dimension_provider_plugin_id: str | None = Field(None, description="The bound world.dimensions@1 provider, when any")
    dimension_recovery: dict[str, Any] | None = Field(
        None, description="{editorRuntimeId, trackerRuntimeId}; absent while the provider is not running")
    dimension_settlements: list[Any] = Field(
        description="Receipt summaries {source: {resultId, turnNumber}, status, sourceTurnId, version, error?}")


class TraceEventOut(Wire):
    id: str
    type: str
    request_id: str
    trace_id: str
    session_id: str
    turn_id: str
    flow_id: str
    seq: int
    event_order: int
    timestamp: str
    diagnostic: dict[str, Any]
    payload: Any


class TraceDiscoveryRuntime(Wire):
    id: str
    stage: str | None
    runtime_type: str | None


class TraceDiscoveryPlugin(Wire):
    id: str
    display_name: str | dict[str, str]
    runtimes: list[TraceDiscoveryRuntime]


class TraceDiscovery(Wire):
    session_id: str
    plugins: list[TraceDiscoveryPlugin]


class CursorQuery(WireIn):
    cursor: str | None = Field(None, description="`nextCursor` of the previous page (400 invalid_cursor otherwise)")


class TracePageQuery(CursorQuery):
    limit: int | None = Field(None, ge=1, description="Events per page (default 400, at most 500)")


class TracesOut(Wire):
    session_id: str
    count: int
    events: list[TraceEventOut]
    next_cursor: str | None
    discovery: TraceDiscovery | None = Field(None, description="Only on the first page (no cursor)")


class TraceTurn(Wire):
    turn_id: str
    flow_id: str
    trace_id: str
    started_at: str
    completed_at: str
    event_count: int
    events: list[TraceEventOut]


class TraceTurnsOut(Wire):
    session_id: str
    turns: list[TraceTurn]
    next_cursor: str | None
    discovery: TraceDiscovery | None = Field(None, description="Only on the first page (no cursor)")


class LimitQuery(WireIn):
    limit: int | None = Field(None, ge=1, description="At most this many (clamped to the route's maximum)")


class TurnResultOut(Wire):
    turn_id: str
    origin: str
    commit_status: Literal["committed", "failed"]
    created_at: str
    runtime_results: list[dict[str, Any]]
    abort_reason: str | None = None
    player_turn_index: int | None = None


class TurnResultsOut(Wire):
    items: list[TurnResultOut]


class RuntimeOutputsQuery(LimitQuery):
    runtime_id: str | None = Field(None, description="Only this runtime")
    plugin_id: str | None = Field(None, description="Only this plugin")
    since: str | None = Field(None, description="ISO timestamp: created at or after (400 invalid_query otherwise)")


class RuntimeOutputOut(Wire):
    id: str
    session_id: str
    turn_id: str
    plugin_id: str
    runtime_id: str
    timestamp: str
    status: str
    results: list[dict[str, Any]]
    meta_data: dict[str, Any]
    runtime_result_id: str | None = None


class RuntimeOutputsOut(Wire):
    items: list[RuntimeOutputOut]


class PromptMessage(Wire):
    role: str
    content: Any
    turn_id: str
    runtime_id: str


class FullPromptOut(Wire):
    output_id: str
    session_id: str
    turn_id: str
    messages: list[PromptMessage]
    approximate: bool


class InteractionRecordsQuery(LimitQuery):
    type: str | None = Field(None, description="form-submit, click, ...")
    source: str | None = Field(None, description="player, plugin-ui or external-api")
    target_plugin_id: str | None = Field(None, description="Only interactions of this plugin")


class InteractionRecordOut(Wire):
    id: str
    session_id: str
    turn_id: str | None
    timestamp: str
    source: str
    channel: str
    type: str = Field(description="message, form-submit, click, skill-invoke or rpc-call")
    payload: Any
    target_plugin_id: str | None = None
    target_runtime_id: str | None = None
    meta_data: dict[str, Any] | None = None


class InteractionRecordsOut(Wire):
    items: list[InteractionRecordOut]


class EventStreamQuery(WireIn):
    session_id: str = Field(description="The session to follow")
    topics: str | None = Field(None, description="Comma-separated SubscriptionTopics; all when absent")
    last_event_id: str | None = Field(None, description="Resume after this `<epoch>:<seq>` cursor (the browser's "
                                                        "Last-Event-ID header wins once it is past it)")


class EventEmitIn(WireIn):
    topic: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    payload: dict[str, Any] | None = None


class EventEmitOut(Wire):
    ok: bool
    id: str = Field(description="The event's `<epoch>:<seq>` id")


class SetupWaiveIn(WireIn):
    confirm: Literal[True]


class SetupRuntimeOut(Wire):
    ok: bool
    runtime_id: str
    state: dict[str, Any]


class PluginDataItemOut(Wire):
    plugin_id: str | None = None
    namespace: str
    key: str
    value: Any
    updated_at: str


class PluginDataListOut(Wire):
    items: list[PluginDataItemOut]


class PluginDataIndexOut(Wire):
    session_id: str
    plugin_id: str
    namespaces: list[dict[str, Any]]


class PluginDataPutIn(WireIn):
    value: Any = Field(description="Any JSON value (at most 256 KiB)")


class PluginDataPutOut(Wire):
    ok: bool
    namespace: str
    key: str


class SnapshotIn(WireIn):
    label: str | None = Field(None, max_length=256)


class SnapshotMetaOut(Wire):
    id: str
    session_id: str
    turn_id: str | None
    kind: str
    parent_id: str | None
    created_at: str
    payload_size: int
    label: str | None = None


class SnapshotOut(Wire):
    id: str
    session_id: str
    turn_id: str | None
    kind: str
    parent_id: str | None
    created_at: str
    label: str | None = None
    payload: dict[str, Any]


class SnapshotListOut(Wire):
    items: list[SnapshotMetaOut]
    next_cursor: str | None


class SnapshotDeleteOut(Wire):
    ok: bool
    snapshot_id: str


class SnapshotRestoreOut(Wire):
    ok: bool
    session_id: str
    snapshot_id: str
    completed_player_turns: int


class ForkIn(WireIn):
    from_snapshot_id: str = Field(min_length=1)


class ForkOut(Wire):
    session_id: str
    parent_session_id: str
    from_snapshot_id: str
    fork_snapshot_id: str
    missing_media_count: int
    owner_token: str = Field(description="The child session's owner token; shown only here")


class PluginRpcIn(WireIn):
    """POST /api/sessions/:id/plugin-rpc: ``kind`` decides the other fields (turns/plugin_rpc.py)."""

    model_config = ConfigDict(extra="allow")

    kind: Literal["action", "runtime", "command", "event"]
    plugin_id: str | None = None
    action: str | None = None
    runtime_id: str | None = None
    command_id: str | None = None
    topic: str | None = None
    payload: Any = None


class PluginRpcOk(Wire):
    status: Literal["ok"]


class PluginRpcAccepted(Wire):
    status: Literal["accepted", "approval-required"]


class SnapshotPageQuery(CursorQuery):
    limit: int | None = Field(None, ge=1, description="Snapshots per page (default 50, at most 500)")


# --- Suspensions (spec 004 §Suspend / Resume) -----------------------------------------------------


class SuspensionSummaryOut(Wire):
    id: str
    session_id: str
    turn_id: str
    runtime_id: str
    plugin_id: str
    reason: str
    resume_schema: dict[str, Any]
    created_at: str


class SuspensionListOut(Wire):
    items: list[SuspensionSummaryOut]


class SuspensionResumeIn(WireIn):
    data: dict[str, Any] = Field(..., description="The player's answer; must match the suspension's resumeSchema")


class SuspensionResumeResult(Wire):
    status: Literal["success", "suspended"]
    runtime_id: str
    plugin_id: str
    suspension_id: str
    turn_id: str
    output: Any = None


class SuspensionResumeOut(Wire):
    result: SuspensionResumeResult
    events: list[dict[str, Any]]


class SuspensionAbandonOut(Wire):
    ok: Literal[True]
    suspension_id: str
