"""Snapshots and forks (spec 004 §Snapshot / Fork): capture a session's durable state as JSON, restore
it, delete it, and fork a new session from it.

Payload (``schemaVersion`` 3), stored complete in ``Snapshot.data``::

    {schemaVersion, turnId, session: {status, phase, completedPlayerTurns, setupRuntimes, locale,
     activePlugins, runtimeModelOverrides, loreOverride?, seats, title, autoAdvanceLimit,
     pluginSelection?, dimensionProviderPluginId?, orchestration?},
     characters, characterSchema, lorebookEntries, dimensions, pluginData, suspensions,
     runtimeExports, sessionSummaries, compactedMessageSummaryIds,
     messagesCursor, displayMessagesBoundary}

Messages are not copied into the payload: ``messagesCursor`` (last turn_message id) and
``displayMessagesBoundary`` (``{lastMessageId, createdAt, count}`` of the chat history) mark the prefix
of the session's history the snapshot covers. Restore truncates the history back to that prefix;
fork copies it. Private fields (owner hash, incarnation, deletion lease, event epoch) are never
captured. Reads go through ``snapshot_out`` (the player-visible view): kernel plugin-data namespaces,
suspension continuations and dimension rules are filtered out; forks and restores read the store.

Every write here takes the session's execution lock (``sessions.locks.session_lock``; 503 session_busy
when not acquired in time) and runs in one transaction, so a snapshot never sees half a turn and an
error leaves nothing half-written.
"""
from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from covel import jsontext
from covel.errors import ApiError, SessionNotFound
from plugins_app.models import PluginData
from sessions import auth
from sessions.errors import InvalidRequest, SessionDeleting, SessionEnded, WorldDeleting, WorldNotFound
from sessions.models import (
    Character,
    CharacterSchema,
    ChatMessage,
    DimensionValue,
    LorebookEntry,
    Session,
    Snapshot,
    TurnMessage,
)
from covel.sqlrows import RowsQuery, datetime_column, json_column, rows_select_many
from covel.times import iso
from sessions.selectors import cursor_decode, cursor_encode
from turns.events import NewEvent, session_events_append
from sessions.locks import session_lock
from turns.models import Suspension, TurnResult

logger = logging.getLogger("covel.snapshots")

SCHEMA_VERSION = 3
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 500
LABEL_MAX = 256
# Job and log bookkeeping never enters a child session or its fork snapshot, and restore leaves the
# session's own rows of these namespaces alone (spec §POST /fork 第 3 步).
CONTROL_NAMESPACES = ("_runtime_jobs", "_runtime_job_control", "_logs", "_jobs")
# The session metadata a snapshot carries; the rest of metadata is the session's own.
CAPTURED_METADATA = ("pluginSelection", "dimensionProviderPluginId", "orchestration")
FORK_RATE_PER_MINUTE = 10
FORK_ID_ATTEMPTS = 3

EVENT_SNAPSHOT_CREATED = "state.snapshot.created"
EVENT_SNAPSHOT_RESTORED = "state.snapshot.restored"
EVENT_SESSION_FORKED = "session.forked"
TOPIC_STATE = "state"
TOPIC_SESSION = "session"


# Client-visible errors of this module (sessions/errors.py belongs to the sessions engineer).


class SnapshotNotFound(ApiError):
    """404 not_found: no such snapshot, or it belongs to another session."""

    status = 404
    code = "not_found"

    def __init__(self, snapshot_id: str) -> None:
        super().__init__(message=f"Snapshot not found: {snapshot_id}")


class CursorMissing(ApiError):
    """409 cursor_missing: the snapshot's messagesCursor or chat boundary is gone from the session."""

    status = 409
    code = "cursor_missing"

    def __init__(self, which: str) -> None:
        super().__init__(message=f"The snapshot's {which} no longer exists in the session")


class ForkFailed(ApiError):
    """500 fork_failed: no valid id could be generated for the child session."""

    status = 500
    code = "fork_failed"

    def __init__(self) -> None:
        super().__init__(message="Could not allocate an id for the forked session")


class ForkRateLimited(ApiError):
    """429 rate_limit_exceeded: more than 10 forks a minute of one parent from one client address."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, retry_after_seconds: int) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message="Too many fork requests", details={"retryAfterSeconds": retry_after_seconds})


class DimensionProviderUnavailable(ApiError):
    """409 dimension_provider_required: the snapshot's dimension data belongs to a provider the child cannot enable."""

    status = 409
    code = "dimension_provider_required"

    def __init__(self, plugin_id: str) -> None:
        super().__init__(message=f"The snapshot's dimension provider cannot be enabled: {plugin_id}",
                         details={"pluginId": plugin_id})


# ---------------------------------------------------------------------------------------------
# Capture
# ---------------------------------------------------------------------------------------------


def _session_capture(session: Session) -> dict[str, Any]:
    meta = session.metadata or {}
    out: dict[str, Any] = {
        "status": session.status, "phase": session.phase, "completedPlayerTurns": session.completed_player_turns,
        "setupRuntimes": session.setup_runtimes or {}, "locale": session.locale,
        "activePlugins": list(session.active_plugins or []),
        "runtimeModelOverrides": meta.get("runtimeModelOverrides") or {},
        "seats": session.seats or [], "title": session.title, "autoAdvanceLimit": meta.get("autoAdvanceLimit"),
    }
    if "loreOverride" in meta:
        out["loreOverride"] = meta["loreOverride"]
    for key in CAPTURED_METADATA:
        if key in meta:
            out[key] = meta[key]
    return out


# The capture's reads run after every committed turn (the auto snapshot): ONE plain-SQL statement
# over the models' tables (covel.sqlrows.rows_select_many), converted as the fields would be, so the
# payload is the same. One statement is also one consistent view of every table on PostgreSQL.
_CHARACTER_FIELDS = ("character_id", "name", "type", "aliases", "fields", "description", "version", "created_at")
_LORE_FIELDS = ("entry_id", "owner", "plugin_id", "title", "keys", "content", "enabled", "priority", "strategy", "position",
                "insertion_order", "metadata")
_SUSPENSION_FIELDS = ("suspension_id", "turn_id", "plugin_id", "runtime_id", "resume_schema", "payload", "created_at")


def _characters_of(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [
        {"id": character_id, "name": name, "type": kind, "aliases": list(aliases or []), "fields": fields or {},
         "description": description, "version": version, "createdAt": datetime_column(created).isoformat()}
        for character_id, name, kind, aliases, fields, description, version, created in rows
    ]


def _lorebook_of(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [
        {"id": entry_id, "owner": owner, "pluginId": plugin_id, "title": title, "keys": list(keys or []),
         "content": content, "enabled": bool(enabled), "priority": priority, "strategy": strategy, "position": position,
         "insertionOrder": insertion_order, "metadata": metadata or {}}
        for entry_id, owner, plugin_id, title, keys, content, enabled, priority, strategy, position, insertion_order, metadata
        in rows
    ]


def _dimensions_of(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [{"id": dimension_id, "definition": definition, "value": value, "version": version}
            for dimension_id, definition, value, version in rows]


def _plugin_data_of(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [
        {"pluginId": plugin_id, "namespace": namespace, "key": key, "value": value, "version": version,
         "createdAt": datetime_column(created_at).isoformat()}
        for plugin_id, namespace, key, value, version, created_at in rows
    ]


def _suspensions_of(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [
        {"suspensionId": suspension_id, "turnId": turn_id, "pluginId": plugin_id, "runtimeId": runtime_id,
         "resumeSchema": resume_schema, "payload": payload, "createdAt": datetime_column(created_at).isoformat()}
        for suspension_id, turn_id, plugin_id, runtime_id, resume_schema, payload, created_at in rows
    ]


def _marks_sql(sid: str) -> tuple[tuple[str, list[Any]], ...]:
    """The payload's single values as scalar subqueries: the character schema, the last turn
    message id, the last committed turn id, and the chat boundary (last message and count)."""
    schema_t, turn_message_t = CharacterSchema._meta.db_table, TurnMessage._meta.db_table
    result_t, chat_t = TurnResult._meta.db_table, ChatMessage._meta.db_table
    return (
        (f'(SELECT schema FROM "{schema_t}" WHERE session_id = %s ORDER BY id LIMIT 1)', [sid]),
        (f'(SELECT id FROM "{turn_message_t}" WHERE session_id = %s ORDER BY id DESC LIMIT 1)', [sid]),
        (f'(SELECT turn_id FROM "{result_t}" WHERE session_id = %s AND committed = %s ORDER BY id DESC LIMIT 1)', [sid, True]),
        (f'(SELECT message_id FROM "{chat_t}" WHERE session_id = %s ORDER BY id DESC LIMIT 1)', [sid]),
        (f'(SELECT created_at FROM "{chat_t}" WHERE session_id = %s ORDER BY id DESC LIMIT 1)', [sid]),
        (f'(SELECT COUNT(*) FROM "{chat_t}" WHERE session_id = %s)', [sid]),
    )


def _boundary_capture(last_chat_id: str | None, last_chat_at: Any, chat_count: int | None) -> dict[str, Any] | None:
    if last_chat_id is None:
        return None
    return {"lastMessageId": last_chat_id, "createdAt": datetime_column(last_chat_at).isoformat(), "count": chat_count or 0}


#: The Session fields a capture reads (_session_capture) when it reads the row itself.
_SESSION_FIELDS = ("id", "title", "status", "phase", "completed_player_turns", "setup_runtimes", "seats", "active_plugins",
                   "locale", "metadata", "deletion_state")


def _payload_capture(session: Session) -> dict[str, Any]:
    """The complete stored payload of ``session`` as it is now (caller holds the lock): one
    statement (issue 18: it was eleven reads per turn)."""
    return _capture(session.pk, session)[1]


def _capture(session_id: str, session: Session | None = None) -> tuple[Session | None, dict[str, Any] | None]:
    """(session, payload) of ``session_id`` read by one statement; with ``session`` None the
    session row's captured fields are read by it too ((None, None) when there is no such row)."""
    sid = [session_id]
    queries = [
        RowsQuery(Character, _CHARACTER_FIELDS, "session_id = %s", sid, "created_at, id"),
        RowsQuery(LorebookEntry, _LORE_FIELDS, "session_id = %s", sid, "insertion_order, id"),
        RowsQuery(DimensionValue, ("dimension_id", "definition", "value", "version"), "session_id = %s", sid, "dimension_id"),
        RowsQuery(PluginData, ("plugin_id", "namespace", "key", "value", "version", "created_at"), "session_id = %s", sid,
                  "plugin_id, namespace, key"),
        RowsQuery(Suspension, _SUSPENSION_FIELDS, "session_id = %s AND status = %s", [session_id, "pending"], "created_at, id"),
    ]
    if session is None:
        queries.append(RowsQuery(Session, _SESSION_FIELDS, "id = %s", sid, "id"))
    values = rows_select_many(queries, _marks_sql(session_id))
    character_rows, lore_rows, dimension_rows, plugin_rows, suspension_rows = values[:5]
    schema, last_turn_message, last_turn, last_chat_id, last_chat_at, chat_count = values[-6:]
    if session is None:
        session_rows = values[5]
        if not session_rows:
            return None, None
        session = Session(**dict(zip(_SESSION_FIELDS, session_rows[0])))
    return session, {
        "schemaVersion": SCHEMA_VERSION,
        "turnId": last_turn,
        "session": _session_capture(session),
        "characters": _characters_of(character_rows),
        "characterSchema": json_column(schema),
        "lorebookEntries": _lorebook_of(lore_rows),
        "dimensions": _dimensions_of(dimension_rows),
        "pluginData": _plugin_data_of(plugin_rows),
        "suspensions": _suspensions_of(suspension_rows),
        # No runtime-export or compaction-summary store exists yet: the required keys are present and empty.
        "runtimeExports": [],
        "sessionSummaries": [],
        "compactedMessageSummaryIds": {},
        "messagesCursor": str(last_turn_message) if last_turn_message is not None else None,
        "displayMessagesBoundary": _boundary_capture(last_chat_id, last_chat_at, chat_count),
    }


def _payload_size(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _snapshot_write(session: Session, payload: dict[str, Any], *, kind: str, label: str = "",
                    parent_snapshot_id: str = "") -> Snapshot:
    snapshot = Snapshot.objects.create(
        session=session, snapshot_id=str(uuid.uuid4()), label=label, kind=kind, turn_id=payload.get("turnId") or "",
        parent_snapshot_id=parent_snapshot_id, completed_player_turns=payload["session"]["completedPlayerTurns"],
        data=payload, payload_size_bytes=_payload_size(payload),
    )
    session_events_append(session.id, [NewEvent(type=EVENT_SNAPSHOT_CREATED, topic=TOPIC_STATE, payload={
        "snapshotId": snapshot.snapshot_id, "kind": kind, "turnId": snapshot.turn_id or None})])
    return snapshot


def _session_for_write(session_id: str) -> Session:
    session = Session.objects.select_for_update().filter(pk=session_id).first()
    if session is None:
        raise SessionNotFound(session_id)
    if session.deletion_state == Session.DELETION_DELETING:
        raise SessionDeleting()
    return session


def snapshot_create(session_id: str, *, label: str = "", kind: str = Snapshot.KIND_MANUAL) -> Snapshot:
    """Save the session's current state as a snapshot (spec 004 POST /api/sessions/:id/snapshots).

    label: ≤ 256 characters (400 invalid_label otherwise). Holds the session lock for the read and
    the write; appends ``state.snapshot.created`` (topic state). Raises SessionNotFound (404),
    SessionDeleting (409 session_deleting), SessionBusy (503 session_busy).
    """
    if not isinstance(label, str) or len(label) > LABEL_MAX:
        raise InvalidRequest(code="invalid_label", message="label must be a string of at most 256 characters")
    with session_lock(session_id):
        with transaction.atomic():
            session = _session_for_write(session_id)
            return _snapshot_write(session, _payload_capture(session), kind=kind, label=label)


def snapshot_auto_refresh(session_id: str) -> Snapshot | None:
    """Refresh the session's automatic snapshot after an execution committed its turn(s) (spec 004
    §Snapshot / Fork: kind ``auto``; 自动快照被刷新时 ID 不变，payload 和 createdAt 更新; 自动快照的时间是
    全部 proposal 提交完成后实际拍摄的时间), in a transaction of its own.

    The turn worker refreshes it inside each turn's commit instead (``snapshot_auto_in_commit``);
    this is the fallback when that did not happen. Policy and retention as there; appends
    ``state.snapshot.created`` (topic state) in the same transaction. Precondition: the caller holds
    the session lock (the turn worker does). Returns the snapshot, or None when the session is gone
    or being deleted.
    """
    with transaction.atomic():
        # The session row is read by the capture's one statement (its one consistent view; the
        # caller's session lock keeps turns and deletions out meanwhile).
        session, payload = _capture(session_id)
        if session is None or session.deletion_state == Session.DELETION_DELETING:
            return None
        snapshot, event = _auto_write(session, payload)
        session_events_append(session.id, [event])
        return snapshot


def snapshot_auto_in_commit(session: Session) -> list[NewEvent]:
    """Refresh the automatic snapshot inside a turn's commit transaction (turns.engine.commit
    ``CommitPlan.best_effort``): ``session`` is the commit's locked row with the fields this commit
    writes (its clock, phase, metadata), the other tables already hold the turn's writes.

    Policy: every execution of POST /api/actions that committed a turn (player, opening
    continuation, retry) refreshes it with each commit, so after its last commit it holds the
    state the execution left. Retention: one ``auto`` snapshot per session — the first is created,
    later ones overwrite its payload, ``turnId``, ``completedPlayerTurns`` and ``createdAt`` under
    the same id (manual and fork snapshots are never touched; should an older copy exist, only the
    newest is refreshed). Returns ``[state.snapshot.created]`` (topic state) for the commit to
    append after its own events; [] when the session is being deleted. Issue 18: a transaction and
    three statements per turn less than a refresh of its own (the session row, the event head).
    """
    if session.deletion_state == Session.DELETION_DELETING:
        return []
    _, payload = _capture(session.pk, session)
    return [_auto_write(session, payload)[1]]


def _auto_write(session: Session, payload: dict[str, Any]) -> tuple[Snapshot, NewEvent]:
    """Write ``payload`` as the session's automatic snapshot (in the caller's transaction);
    returns the row and its ``state.snapshot.created`` event, not yet appended."""
    from django.db import connection
    from django.utils import timezone

    # The payload is serialised once: the stored text is the compact form payloadSizeBytes counts.
    text = jsontext.dumps(payload)
    size, turn_id = len(text.encode("utf-8")), payload.get("turnId") or ""
    completed, created = payload["session"]["completedPlayerTurns"], timezone.now()
    # One UPDATE of the newest auto snapshot, RETURNING what the caller gets (issue 18: it was
    # a locking SELECT and an UPDATE per turn). The session lock (held by the caller) and this
    # transaction keep it the only one: only this module creates auto snapshots.
    table = Snapshot._meta.db_table
    data = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET data = {data}, payload_size_bytes = %s, turn_id = %s, completed_player_turns = %s, '
            f'created_at = %s WHERE id = (SELECT id FROM "{table}" WHERE session_id = %s AND kind = %s '
            f'ORDER BY created_at DESC, id DESC LIMIT 1) RETURNING id, snapshot_id, label, parent_snapshot_id',
            [text, size, turn_id, completed, connection.ops.adapt_datetimefield_value(created), session.pk,
             Snapshot.KIND_AUTO])
        kept = cursor.fetchone()
    if kept is None:
        snapshot = Snapshot.objects.create(
            session=session, snapshot_id=str(uuid.uuid4()), kind=Snapshot.KIND_AUTO, turn_id=turn_id,
            completed_player_turns=completed, data=payload, payload_size_bytes=size)
    else:
        # The row as just written, without reading the (history-sized) payload back and decoding it
        # per turn: ``data`` stays deferred and loads from the row if a caller reads it.
        pk, snapshot_id, label, parent = kept
        snapshot = Snapshot(id=pk, session_id=session.pk, snapshot_id=snapshot_id, label=label, kind=Snapshot.KIND_AUTO,
                            turn_id=turn_id, parent_snapshot_id=parent, completed_player_turns=completed,
                            payload_size_bytes=size, created_at=created)
        del snapshot.__dict__["data"]  # deferred, as a .defer("data") row
        snapshot._state.adding, snapshot._state.db = False, connection.alias
    return snapshot, NewEvent(type=EVENT_SNAPSHOT_CREATED, topic=TOPIC_STATE, payload={
        "snapshotId": snapshot.snapshot_id, "kind": Snapshot.KIND_AUTO, "turnId": turn_id or None})


# ---------------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------------


def snapshot_get(session_id: str, snapshot_id: str) -> Snapshot:
    """The snapshot ``snapshot_id`` of the session; SnapshotNotFound (404 not_found) otherwise."""
    snapshot = Snapshot.objects.filter(session_id=session_id, snapshot_id=snapshot_id).first()
    if snapshot is None:
        raise SnapshotNotFound(snapshot_id)
    return snapshot


def snapshot_list(session_id: str, *, limit: int = LIST_LIMIT_DEFAULT, cursor: str | None = None) -> dict[str, Any]:
    """One page of snapshot metadata (no payload): ``{items: [...], nextCursor}``.

    No cursor: the newest ``limit``; with the cursor from the previous page: the page just before it.
    Within a page oldest first. nextCursor is None when no older snapshot exists. 400 invalid_cursor.
    """
    qs = Snapshot.objects.filter(session_id=session_id)
    if cursor:
        created_at, pk = cursor_decode(cursor)
        qs = qs.filter(created_at__lte=created_at).filter(Q(created_at__lt=created_at) | Q(id__lt=pk))
    rows = list(qs.order_by("-created_at", "-id").defer("data")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    next_cursor = cursor_encode(rows[0].created_at, rows[0].id) if has_more and rows else None
    return {"items": [snapshot_meta_out(r) for r in rows], "nextCursor": next_cursor}


def snapshot_meta_out(snapshot: Snapshot) -> dict[str, Any]:
    """List item: ``{id, sessionId, turnId, kind, parentId, label?, createdAt, payloadSize}``."""
    out: dict[str, Any] = {
        "id": snapshot.snapshot_id, "sessionId": snapshot.session_id, "turnId": snapshot.turn_id or None,
        "kind": snapshot.kind, "parentId": snapshot.parent_snapshot_id or None, "createdAt": iso(snapshot.created_at),
        "payloadSize": snapshot.payload_size_bytes,
    }
    if snapshot.label:
        out["label"] = snapshot.label
    return out


def payload_public(payload: dict[str, Any]) -> dict[str, Any]:
    """The player-visible payload: no kernel plugin-data namespaces (``_`` prefix), no suspension
    continuations, dimensions without rules or initial values."""
    out = dict(payload)
    out["pluginData"] = [
        {"pluginId": r["pluginId"], "namespace": r["namespace"], "key": r["key"], "value": r["value"]}
        for r in payload.get("pluginData") or [] if not r["namespace"].startswith("_")
    ]
    out["suspensions"] = [
        {"suspensionId": s["suspensionId"], "turnId": s["turnId"], "pluginId": s["pluginId"],
         "runtimeId": s["runtimeId"], "resumeSchema": s.get("resumeSchema") or {}, "createdAt": s.get("createdAt")}
        for s in payload.get("suspensions") or []
    ]
    dimensions = []
    for d in payload.get("dimensions") or []:
        definition = d.get("definition") or {}
        item = {"id": d["id"], "name": definition.get("name", d["id"]), "schema": definition.get("schema", {}),
                "value": d.get("value"), "version": d.get("version")}
        if definition.get("description"):
            item["description"] = definition["description"]
        dimensions.append(item)
    out["dimensions"] = dimensions
    return out


def snapshot_out(snapshot: Snapshot) -> dict[str, Any]:
    """SnapshotRecord, player-visible: ``{id, sessionId, turnId, kind, parentId, label?, payload, createdAt}``."""
    out = snapshot_meta_out(snapshot)
    out.pop("payloadSize")
    out["payload"] = payload_public(snapshot.data or {})
    return out


# ---------------------------------------------------------------------------------------------
# Applying a payload to a session (restore and fork)
# ---------------------------------------------------------------------------------------------


def _session_fields_apply(session: Session, state: dict[str, Any]) -> None:
    # ended is terminal: continuing from a snapshot taken at the end resumes as paused (spec 第 2 步).
    status = state.get("status") or Session.STATUS_ACTIVE
    session.status = Session.STATUS_PAUSED if status == Session.STATUS_ENDED else status
    session.phase = state.get("phase") or Session.PHASE_PLAYING
    session.completed_player_turns = int(state.get("completedPlayerTurns") or 0)
    session.setup_runtimes = state.get("setupRuntimes") or {}
    session.locale = state.get("locale") or session.locale
    session.active_plugins = list(state.get("activePlugins") or [])
    session.seats = state.get("seats") or session.seats
    if state.get("title"):
        session.title = state["title"]
    meta = dict(session.metadata or {})
    meta["runtimeModelOverrides"] = state.get("runtimeModelOverrides") or {}
    if isinstance(state.get("autoAdvanceLimit"), int):
        meta["autoAdvanceLimit"] = state["autoAdvanceLimit"]
    for key in ("loreOverride", *CAPTURED_METADATA):
        if key in state:
            meta[key] = state[key]
        else:
            meta.pop(key, None)
    session.metadata = meta


def _state_rows_replace(session: Session, payload: dict[str, Any], *, keep_control_rows: bool) -> None:
    """Replace characters, schema, lorebook, dimensions and plugin data of ``session`` by the payload's."""
    from datetime import datetime

    Character.objects.filter(session=session).delete()
    Character.objects.bulk_create([
        Character(session=session, character_id=c["id"], name=c["name"], type=c.get("type") or "npc",
                  aliases=c.get("aliases") or [], fields=c.get("fields") or {}, description=c.get("description") or "",
                  version=c.get("version") or 1, created_at=datetime.fromisoformat(c["createdAt"]))
        for c in payload.get("characters") or []
    ])
    CharacterSchema.objects.filter(session=session).delete()
    if payload.get("characterSchema") is not None:
        CharacterSchema.objects.create(session=session, schema=payload["characterSchema"])
    LorebookEntry.objects.filter(session=session).delete()
    LorebookEntry.objects.bulk_create([
        LorebookEntry(session=session, entry_id=e["id"], owner=e["owner"], plugin_id=e.get("pluginId") or "",
                      title=e.get("title") or "", keys=e.get("keys") or [], content=e.get("content") or "",
                      enabled=e.get("enabled", True), priority=e.get("priority") or 0,
                      strategy=e.get("strategy") or LorebookEntry.STRATEGY_SELECTIVE, position=e.get("position") or "",
                      insertion_order=e.get("insertionOrder") or 0, metadata=e.get("metadata") or {})
        for e in payload.get("lorebookEntries") or []
    ])
    DimensionValue.objects.filter(session=session).delete()
    DimensionValue.objects.bulk_create([
        DimensionValue(session=session, dimension_id=d["id"], definition=d.get("definition") or {},
                       value=d.get("value"), version=d.get("version") or 1)
        for d in payload.get("dimensions") or []
    ])
    existing = PluginData.objects.filter(session=session)
    if keep_control_rows:
        existing = existing.exclude(namespace__in=CONTROL_NAMESPACES)
    existing.delete()
    PluginData.objects.bulk_create([
        PluginData(session=session, plugin_id=r["pluginId"], namespace=r["namespace"], key=r["key"], value=r["value"],
                   version=r.get("version") or 1, created_at=datetime.fromisoformat(r["createdAt"]))
        for r in payload.get("pluginData") or [] if r["namespace"] not in CONTROL_NAMESPACES
    ])


def _turn_cursor_row(session_id: str, payload: dict[str, Any]) -> int | None:
    """The pk the payload's messagesCursor names; CursorMissing (409) when that row is gone."""
    cursor = payload.get("messagesCursor")
    if cursor is None:
        return None
    pk = int(cursor)
    if not TurnMessage.objects.filter(session_id=session_id, pk=pk).exists():
        raise CursorMissing("messagesCursor")
    return pk


def _boundary_row(session_id: str, payload: dict[str, Any]) -> int | None:
    """The pk of the chat boundary's last message; CursorMissing (409) when it is gone."""
    boundary = payload.get("displayMessagesBoundary")
    if boundary is None:
        return None
    pk = ChatMessage.objects.filter(session_id=session_id, message_id=boundary["lastMessageId"]).values_list("id", flat=True).first()
    if pk is None:
        raise CursorMissing("displayMessagesBoundary")
    return pk


# ---------------------------------------------------------------------------------------------
# Restore / delete
# ---------------------------------------------------------------------------------------------


def snapshot_restore(session_id: str, snapshot_id: str) -> Snapshot:
    """Put the session back to the snapshot's state, in one transaction under the session lock.

    Replaces session settings (ended in the payload becomes paused), characters, character schema,
    lorebook, dimensions, plugin data (job/log control namespaces stay as they are) and pending
    suspensions; cuts prompt history and chat history back to the snapshot's cursor and boundary.
    Appends ``state.snapshot.restored`` (topic state, payload {snapshotId, completedPlayerTurns}).
    Raises SnapshotNotFound (404 not_found), SessionEnded (409 session_ended: fork an ended session
    instead), SessionDeleting (409), CursorMissing (409 cursor_missing), SessionBusy (503).
    """
    with session_lock(session_id):
        with transaction.atomic():
            session = _session_for_write(session_id)
            snapshot = snapshot_get(session_id, snapshot_id)
            if session.status == Session.STATUS_ENDED:
                raise SessionEnded()
            payload = snapshot.data or {}
            turn_pk = _turn_cursor_row(session_id, payload)
            chat_pk = _boundary_row(session_id, payload)
            turn_messages = TurnMessage.objects.filter(session=session)
            (turn_messages.filter(pk__gt=turn_pk) if turn_pk is not None else turn_messages).delete()
            chat = ChatMessage.objects.filter(session=session)
            (chat.filter(pk__gt=chat_pk) if chat_pk is not None else chat).delete()
            _state_rows_replace(session, payload, keep_control_rows=True)
            _suspensions_restore(session, payload.get("suspensions") or [])
            _session_fields_apply(session, payload.get("session") or {})
            session.save()
            session_events_append(session_id, [NewEvent(type=EVENT_SNAPSHOT_RESTORED, topic=TOPIC_STATE, payload={
                "snapshotId": snapshot.snapshot_id, "completedPlayerTurns": session.completed_player_turns})])
            return snapshot


def _suspensions_restore(session: Session, records: list[dict[str, Any]]) -> None:
    wanted = {r["suspensionId"] for r in records}
    Suspension.objects.filter(session=session, status="pending").exclude(suspension_id__in=wanted).delete()
    for record in records:
        Suspension.objects.update_or_create(
            session=session, suspension_id=record["suspensionId"],
            defaults={"turn_id": record["turnId"], "plugin_id": record["pluginId"], "runtime_id": record["runtimeId"],
                      "status": "pending", "resume_schema": record.get("resumeSchema") or {},
                      "payload": record.get("payload") or {}, "resolved_at": None},
        )


def snapshot_delete(session_id: str, snapshot_id: str) -> None:
    """Delete one snapshot of the session; SnapshotNotFound (404 not_found) when absent."""
    with transaction.atomic():
        deleted, _ = Snapshot.objects.filter(session_id=session_id, snapshot_id=snapshot_id).delete()
    if not deleted:
        raise SnapshotNotFound(snapshot_id)


# ---------------------------------------------------------------------------------------------
# Fork
# ---------------------------------------------------------------------------------------------


class _ForkRateLimiter:
    """10 fork requests a minute per (parent session, client address), sliding window, this process."""

    def __init__(self) -> None:
        self._hits: dict[tuple[str, str], deque] = {}
        self._lock = threading.Lock()

    def hit(self, session_id: str, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            window = self._hits.setdefault((session_id, address), deque())
            while window and now - window[0] >= 60:
                window.popleft()
            if len(window) >= FORK_RATE_PER_MINUTE:
                raise ForkRateLimited(max(1, int(60 - (now - window[0])) + 1))
            window.append(now)

    def reset(self) -> None:
        with self._lock:
            self._hits.clear()


fork_rate_limiter = _ForkRateLimiter()


@dataclass
class ForkResult:
    """session_fork's result: the child row, its one-time owner token, and the response fields."""

    session: Session
    owner_token: str
    parent_session_id: str
    from_snapshot_id: str | None
    fork_snapshot_id: str
    missing_media_count: int


def _world_check(world_id: str) -> None:
    if not world_id:
        return
    from sessions.catalog import world_resolve

    world = world_resolve(world_id)
    if world is None:
        raise WorldNotFound(world_id)
    if world.is_deleting:
        raise WorldDeleting(world_id)


def _dimension_binding_check(state: dict[str, Any], payload: dict[str, Any]) -> None:
    """A provider the child cannot enable: 409 when the payload has its dimension data, else drop the binding."""
    from plugins_app.registry import plugin_registry

    provider = state.get("dimensionProviderPluginId")
    if not provider:
        return
    record = plugin_registry().get(provider)
    if record is not None and record.is_loaded and record.source == "builtin":
        return
    if payload.get("dimensions"):
        raise DimensionProviderUnavailable(provider)
    state.pop("dimensionProviderPluginId", None)


def session_fork(session_id: str, *, from_snapshot_id: str | None = None) -> ForkResult:
    """Create a new session from a snapshot of ``session_id`` (or, with no snapshot id, from its state now).

    The child gets a new id ``{worldId}-{uuid8}``, owner token (returned once), incarnation and event
    epoch; the snapshot's settings and state; the parent's prompt history up to messagesCursor and
    chat history up to the boundary (new message ids, same order and content); its own references to
    the media these use; and a ``kind: fork`` snapshot whose parentId is the source snapshot.
    Events: ``state.snapshot.created`` on the child, ``session.forked`` (topic session) on the parent.
    Reads under the parent's lock, writes in one transaction: any failure leaves no child.
    Raises SnapshotNotFound (404 not_found), WorldNotFound (404), WorldDeleting (409), CursorMissing
    (409), DimensionProviderUnavailable (409), MediaReferenceForbidden (403), MediaReferenceFailed
    (500), ForkFailed (500), SessionBusy (503). (spec 004 §POST /api/sessions/:id/fork)
    """
    from media import selectors as media_selectors
    from media import services as media_services

    with session_lock(session_id):
        with transaction.atomic():
            parent = Session.objects.filter(pk=session_id).first()
            if parent is None:
                raise SessionNotFound(session_id)
            source = snapshot_get(session_id, from_snapshot_id) if from_snapshot_id else None
            payload = json.loads(json.dumps(source.data if source else _payload_capture(parent)))
            _world_check(parent.world_id)
            state = payload.setdefault("session", {})
            _dimension_binding_check(state, payload)
            payload["pluginData"] = [r for r in payload.get("pluginData") or [] if r["namespace"] not in CONTROL_NAMESPACES]
            turn_pk = _turn_cursor_row(session_id, payload)
            chat_pk = _boundary_row(session_id, payload)
            turn_rows = list(TurnMessage.objects.filter(session=parent, pk__lte=turn_pk).order_by("id")) if turn_pk else []
            chat_rows = list(ChatMessage.objects.filter(session=parent, pk__lte=chat_pk).order_by("id")) if chat_pk else []

            owner_token = auth.new_owner_token()
            child = _child_create(parent, owner_token)
            _state_rows_replace(child, payload, keep_control_rows=False)
            _session_fields_apply(child, state)
            child.save()
            Suspension.objects.bulk_create([
                Suspension(session=child, suspension_id=f"susp_{uuid.uuid4().hex[:16]}", turn_id=s["turnId"],
                           plugin_id=s["pluginId"], runtime_id=s["runtimeId"], resume_schema=s.get("resumeSchema") or {},
                           payload=s.get("payload") or {})
                for s in payload.get("suspensions") or []
            ])
            TurnMessage.objects.bulk_create([
                TurnMessage(session=child, turn_id=m.turn_id, runtime_id=m.runtime_id, role=m.role, content=m.content)
                for m in turn_rows
            ])
            ChatMessage.objects.bulk_create([
                ChatMessage(session=child, message_id=f"msg_{uuid.uuid4().hex}", role=m.role, kind=m.kind,
                            content=m.content, seat_id=m.seat_id, turn_id=m.turn_id, metadata=m.metadata,
                            created_at=m.created_at)
                for m in chat_rows
            ])
            used_media = media_selectors.media_ids_in(payload)
            for message in chat_rows:
                used_media |= media_selectors.media_ids_in([message.content, message.metadata])
            for message in turn_rows:
                used_media |= media_selectors.media_ids_in(message.content)
            missing = media_services.media_references_copy(from_session_id=parent.id, to_session_id=child.id,
                                                           media_ids=used_media)

            child_payload = _payload_capture(child)
            child_payload["turnId"] = payload.get("turnId")
            fork_snapshot = _snapshot_write(child, child_payload, kind=Snapshot.KIND_FORK,
                                            parent_snapshot_id=source.snapshot_id if source else "")
            session_events_append(parent.id, [NewEvent(type=EVENT_SESSION_FORKED, topic=TOPIC_SESSION, payload={
                "sessionId": child.id, "parentSessionId": parent.id,
                "fromSnapshotId": source.snapshot_id if source else None, "forkSnapshotId": fork_snapshot.snapshot_id})])
    return ForkResult(session=child, owner_token=owner_token, parent_session_id=parent.id,
                      from_snapshot_id=source.snapshot_id if source else None,
                      fork_snapshot_id=fork_snapshot.snapshot_id, missing_media_count=missing)


def _child_create(parent: Session, owner_token: str) -> Session:
    prefix = parent.world_id or "session"
    for _ in range(FORK_ID_ATTEMPTS):
        child_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if Session.objects.filter(pk=child_id).exists():
            continue
        try:
            with transaction.atomic():
                return Session.objects.create(
                    id=child_id, world_id=parent.world_id, title=parent.title, locale=parent.locale,
                    # The snapshot carries the settings; no other parent metadata is copied (spec 第 2 步).
                    seats=parent.seats, metadata={},
                    owner_token_hash=auth.token_hash(owner_token), incarnation=secrets.token_hex(16),
                    event_epoch=secrets.token_hex(8),
                )
        except IntegrityError:
            continue
    raise ForkFailed()
