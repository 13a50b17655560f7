"""Client-visible errors of the sessions app (spec 004 §会话管理 and the sections it links).

Each class fixes the HTTP status and the spec's ``code``; raise it from services and endpoints.
"""
from __future__ import annotations

from typing import Any

from covel.errors import ApiEarlyResponse, ApiError


class InvalidRequest(ApiError):
    """400 with an optional code (validation failures that the spec lists without one use None)."""

    status = 400


class WorldNotFound(ApiError):
    """404 world_not_found: a worldId names no world."""

    status = 404
    code = "world_not_found"

    def __init__(self, world_id: str) -> None:
        super().__init__(message=f"World not found: {world_id}")


class WorldDeleting(ApiError):
    """409 world_deleting: the world is being deleted; no new sessions in it."""

    status = 409
    code = "world_deleting"

    def __init__(self, world_id: str) -> None:
        super().__init__(message=f"World is being deleted: {world_id}")


class SessionAlreadyExists(ApiError):
    """409 session_already_exists: a client-chosen id is taken."""

    status = 409
    code = "session_already_exists"

    def __init__(self, session_id: str) -> None:
        super().__init__(message=f"Session already exists: {session_id}")


class PluginRejected(ApiError):
    """400 plugin_rejected: a requested plugin was refused (conflict ...); details is the rejection."""

    status = 400
    code = "plugin_rejected"

    def __init__(self, rejection: dict[str, Any]) -> None:
        super().__init__(message=f"Plugin rejected: {rejection.get('pluginId')} ({rejection.get('reason')})", details=rejection)


class DimensionProviderConflict(ApiError):
    """409 dimension_provider_conflict: more than one enabled plugin provides world.dimensions@1."""

    status = 409
    code = "dimension_provider_conflict"

    def __init__(self, candidates: list[str]) -> None:
        super().__init__(message="More than one enabled plugin provides world.dimensions@1",
                         details={"candidates": candidates})


class DimensionProviderRequired(ApiError):
    """409 dimension_provider_required: the bound, running dimension provider must stay enabled."""

    status = 409
    code = "dimension_provider_required"

    def __init__(self, plugin_id: str, display_name: str) -> None:
        super().__init__(message=f"The session's dimension provider {plugin_id} must stay enabled",
                         details={"pluginId": plugin_id, "displayName": display_name})


class SessionEnded(ApiError):
    """409 session_ended: ended is terminal."""

    status = 409
    code = "session_ended"

    def __init__(self) -> None:
        super().__init__(message="Session has ended")


class SessionDeleting(ApiError):
    """409 session_deleting: a delete is in progress; writes are refused."""

    status = 409
    code = "session_deleting"

    def __init__(self) -> None:
        super().__init__(message="Session is being deleted")


class SessionNotActive(ApiError):
    """409 session_not_active: the write needs status active (and no delete in progress)."""

    status = 409
    code = "session_not_active"

    def __init__(self, status: str = "") -> None:
        super().__init__(message=f"Session is not active{f' ({status})' if status else ''}")


class SeatNotFound(ApiError):
    status = 404
    code = "seat_not_found"

    def __init__(self, seat_id: str) -> None:
        super().__init__(message=f"Seat not found: {seat_id}")


class SeatNotHuman(ApiError):
    status = 409
    code = "seat_not_human"

    def __init__(self, seat_id: str) -> None:
        super().__init__(message=f"Seat is not controlled by a human: {seat_id}")


class SeatCharacterUnbound(ApiError):
    status = 409
    code = "seat_character_unbound"

    def __init__(self, character_id: str) -> None:
        super().__init__(message=f"Character is not bound to this seat: {character_id}")


class InvalidCursor(ApiError):
    """400 invalid_cursor: a pagination cursor we did not issue (or of an unsupported version)."""

    status = 400
    code = "invalid_cursor"

    def __init__(self) -> None:
        super().__init__(message="Invalid cursor")


class LorebookEntryNotFound(ApiError):
    status = 404
    code = "lorebook_entry_not_found"

    def __init__(self, entry_id: str) -> None:
        super().__init__(message=f"Lorebook entry not found: {entry_id}")


class LorebookEntryExists(ApiError):
    status = 409
    code = "lorebook_entry_exists"

    def __init__(self, entry_id: str) -> None:
        super().__init__(message=f"Lorebook entry already exists: {entry_id}")


class CharacterRejected(ApiError):
    """400 (no code in the spec): the character request or its character.upsert proposal was refused."""

    status = 400
    code = "character_rejected"


class OutputNotFound(ApiError):
    status = 404
    code = "runtime_output_not_found"

    def __init__(self, output_id: str) -> None:
        super().__init__(message=f"Runtime output not found: {output_id}")


# --- approvals (spec 004 §RPC Approval 流程, §社区插件授权) -------------------------------------------


class ApprovalRequired(ApiEarlyResponse):
    """202 ``{status: "approval-required", approvalId, pending}``: a community plugin lacks a grant;
    nothing ran and nothing was written. The client decides, then repeats the same request."""

    status = 202

    def __init__(self, pending: dict[str, Any]) -> None:
        super().__init__({"status": "approval-required", "approvalId": pending["approvalId"], "pending": pending})


class ApprovalNotFound(ApiError):
    """404 approval_not_found: no such approval, or it was already decided."""

    status = 404
    code = "approval_not_found"

    def __init__(self, approval_id: str) -> None:
        super().__init__(message=f"Approval not found: {approval_id}")


class ApprovalScopeChanged(ApiError):
    """409 approval_scope_changed: the session's grants were revoked, the plugin was disabled, the
    session is being deleted or was re-created under the same id since the request was made."""

    status = 409
    code = "approval_scope_changed"

    def __init__(self) -> None:
        super().__init__(message="The approval no longer applies: the session's authorization scope changed")


class ApprovalQueueFull(ApiError):
    """429 queue_full: the session already has the most pending approvals it may hold."""

    status = 429
    code = "queue_full"

    def __init__(self, limit: int) -> None:
        super().__init__(message=f"Too many pending approvals in this session (max {limit})")


class PluginLocked(ApiError):
    """403 plugin_locked: a builtin core plugin cannot be disabled in a session."""

    status = 403
    code = "plugin_locked"

    def __init__(self, plugin_id: str) -> None:
        super().__init__(message=f"Plugin is locked in this session: {plugin_id}", details={"pluginId": plugin_id})


class SessionLifecycleBusy(ApiError):
    """409 session_lifecycle_busy: a SessionStart / SessionEnd hook is running; retry when it is done."""

    status = 409
    code = "session_lifecycle_busy"

    def __init__(self, event: str) -> None:
        super().__init__(message=f"A {event} hook of this session is running; retry shortly", details={"event": event})


class PluginNotPaused(ApiError):
    """409 plugin_not_paused: POST .../plugins/:pluginId/resume-fault for a plugin the fault breaker
    has not paused in this session (spec 004 §会话插件管理)."""

    status = 409
    code = "plugin_not_paused"

    def __init__(self, plugin_id: str) -> None:
        super().__init__(message=f"Plugin is not paused in this session: {plugin_id}", details={"pluginId": plugin_id})
