"""Reads of sessions and their state, shaped as the spec's wire objects (camelCase dicts).

Private framework fields (owner hash, incarnation nonce, deletion lease) never leave this module:
``session_out`` derives the public ``incarnation`` from the private nonce.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime
from typing import Any

from django.db.models import Q

from covel.jsonbody import json_type_name
from covel.times import iso

from sessions.errors import InvalidCursor
from sessions.faults import FAULTS_KEY, plugins_paused
from sessions.grants import session_plugin_approval
from sessions.lifecycle import LIFECYCLE_KEY, SESSION_END_FIRED_KEY
from sessions.models import Character, ChatMessage, DimensionValue, LorebookEntry, Session
from sessions.world_data_import import RECEIVERS_KEY

AUTO_ADVANCE_DEFAULT = 3
#: Framework bookkeeping in session metadata that is not part of the record (lifecycle hooks, the
#: fault breaker, world data receivers).
_PRIVATE_METADATA = (LIFECYCLE_KEY, SESSION_END_FIRED_KEY, FAULTS_KEY, RECEIVERS_KEY)
MESSAGES_PAGE_DEFAULT = 80
MESSAGES_PAGE_MAX = 500
VIEW_MESSAGES = 80
VIEW_TRACE_EVENTS = 600
CURSOR_VERSION = 1

BASE_ACTION_KINDS: list[dict[str, Any]] = [
    {"kind": "say", "text": "required", "actor": True, "display": {"label": {"zh": "说", "en": "Say"}}},
    {"kind": "act", "text": "required", "actor": True, "display": {"label": {"zh": "做", "en": "Act"}}},
    {"kind": "narrate", "text": "required", "actor": False, "display": {"label": {"zh": "旁白", "en": "Narrate"}}},
    {"kind": "direct", "text": "required", "actor": False, "display": {"label": {"zh": "导演", "en": "Direct"}}},
    {"kind": "advance", "text": "none", "actor": False, "display": {"label": {"zh": "推进", "en": "Advance"}}},
    {"kind": "command", "text": "required", "actor": False, "display": {"label": {"zh": "命令", "en": "Command"}}},
]
# Which base kinds each seat role may submit. The spec names the roles (player, host, spectator) and
# shows player → say/act/command; host writes narration and direction; a spectator only runs commands.
ROLE_BASE_KINDS: dict[str, list[str]] = {
    "player": ["say", "act", "command"],
    "host": ["narrate", "direct", "advance", "command"],
    "spectator": ["command"],
}


def incarnation_public(session: Session) -> str:
    """The stable, opaque public identity marker derived from the private nonce (spec 004 §会话身份)."""
    return hashlib.sha256(f"covel-incarnation:{session.incarnation}".encode()).hexdigest()[:32]


def auto_advance_limit(session: Session) -> int:
    value = (session.metadata or {}).get("autoAdvanceLimit")
    return value if isinstance(value, int) and not isinstance(value, bool) else AUTO_ADVANCE_DEFAULT


def session_out(session: Session, *, brief: bool = False) -> dict[str, Any]:
    """The session record (spec 004 GET /api/sessions/:id); brief=True is the list item shape."""
    # The lifecycle bookkeeping (sessions.lifecycle) is the framework's, not part of the record.
    meta = {k: v for k, v in (session.metadata or {}).items() if k not in _PRIVATE_METADATA}
    out: dict[str, Any] = {
        "id": session.id,
        "worldId": session.world_id or None,
        "status": session.status,
        "phase": session.phase,
        "completedPlayerTurns": session.completed_player_turns,
        "setupRuntimes": session.setup_runtimes or {},
        "locale": session.locale,
        "activePlugins": list(session.active_plugins or []),
        "incarnation": incarnation_public(session),
        "createdAt": iso(session.created_at),
        "updatedAt": iso(session.updated_at),
    }
    if session.title:
        out["title"] = session.title
    if brief:
        return out
    out.update({
        "seats": session.seats or [],
        "metadata": meta,
        "runtimeModelOverrides": meta.get("runtimeModelOverrides") or {},
        "autoAdvanceLimit": auto_advance_limit(session),
    })
    return out


def session_list(*, world_id: str | None = None) -> list[Session]:
    qs = Session.objects.exclude(deletion_state=Session.DELETION_DELETING).order_by("-created_at", "id")
    if world_id:
        qs = qs.filter(world_id=world_id)
    return list(qs)


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

_PROMOTED = ("runtimeId", "block", "segments", "actions")


def message_out(message: ChatMessage, session_id: str) -> dict[str, Any]:
    """A flat message (spec 004 §消息历史): metadata's turnId/runtimeId/kind/block promoted to the top."""
    meta = message.metadata or {}
    out: dict[str, Any] = {"id": message.message_id, "sessionId": session_id, "role": message.role,
                           "content": message.content, "createdAt": iso(message.created_at)}
    if message.kind and message.kind != "text":
        out["kind"] = message.kind
    if message.turn_id:
        out["turnId"] = message.turn_id
    if message.seat_id:
        out["seatId"] = message.seat_id
    for key in _PROMOTED:
        if key in meta:
            out[key] = meta[key]
    if "block" not in out and isinstance(meta.get("ui"), dict):
        out["block"] = meta["ui"]  # ui messages written before the block moved to metadata.block
    return out


def messages_all(session: Session) -> list[dict[str, Any]]:
    rows = ChatMessage.objects.filter(session=session).order_by("created_at", "id")
    return [message_out(m, session.id) for m in rows]


def cursor_encode(created_at: datetime, pk: int) -> str:
    """Opaque, versioned keyset position (createdAt with microseconds, row id)."""
    raw = json.dumps({"v": CURSOR_VERSION, "t": created_at.isoformat(), "i": pk}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[datetime, int]:
    """Inverse of cursor_encode. Raises InvalidCursor (400 invalid_cursor) for anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
        if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
            raise ValueError("version")
        created_at = datetime.fromisoformat(data["t"])
        pk = data["i"]
        if created_at.tzinfo is None or not isinstance(pk, int) or isinstance(pk, bool):
            raise ValueError("shape")
        return created_at, pk
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor() from None


def messages_page(session: Session, *, limit: int = MESSAGES_PAGE_DEFAULT, cursor: str | None = None) -> dict[str, Any]:
    """One page of history, oldest first within the page (spec 004 GET /messages/page).

    Keyset on (created_at, id) descending — never OFFSET — so a page costs the same at any depth and
    rows inserted after the cursor was issued neither shift nor repeat older pages.
    ``nextCursor`` points at the page's oldest row; None when no older row exists.
    """
    qs = ChatMessage.objects.filter(session=session)
    if cursor:
        created_at, pk = cursor_decode(cursor)
        # The plain range bound lets the (session, created_at, id) index seek to the cursor
        # instead of scanning from the newest row; the OR resolves ties on created_at.
        qs = qs.filter(created_at__lte=created_at).filter(Q(created_at__lt=created_at) | Q(id__lt=pk))
    rows = list(qs.order_by("-created_at", "-id")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    next_cursor = cursor_encode(rows[0].created_at, rows[0].id) if has_more and rows else None
    return {"items": [message_out(m, session.id) for m in rows], "nextCursor": next_cursor}


# ---------------------------------------------------------------------------------------------
# Characters, lorebook, dimensions
# ---------------------------------------------------------------------------------------------


def character_out(character: Character, session_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": character.character_id, "sessionId": session_id, "name": character.name, "type": character.type,
        "description": character.description, "fields": character.fields or {}, "version": character.version,
        "createdAt": iso(character.created_at), "updatedAt": iso(character.updated_at),
    }
    if character.aliases:
        out["aliases"] = list(character.aliases)
    return out


def characters_list(session: Session) -> list[dict[str, Any]]:
    return [character_out(c, session.id) for c in Character.objects.filter(session=session).order_by("created_at", "id")]


def lorebook_owner(entry: LorebookEntry) -> dict[str, Any]:
    if entry.owner == LorebookEntry.OWNER_PLUGIN:
        return {"kind": "plugin", "pluginId": entry.plugin_id}
    return {"kind": entry.owner}


def lorebook_out(entry: LorebookEntry, session_id: str) -> dict[str, Any]:
    """LorebookEntryRecord: {id, sessionId, owner, pluginId?, title?, keys, content, strategy,
    position, insertionOrder, priority, enabled, extra?, createdAt, updatedAt}."""
    out: dict[str, Any] = {
        "id": entry.entry_id, "sessionId": session_id, "owner": lorebook_owner(entry), "keys": list(entry.keys or []),
        "content": entry.content, "strategy": entry.strategy, "position": entry.position,
        "insertionOrder": entry.insertion_order, "priority": entry.priority, "enabled": entry.enabled,
        "createdAt": iso(entry.created_at), "updatedAt": iso(entry.updated_at),
    }
    if entry.plugin_id:
        out["pluginId"] = entry.plugin_id
    if entry.title:
        out["title"] = entry.title
    if entry.metadata:
        out["extra"] = entry.metadata
    return out


def lorebook_list(session: Session) -> list[dict[str, Any]]:
    rows = LorebookEntry.objects.filter(session=session).order_by("insertion_order", "id")
    return [lorebook_out(e, session.id) for e in rows]


def dimensions_public(session: Session) -> dict[str, Any]:
    """``{id: {name, description?, schema, value, version}}``: current values, no rules or initial values."""
    out: dict[str, Any] = {}
    for row in DimensionValue.objects.filter(session=session).order_by("id"):
        definition = row.definition or {}
        item = {"name": definition.get("name", row.dimension_id), "schema": definition.get("schema", {}),
                "value": row.value, "version": row.version}
        if definition.get("description"):
            item["description"] = definition["description"]
        out[row.dimension_id] = item
    return out


# ---------------------------------------------------------------------------------------------
# Plugins, action kinds, seats
# ---------------------------------------------------------------------------------------------


def runnable_plugins(session: Session, registry) -> tuple[list[str], list[dict[str, Any]]]:
    """(runnable plugin ids, unavailable rejections) of the session's saved selection, re-checked
    against the installed plugins without adding new ones (spec 004 §会话插件管理)."""
    from sessions.plugin_selection import plugins_resolve

    selection = (session.metadata or {}).get("pluginSelection") or {}
    saved = list(session.active_plugins or [])
    resolution = plugins_resolve(registry, requested=saved, excluded=selection.get("excluded") or [],
                                 required_contracts=[], strict=False)
    runnable = [p for p in resolution.runnable if p in saved]
    rejections = [r for r in resolution.rejections if r["pluginId"] in saved]
    return runnable, rejections


def action_kinds(session: Session, registry) -> dict[str, Any]:
    """The session's action kind catalogue and per-seat permissions (spec 004 §行动类型目录)."""
    kinds: list[dict[str, Any]] = []
    for base in BASE_ACTION_KINDS:
        roles = [role for role, allowed in ROLE_BASE_KINDS.items() if base["kind"] in allowed]
        kinds.append({"kind": base["kind"], "source": "framework", "roles": roles, "text": base["text"],
                      "actor": base["actor"], "display": base["display"]})
    runnable, _ = runnable_plugins(session, registry)
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        for declared in record.manifest.contributes.action_kinds:
            name = declared.get("name")
            if not isinstance(name, str):
                continue
            item: dict[str, Any] = {
                "kind": f"{plugin_id}/{name}", "source": "plugin", "pluginId": plugin_id,
                "roles": [r for r in declared.get("roles") or ["player"] if isinstance(r, str)],
                "text": declared.get("text") if declared.get("text") in ("required", "optional", "none") else "optional",
                "actor": bool(declared.get("actor", True)),
                "display": declared.get("display") or {"label": name},
            }
            if isinstance(declared.get("fieldsSchema"), dict):
                item["fieldsSchema"] = declared["fieldsSchema"]
            kinds.append(item)
    seats = []
    for seat in session.seats or []:
        role = seat.get("role", "player")
        is_human = seat.get("controller") == "human"
        allowed = [k["kind"] for k in kinds if role in k["roles"]] if is_human else []
        seats.append({"seatId": seat.get("id"), "role": role, "controller": seat.get("controller"), "allowed": allowed})
    return {"kinds": kinds, "seats": seats}


def seat_bound_character_ids(session: Session, seat: dict[str, Any], *,
                             player_character_ids: list[str] | None = None) -> list[str]:
    """Characters a seat controls: ``"auto"`` binds every ``type: player`` character (in creation
    order; ``player_character_ids`` when the caller has read them already, else one query)."""
    characters = seat.get("characters")
    if characters == "auto":
        if player_character_ids is not None:
            return list(player_character_ids)
        return list(Character.objects.filter(session=session, type="player").order_by("created_at", "id")
                    .values_list("character_id", flat=True))
    return [c for c in characters or [] if isinstance(c, str)]


def plugin_is_locked(record) -> bool:
    """Builtin ``kind: core`` plugins are locked on in a session (403 plugin_locked on disable)."""
    return record.manifest.kind == "core" and record.source == "builtin"


def session_plugins(session: Session, registry) -> dict[str, Any]:
    """GET /api/sessions/:id/plugins: ``{items, commands, unavailable}``. Read-only. An item the
    fault breaker paused in this session carries ``paused: {reason}`` (sessions.faults)."""
    runnable, rejections = runnable_plugins(session, registry)
    selection = (session.metadata or {}).get("pluginSelection") or {}
    auto_added = set(selection.get("autoAdded") or [])
    saved = list(session.active_plugins or [])
    paused = plugins_paused(session.metadata)
    items = []
    for record in registry.all():
        summary = record.summary()
        is_active = record.id in runnable
        # Community plugins chosen but not granted for this session stay selected and show as
        # paused (spec 004 §社区插件待授权状态: approvalRequired true, active false).
        approval = session_plugin_approval(session, record, is_selected=record.id in saved)
        needs_approval = bool(approval.get("approvalRequired"))
        summary.update({"active": record.id in saved and not needs_approval, "locked": plugin_is_locked(record),
                        "sessionState": ("approval-required" if needs_approval else "active") if is_active
                        else ("unavailable" if record.id in saved else "inactive"),
                        **approval})
        if record.id in auto_added:
            summary["autoAdded"] = True
        rejection = next((r for r in rejections if r["pluginId"] == record.id), None)
        if rejection:
            summary["rejection"] = rejection
        if record.id in paused and record.id in saved:
            # The fault breaker paused it here (sessions.faults); ``active`` still means "chosen".
            summary["paused"] = {"reason": paused[record.id]["reason"]}
        items.append(summary)
    return {"items": items, "commands": session_commands(session, registry, runnable=runnable), "unavailable": rejections}


#: The framework's own commands (spec 004 §会话插件管理, §/plugins 命令); pluginId "framework" is reserved.
FRAMEWORK_COMMANDS: tuple[dict[str, Any], ...] = (
    {"id": "framework:plugins", "pluginId": "framework", "source": "framework", "name": "plugins",
     "description": {"zh": "查看插件注册能力与最近的服务调用", "en": "Show plugin capabilities and recent service calls"},
     "arguments": [{"name": "pluginId", "type": "string"}], "action": "slash-plugins"},
    {"id": "framework:debug", "pluginId": "framework", "source": "framework", "name": "debug", "aliases": ["trace"],
     "description": {"zh": "打开当前会话的调试与执行跟踪视图", "en": "Open the session's debug and trace view"},
     "action": "slash-debug", "context": ["session", "active-runtimes", "models"]},
)


def session_commands(session: Session, registry, *, runnable: list[str] | None = None) -> list[dict[str, Any]]:
    """The session's one command catalogue: the framework commands, then every runnable plugin's
    ``contributes.commands`` as ``{...declaration, id: "<pluginId>:<name>", pluginId, source: "plugin"}``."""
    if runnable is None:
        runnable, _ = runnable_plugins(session, registry)
    commands = [json.loads(json.dumps(c)) for c in FRAMEWORK_COMMANDS]
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        for command in record.manifest.contributes.commands:
            name = command.get("name")
            if isinstance(name, str):
                commands.append({**command, "id": f"{plugin_id}:{name}", "pluginId": plugin_id, "source": "plugin"})
    return commands


# ---------------------------------------------------------------------------------------------
# Aggregates: view and state
# ---------------------------------------------------------------------------------------------


def event_cursor(session: Session) -> str:
    return f"{session.event_epoch}:{session.event_seq}"


def _fields_of(values: list[dict[str, Any]]) -> list[dict[str, str]]:
    seen: dict[str, str] = {}
    for value in values:
        if not isinstance(value, dict):
            continue
        for key, item in value.items():
            if key not in seen:
                seen[key] = json_type_name(item)
    return [{"name": k, "type": t} for k, t in seen.items()]


def session_state(session: Session) -> dict[str, Any]:
    """GET /api/sessions/:id/state: ``{tables}`` — session, characters (when any), and public plugin
    data grouped as ``plugin_data/<pluginId>:<namespace>`` keyed by record key."""
    from plugins_app.models import PluginData
    from plugins_app.selectors_plugin_data import is_visible_namespace

    session_data = session_out(session)
    session_data.pop("metadata", None)
    tables: dict[str, Any] = {"session": {"schema": {"name": "session", "fields": _fields_of([session_data])},
                                          "data": session_data}}
    characters = characters_list(session)
    if characters:
        tables["characters"] = {"schema": {"name": "characters", "fields": _fields_of(characters)},
                                "data": {c["id"]: c for c in characters}}
    groups: dict[str, dict[str, Any]] = {}
    for row in PluginData.objects.filter(session=session).order_by("plugin_id", "namespace", "key"):
        if not is_visible_namespace(row.namespace):
            continue
        groups.setdefault(f"plugin_data/{row.plugin_id}:{row.namespace}", {})[row.key] = row.value
    for name, data in groups.items():
        tables[name] = {"schema": {"name": name, "fields": _fields_of([{k: v for k, v in data.items()}])}, "data": data}
    return {"tables": tables}
