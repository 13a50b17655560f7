"""Request and response shapes of POST /api/actions and GET /api/sessions/:id/execution (spec 004
§Actions（SSE 桥接）, §刷新与未完成回合恢复).

Every model forbids unknown fields and coerces nothing: a request that does not match is
400 invalid_action_request before anything is written.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

# Spec 004 §Actions: "requestId、sessionId 和 runtime / 回合 ID 必须是长度有限的安全标识符".
SAFE_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
RUNTIME_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*/[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
ACTION_KIND_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*(/[A-Za-z0-9_][A-Za-z0-9_.:\-]*)?$"

RequestId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=128, pattern=SAFE_ID_PATTERN)]
SessionId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=SAFE_ID_PATTERN)]
TurnId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=64, pattern=SAFE_ID_PATTERN)]
EntityId = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=160, pattern=SAFE_ID_PATTERN)]
RuntimeId = Annotated[str, StringConstraints(strict=True, min_length=3, max_length=160, pattern=RUNTIME_ID_PATTERN)]
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


class RetryFailedRuntimesPayload(_Strict):
    runtimeIds: list[RuntimeId] = Field(min_length=1, max_length=MAX_RETRY_RUNTIMES)
    retryFromTurnId: TurnId

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
