"""Errors of POST /api/actions and the execution endpoints (spec 004 §Actions（SSE 桥接）).

Before the SSE stream opens they are JSON responses (``ApiError``); after it opened the same
``code`` travels as the single ``error.occurred`` frame of the stream (``ExecutionRejected``).
"""
from __future__ import annotations

from typing import Any

from covel.errors import ApiError

# submit_actions check order (spec 004 §submit_actions 校验顺序): step → (HTTP status, code).
INVALID_ACTION_REQUEST = "invalid_action_request"
SEAT_NOT_FOUND = "seat_not_found"
SEAT_NOT_HUMAN = "seat_not_human"
UNKNOWN_ACTION_KIND = "unknown_action_kind"
ACTION_KIND_NOT_ALLOWED = "action_kind_not_allowed"
ACTOR_NOT_BOUND = "actor_not_bound"
INVALID_ACTION = "invalid_action"
INVALID_ACTION_FIELDS = "invalid_action_fields"

INPUT_ALREADY_COMMITTED = "input_already_committed"
REQUEST_ID_CONFLICT = "request_id_conflict"
SESSION_NOT_ACTIVE = "session_not_active"
SESSION_DELETING = "session_deleting"
NO_ACTIVE_PLUGINS = "no_active_plugins"
SESSION_INCARNATION_CHANGED = "session_incarnation_changed"
EXECUTION_FAILED = "execution_failed"
# Answers to a form whose plugin validator cannot run (spec 004 §玩家交互 流开始之前的 JSON 响应).
FORM_PROVIDER_INACTIVE = "form_provider_inactive"
FORM_PROVIDER_UNAVAILABLE = "form_provider_unavailable"
FORM_VALIDATOR_UNDECLARED = "form_validator_undeclared"

STATUS_BY_CODE = {
    INVALID_ACTION_REQUEST: 400,
    SEAT_NOT_FOUND: 404,
    SEAT_NOT_HUMAN: 409,
    UNKNOWN_ACTION_KIND: 409,
    ACTION_KIND_NOT_ALLOWED: 409,
    ACTOR_NOT_BOUND: 409,
    INVALID_ACTION: 400,
    INVALID_ACTION_FIELDS: 400,
    SESSION_NOT_ACTIVE: 409,
    SESSION_DELETING: 409,
    NO_ACTIVE_PLUGINS: 400,
    REQUEST_ID_CONFLICT: 409,
    FORM_PROVIDER_INACTIVE: 400,
    FORM_PROVIDER_UNAVAILABLE: 400,
    FORM_VALIDATOR_UNDECLARED: 400,
}


class ActionRejected(ApiError):
    """A request refused by the action checks: ``code`` from STATUS_BY_CODE, HTTP status to match.

    Raised by ``turns.services.actions_check`` both before the stream (rendered as JSON by the
    global handler) and inside the session lock (relayed as ``error.occurred`` with the same code).
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(STATUS_BY_CODE.get(code, 400), code, message, details)


class ExecutionRejected(Exception):
    """Refuse an execution after its stream opened and before anything was written.

    The bridge turns it into the stream's single ``error.occurred`` frame
    (payload ``{"message", "code", "details"?}``) with no ``execution.completed``, and records the
    execution as ``rejected``. The engine raises it for in-stream rejections such as
    ``input_already_committed``, ``retry_source_*``, ``interaction_already_submitted``,
    ``form_rejected`` (spec 004 §流里的拒绝, §玩家交互) — only before it emitted any frame.
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def payload(self) -> dict[str, Any]:
        """The ``error.occurred`` payload."""
        out: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.details is not None:
            out["details"] = self.details
        return out


class SessionIncarnationChanged(ApiError):
    """409 session_incarnation_changed: the session vanished or was recreated during the read."""

    status = 409
    code = SESSION_INCARNATION_CHANGED

    def __init__(self) -> None:
        super().__init__(message="Session was replaced while the request was reading")


NO_ACTIVE_TURN = "no_active_turn"
TURN_NOT_REACHABLE = "turn_not_reachable"
STEER_CLOSED = "steer_closed"


class NoActiveTurn(ApiError):
    """409 no_active_turn: /abort or /steer found no turn of this session running (or waiting, for
    abort), or it finished meanwhile (spec 004 §回合中控制: 没有进行中的回合时返回 409)."""

    status = 409
    code = NO_ACTIVE_TURN

    def __init__(self) -> None:
        super().__init__(message="No turn is running on this session")


class TurnNotReachable(ApiError):
    """409 turn_not_reachable: the database shows a running turn but no worker acknowledged the
    control request in time (spec 004 §多实例能力边界: 到了别的实例……也返回 409)."""

    status = 409
    code = TURN_NOT_REACHABLE

    def __init__(self) -> None:
        super().__init__(message="The turn's worker did not answer; the turn may have just ended or its worker stopped")


class SteerClosed(ApiError):
    """409 steer_closed: a turn runs, but no story model call of it can take a message any more
    (its story runtime already finished, it runs no agent story runtime, or it is being stopped).
    Spec 004 §回合中控制 steer merges a message only into a story runtime's next LLM call and
    answers 409 when there is nothing to steer."""

    status = 409
    code = STEER_CLOSED

    def __init__(self) -> None:
        super().__init__(message="The running turn's story runtime can no longer take a message")


# --- plugin-rpc (spec 004 §插件 RPC 通道 错误) ----------------------------------------------------------

RPC_INVALID_REQUEST = "invalid_rpc_request"
RPC_RESERVED_ACTION = "reserved_action"
RPC_COMMAND_ARGS_INVALID = "command_args_invalid"
RPC_COMMAND_CONTEXT_REQUIRED = "command_context_required"
RPC_PLUGIN_MISMATCH = "plugin_mismatch"
RPC_EVENT_PAYLOAD_INVALID = "event_payload_invalid"
RPC_PLUGIN_NOT_ACTIVE = "plugin_not_active"
RPC_UNKNOWN_ACTION = "unknown_action"
RPC_RUNTIME_NOT_ACTIVE = "runtime_not_active"
RPC_COMMAND_NOT_ACTIVE = "command_not_active"
RPC_EVENT_NOT_DECLARED = "event_not_declared"
RPC_RETRY_TURN_NOT_FOUND = "retry_turn_not_found"
RPC_RUNTIME_SUBAGENT_ONLY = "runtime_subagent_only"
RPC_COMMAND_CHANGED = "command_changed"
RPC_RETRY_SOURCE_NOT_COMMITTED = "retry_source_not_committed"
RPC_BACKGROUND_QUEUE_FULL = "background_queue_full"
RPC_TURN_COMMIT_FAILED = "turn_commit_failed"
#: The dimension editor's commit found a version changed meanwhile (spec 004 §维度编辑与待结算恢复).
RPC_DIMENSION_VERSION_CONFLICT = "dimension-version-conflict"
RPC_HANDLER_TIMEOUT = "handler_timeout"

RPC_STATUS_BY_CODE = {
    RPC_INVALID_REQUEST: 400, RPC_RESERVED_ACTION: 400, RPC_COMMAND_ARGS_INVALID: 400, RPC_COMMAND_CONTEXT_REQUIRED: 400,
    RPC_PLUGIN_MISMATCH: 400, RPC_EVENT_PAYLOAD_INVALID: 400,
    RPC_PLUGIN_NOT_ACTIVE: 404, RPC_UNKNOWN_ACTION: 404, RPC_RUNTIME_NOT_ACTIVE: 404, RPC_COMMAND_NOT_ACTIVE: 404,
    RPC_EVENT_NOT_DECLARED: 404, RPC_RETRY_TURN_NOT_FOUND: 404,
    SESSION_NOT_ACTIVE: 409, SESSION_DELETING: 409, SESSION_INCARNATION_CHANGED: 409, RPC_RUNTIME_SUBAGENT_ONLY: 409,
    RPC_COMMAND_CHANGED: 409,
    RPC_RETRY_SOURCE_NOT_COMMITTED: 409,
    RPC_BACKGROUND_QUEUE_FULL: 429, RPC_TURN_COMMIT_FAILED: 500, RPC_DIMENSION_VERSION_CONFLICT: 409, RPC_HANDLER_TIMEOUT: 504,
}


class PluginRpcError(ApiError):
    """A refused plugin-rpc request: ``code`` from RPC_STATUS_BY_CODE, HTTP status to match."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(RPC_STATUS_BY_CODE.get(code, 400), code, message, details)
