"""Everything an execution reads, loaded once before any runtime starts.

Runtimes run in worker threads and never touch the database: they read this snapshot (through
``EngineStateView`` for tools) plus the proposals staged so far. Loading up front also pins what
the turn sees to one moment (spec 000 §读到的是哪一份数据: committed rows, then successful
upstream proposals, then the runtime's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from covel.sqlrows import RowsQuery, datetime_column, model_from_row, rows_select_many
from plugins_app.toolkit.state import CharacterRecord, LorebookEntry, MemoryMessage, WorldDimension

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The World row's fields the world context reads (sessions.catalog.world_resolve).
_WORLD_FIELDS = ("id", "name", "metadata", "package", "state")
#: How many chat messages the snapshot keeps for memory-search recall (spec 000: 最近 500 条).
RECALL_MESSAGES = 500
#: How many prompt-history rows (turn_messages) the snapshot keeps.
HISTORY_ROWS = 400


@dataclass
class WorldContext:
    """The session's world in its content locale. lore is loreOverride when the session has one."""

    id: str = ""
    name: str = ""
    summary: str = ""
    lore: str = ""
    opening_scenario: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionSnapshot:
    """The session state one execution starts from (see module docstring)."""

    session_id: str
    locale: str
    phase: str
    status: str
    completed_player_turns: int
    setup_runtimes: dict[str, Any]
    active_plugins: list[str]
    metadata: dict[str, Any]
    seats: list[dict[str, Any]]
    world: WorldContext
    characters: list[CharacterRecord]
    character_schema: dict[str, Any] | None
    dimensions: list[WorldDimension]
    plugin_data: dict[tuple[str, str], dict[str, Any]]
    lorebook: list[LorebookEntry]
    messages: list[MemoryMessage]
    history: list[dict[str, Any]]  # turn_messages: {turn_id, runtime_id, role, content}
    pending_interactions: list[dict[str, Any]]
    #: ``{dimensionId: updateRule}`` (dimension_rules_of), read with the
    #: dimensions. Private to the dimension provider: only ``{{ world.dimensionRules }}`` shows it.
    dimension_rules: dict[str, str] = field(default_factory=dict)
    #: Whether the session has a memory index row (turns.engine.memory_index): only then does a
    #: commit send the background index update (an unlocked session is indexed by its first recall).
    memory_indexed: bool = True

    @property
    def runtime_model_overrides(self) -> dict[str, str]:
        value = self.metadata.get("runtimeModelOverrides")
        return value if isinstance(value, dict) else {}

    def player_character_ids(self) -> list[str]:
        """The ids of the ``type: player`` characters in creation order (created_at, then id: the
        characters are held in id order and the sort is stable), as a seat with ``characters:
        "auto"`` binds them (sessions.selectors.seat_bound_character_ids)."""
        players = [c for c in self.characters if c.type == "player"]
        players.sort(key=lambda c: datetime.fromisoformat(c.created_at.replace("Z", "+00:00")) if c.created_at else _EPOCH)
        return [c.id for c in players]


def dimension_rules_of(rows) -> dict[str, str]:
    """``{dimensionId: updateRule}`` of ``rows`` ((dimension id, stored definition) pairs) whose
    definition declares a non-empty ``updateRule`` string (WorldDimension never carries rules)."""
    out: dict[str, str] = {}
    for dimension_id, definition in rows:
        rule = (definition or {}).get("updateRule") if isinstance(definition, dict) else None
        if isinstance(rule, str) and rule.strip():
            out[dimension_id] = rule.strip()
    return out


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def world_context_load(world_id: str, locale: str, metadata: dict[str, Any], **row: Any) -> WorldContext:
    """The world's name/summary/lore in ``locale``; lore is ``metadata.loreOverride`` when set
    (an empty string is an explicit clear, spec 004 §世界背景). ``row=``: the World row when the
    caller read it (sessions.catalog.world_resolve)."""
    from sessions.catalog import world_resolve

    ctx = WorldContext(id=world_id or "")
    resolved = world_resolve(world_id, shared=True, **row) if world_id else None
    if resolved is not None:
        content = resolved.content(locale)
        meta = resolved.metadata
        ctx.name = content.get("name") or resolved.name
        localized = (meta.get("localizedText") or {}).get("description") or {}
        ctx.summary = (content.get("summary") or localized.get(locale) or meta.get("description")
                       or meta.get("summary") or "")
        ctx.lore = content.get("lore") or ""
        ctx.opening_scenario = str(meta.get("openingScenario") or "")
        ctx.metadata = meta
    if isinstance(metadata.get("loreOverride"), str):
        ctx.lore = metadata["loreOverride"]
    if not ctx.summary and ctx.lore:
        ctx.summary = ctx.lore.strip().split("\n\n", 1)[0][:400]
    return ctx


def session_snapshot_load(session: Any) -> SessionSnapshot:
    """Load a SessionSnapshot for ``session`` (a sessions.models.Session row): its characters,
    character schema, dimensions (and their rules), plugin data, lorebook, the latest
    RECALL_MESSAGES chat messages and HISTORY_ROWS turn messages, pending interactions and the
    world row: one plain-SQL statement of ten aggregated reads (covel.sqlrows.rows_select_many:
    this runs every turn)."""
    return _snapshot_read(session.pk, session)[1]


def session_and_snapshot_load(session_id: str) -> tuple[Any, SessionSnapshot]:
    """The Session row of ``session_id`` (a sessions.models.Session, as the ORM loads it) and its
    SessionSnapshot (``session_snapshot_load``), both read by the snapshot's one statement (issue
    18: the turn worker's admission read the row first, a statement per turn). Raises
    Session.DoesNotExist when there is no such session."""
    return _snapshot_read(session_id, None)


def _snapshot_read(session_id: str, session: Any) -> tuple[Any, SessionSnapshot]:
    from plugins_app.models import PluginData
    from sessions.models import (Character, CharacterSchema, ChatMessage, DimensionValue, LorebookEntry as LoreRow, Session,
                                 TurnMessage, World)
    from turns.models import InteractionRecord, MemoryIndex

    sid = [session_id]
    queries = [
        RowsQuery(Character, ("character_id", "name", "type", "aliases", "description", "fields", "version", "created_at",
                              "updated_at"), "session_id = %s", sid, "id"),
        RowsQuery(CharacterSchema, ("schema",), "session_id = %s", sid, "id", 1),
        RowsQuery(DimensionValue, ("dimension_id", "value", "version", "definition"), "session_id = %s", sid, "id"),
        RowsQuery(PluginData, ("plugin_id", "namespace", "key", "value"), "session_id = %s", sid, "id"),
        RowsQuery(LoreRow, ("entry_id", "keys", "content", "enabled"), "session_id = %s", sid, "id"),
        RowsQuery(ChatMessage, ("role", "content", "message_id"), "session_id = %s", sid, "id DESC", RECALL_MESSAGES),
        RowsQuery(TurnMessage, ("turn_id", "runtime_id", "role", "content"), "session_id = %s", sid, "id DESC", HISTORY_ROWS),
        RowsQuery(InteractionRecord, ("turn_id", "interaction_id", "type", "plugin_id", "runtime_id", "spec"),
                  "session_id = %s AND status = %s", [session_id, "pending"], "id"),
    ]
    session_fields = tuple(f.name for f in Session._meta.concrete_fields)
    if session is None:
        queries.append(RowsQuery(World, _WORLD_FIELDS, f'id = (SELECT world_id FROM "{Session._meta.db_table}" WHERE id = %s)',
                                 sid, "id"))
        queries.append(RowsQuery(Session, session_fields, "id = %s", sid, "id"))
    else:
        queries.append(RowsQuery(World, _WORLD_FIELDS, "id = %s", [session.world_id or ""], "id"))
    memory_indexed_sql = (f'(SELECT COUNT(*) FROM "{MemoryIndex._meta.db_table}" WHERE session_id = %s)', sid)
    values = rows_select_many(queries, (memory_indexed_sql,))
    (character_rows, schema_rows, dimension_rows, plugin_rows, lore_rows, recent, history_rows,
     pending_rows, world_rows) = values[:9]
    if session is None:
        if not values[9]:
            raise Session.DoesNotExist(f"Session {session_id} does not exist")
        session = model_from_row(Session, session_fields, values[9][0])
    memory_indexed = bool(values[-1])
    characters = [
        CharacterRecord(id=character_id, name=name, type=kind, aliases=tuple(aliases or ()), description=description,
                        fields=dict(fields or {}), version=version, created_at=_iso(datetime_column(created)),
                        updated_at=_iso(datetime_column(updated)))
        for character_id, name, kind, aliases, description, fields, version, created, updated in character_rows
    ]
    schema = schema_rows[0][0] if schema_rows else None
    dimensions = [
        WorldDimension(id=dimension_id, value=value, version=version,
                       name=(definition or {}).get("name") if isinstance((definition or {}).get("name"), str) else None,
                       schema=(definition or {}).get("schema"))
        for dimension_id, value, version, definition in dimension_rows
    ]
    plugin_data: dict[tuple[str, str], dict[str, Any]] = {}
    for plugin_id, namespace, key, value in plugin_rows:
        plugin_data.setdefault((plugin_id, namespace), {})[key] = value
    lorebook = [
        LorebookEntry(id=entry_id, keys=tuple(keys or ()), content=content, enabled=bool(enabled))
        for entry_id, keys, content, enabled in lore_rows
    ]
    recent.reverse()
    messages = [MemoryMessage(role=role, text=content, message_id=message_id) for role, content, message_id in recent if content]
    history_rows.reverse()
    history = [{"turn_id": turn_id, "runtime_id": runtime_id, "role": role, "content": content}
               for turn_id, runtime_id, role, content in history_rows]
    pending = [
        {"turn_id": turn_id, "interaction_id": interaction_id, "type": kind, "plugin_id": plugin_id,
         "runtime_id": runtime_id, "spec": spec}
        for turn_id, interaction_id, kind, plugin_id, runtime_id, spec in pending_rows
    ]
    metadata = dict(session.metadata or {})
    return session, SessionSnapshot(
        session_id=session.id,
        locale=session.locale,
        phase=session.phase,
        status=session.status,
        completed_player_turns=session.completed_player_turns,
        setup_runtimes=dict(session.setup_runtimes or {}),
        active_plugins=list(session.active_plugins or []),
        metadata=metadata,
        seats=list(session.seats or []),
        world=world_context_load(session.world_id, session.locale, metadata,
                                 row=World(**dict(zip(_WORLD_FIELDS, world_rows[0]))) if world_rows else None),
        characters=characters,
        character_schema=dict(schema) if schema else None,
        dimensions=dimensions,
        dimension_rules=dimension_rules_of((row[0], row[3]) for row in dimension_rows),
        plugin_data=plugin_data,
        lorebook=lorebook,
        messages=messages,
        history=history,
        pending_interactions=pending,
        memory_indexed=memory_indexed,
    )
