"""Reads of the turns app: the action-kinds catalogue, seats, executions and their frames."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turns.models import Execution, ExecutionFrame


@dataclass
class ActionKindCatalogue:
    """GET /api/sessions/:id/action-kinds as data: ``kinds`` (wire dicts) and ``seats``."""

    kinds: list[dict[str, Any]] = field(default_factory=list)
    seats: list[dict[str, Any]] = field(default_factory=list)

    def kind(self, name: str) -> dict[str, Any] | None:
        return next((k for k in self.kinds if k["kind"] == name), None)

    def allowed(self, seat_id: str) -> list[str]:
        seat = next((s for s in self.seats if s["seatId"] == seat_id), None)
        return list(seat["allowed"]) if seat else []

    def as_wire(self) -> dict[str, Any]:
        return {"kinds": self.kinds, "seats": self.seats}


def action_kinds_catalogue(session) -> ActionKindCatalogue:
    """The session's action-kind catalogue — the same one GET /api/sessions/:id/action-kinds
    serves (``sessions.selectors.action_kinds``), so validation and the input box never disagree
    (spec 004 §行动类型目录: 服务端校验行动时用的也是同一份目录)."""
    from plugins_app.registry import plugin_registry
    from sessions.selectors import action_kinds

    wire = action_kinds(session, plugin_registry())
    return ActionKindCatalogue(kinds=wire["kinds"], seats=wire["seats"])


def seat_find(session, seat_id: str | None) -> dict[str, Any] | None:
    """The seat ``seat_id``, or the main seat (first human-controlled player seat) when None."""
    seats = [s for s in (session.seats or []) if isinstance(s, dict)]
    if seat_id is None:
        return next((s for s in seats if s.get("controller", "human") == "human" and s.get("role", "player") == "player"), None)
    return next((s for s in seats if s.get("id") == seat_id), None)


def seat_character_ids(session, seat: dict[str, Any], *, player_character_ids: list[str] | None = None) -> list[str]:
    """Character ids bound to ``seat`` (``characters: "auto"`` binds every ``type: player`` one;
    ``player_character_ids``: those, in creation order, when the caller read them already)."""
    from sessions.selectors import seat_bound_character_ids

    return seat_bound_character_ids(session, seat, player_character_ids=player_character_ids)


def seat_current_character_id(session, seat: dict[str, Any], *, player_character_ids: list[str] | None = None) -> str | None:
    """The seat's current character: ``currentCharacterId`` if bound, else its first bound character."""
    bound = seat_character_ids(session, seat, player_character_ids=player_character_ids)
    current = seat.get("currentCharacterId")
    if isinstance(current, str) and current in bound:
        return current
    return bound[0] if bound else None


def execution_get(execution_id: str) -> Execution | None:
    return Execution.objects.filter(pk=execution_id).first()


def execution_latest(session_id: str) -> Execution | None:
    """The session's most recent execution that is a turn (rejected requests ran nothing)."""
    return (
        Execution.objects.filter(session_id=session_id)
        .exclude(status=Execution.STATUS_REJECTED)
        .order_by("-created_at", "-id")
        .first()
    )


def execution_frames_after(execution_id: str, after_index: int, *, limit: int = 500) -> list[ExecutionFrame]:
    """Persisted frames with ``index > after_index``, in index order."""
    return list(
        ExecutionFrame.objects.filter(execution_id=execution_id, index__gt=after_index).order_by("index")[:limit]
    )


def input_message_committed(session_id: str, input_message_id: str) -> bool:
    """True when a committed turn already saved the player input ``input_message_id``."""
    from sessions.models import ChatMessage
    from turns.models import TurnResult

    if TurnResult.objects.filter(session_id=session_id, input_message_id=input_message_id, committed=True).exists():
        return True
    return ChatMessage.objects.filter(session_id=session_id, message_id=input_message_id, role="user").exists()
