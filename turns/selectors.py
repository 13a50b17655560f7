"""Reads of the turns app: the action-kinds catalogue, seats, executions and their frames."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from turns.models import Execution, ExecutionFrame

# The six framework kinds, in catalogue order (spec 004 §行动类型目录, §submit_actions 基础类型).
# roles: which seat roles may submit them — players speak and act as characters; the host
# narrates, directs and advances; both run slash commands; spectators submit nothing.
BASE_ACTION_KINDS: tuple[dict[str, Any], ...] = (
    {"kind": "say", "source": "framework", "roles": ["player"], "text": "required", "actor": True,
     "display": {"label": {"zh": "说", "en": "Say"}}},
    {"kind": "act", "source": "framework", "roles": ["player"], "text": "required", "actor": True,
     "display": {"label": {"zh": "行动", "en": "Act"}}},
    {"kind": "narrate", "source": "framework", "roles": ["host"], "text": "required", "actor": False,
     "display": {"label": {"zh": "旁白", "en": "Narrate"}}},
    {"kind": "direct", "source": "framework", "roles": ["host"], "text": "required", "actor": False,
     "display": {"label": {"zh": "导演", "en": "Direct"}}},
    {"kind": "advance", "source": "framework", "roles": ["host"], "text": "none", "actor": False,
     "display": {"label": {"zh": "推进", "en": "Advance"}}},
    {"kind": "command", "source": "framework", "roles": ["player", "host"], "text": "required", "actor": False,
     "display": {"label": {"zh": "命令", "en": "Command"}}},
)
BASE_KIND_NAMES = frozenset(k["kind"] for k in BASE_ACTION_KINDS)
DEFAULT_PLUGIN_KIND_ROLES = ["player"]


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


def _plugin_registry():
    try:
        from sessions.catalog import plugin_registry
    except ImportError:  # the sessions helper is not there: the same registry, built directly
        from plugins_app.registry import registry_get

        return registry_get(covel_home=settings.COVEL_HOME)
    return plugin_registry()


def action_kinds_catalogue(session) -> ActionKindCatalogue:
    """The session's action-kind catalogue (spec 004 §行动类型目录).

    kinds: the six base kinds, then the ``contributes.actionKinds`` of the session's runnable
    active plugins in plugin order, each as ``<pluginId>/<name>`` with text/actor/display/
    fieldsSchema. seats: every seat with ``allowed`` = the kinds whose roles contain the seat's
    role; a seat not controlled by a human gets an empty list.
    """
    kinds = [dict(k, roles=list(k["roles"])) for k in BASE_ACTION_KINDS]
    registry = _plugin_registry()
    for plugin_id in _active_plugin_ids(session):
        record = registry.get(plugin_id)
        if record is None or record.host_state == "error":
            continue
        for declared in record.manifest.contributes.action_kinds:
            name = declared.get("name")
            if not isinstance(name, str) or not name:
                continue
            entry: dict[str, Any] = {
                "kind": f"{plugin_id}/{name}",
                "source": "plugin",
                "pluginId": plugin_id,
                "roles": list(declared.get("roles") or DEFAULT_PLUGIN_KIND_ROLES),
                "text": declared.get("text") or "optional",
                "actor": bool(declared.get("actor", True)),
                "display": dict(declared.get("display") or {"label": {"en": name}}),
            }
            if isinstance(declared.get("fieldsSchema"), dict):
                entry["fieldsSchema"] = declared["fieldsSchema"]
            kinds.append(entry)
    seats = []
    for seat in session.seats or []:
        if not isinstance(seat, dict):
            continue
        role = seat.get("role", "player")
        is_human = seat.get("controller", "human") == "human"
        seats.append({
            "seatId": seat.get("id", ""),
            "role": role,
            "controller": seat.get("controller", "human"),
            "allowed": [k["kind"] for k in kinds if is_human and role in k["roles"]],
        })
    return ActionKindCatalogue(kinds=kinds, seats=seats)


def _active_plugin_ids(session) -> list[str]:
    ids = []
    for item in session.active_plugins or []:
        if isinstance(item, str):
            ids.append(item)
        elif isinstance(item, dict) and isinstance(item.get("id") or item.get("pluginId"), str):
            ids.append(item.get("id") or item.get("pluginId"))
    return ids


def seat_find(session, seat_id: str | None) -> dict[str, Any] | None:
    """The seat ``seat_id``, or the main seat (first human-controlled player seat) when None."""
    seats = [s for s in (session.seats or []) if isinstance(s, dict)]
    if seat_id is None:
        return next((s for s in seats if s.get("controller", "human") == "human" and s.get("role", "player") == "player"), None)
    return next((s for s in seats if s.get("id") == seat_id), None)


def seat_character_ids(session, seat: dict[str, Any]) -> list[str]:
    """Character ids bound to ``seat``: ``characters: "auto"`` binds every ``type: player`` character."""
    from sessions.models import Character

    bound = seat.get("characters", [])
    if bound == "auto":
        return list(
            Character.objects.filter(session_id=session.pk, type="player").order_by("id").values_list("character_id", flat=True)
        )
    return [c for c in bound if isinstance(c, str)] if isinstance(bound, list) else []


def seat_current_character_id(session, seat: dict[str, Any]) -> str | None:
    """The seat's current character: ``currentCharacterId`` if bound, else its first bound character."""
    bound = seat_character_ids(session, seat)
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
