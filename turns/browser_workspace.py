"""The browser-private workspace (spec 004 §浏览器私有工作区, §校验与错误, §幂等重放缓存,
§有后台作业时上传 checkpoint, §共享部署): the browser keeps the save (its BrowserVault); this server
(STORE_BACKEND=memory, covel.memory_store) holds a temporary copy to run turns on.

- ``browser_checkpoint_put``: PUT /api/sessions/:id/browser-checkpoint replaces the session's whole
  workspace with a BrowserCheckpoint (schemaVersion 2, ``browser_checkpoint.schema.json``) in one
  transaction, or (a verified head and an unfinished runtime job) takes only new user messages,
  the status and the model overrides from it.
- ``browser_commit_export``: POST /api/sessions/:id/browser-commit exports the session as the next
  revision, a SessionCommit ``{baseRevision, revision, actionId, checkpoint}``; idempotent by
  ``actionId`` (the last 16 commits of a session are kept for replays).

BrowserCheckpoint, as this server writes and reads it::

    {schemaVersion: 2, profile: "browser-private", sessionId, revision, head, exportedAt?,
     session: {id, worldId, title, status, phase, completedPlayerTurns, setupRuntimes, locale,
               activePlugins, seats, metadata, createdAt},
     world: {id, name, source: store|file, metadata, package?} | null,
     messages, turnMessages, turnResults, traces, characters, characterSchema, lorebookEntries,
     dimensions, pluginData, suspensions, interactions, snapshots, worldImports}

``revision`` counts the commits of the save (0: none yet); ``head`` is the opaque id of the commit
that produced that revision (SHA-256 of its checkpoint), null at revision 0. The browser uploads the
revision and head it last applied, with whatever it changed since (a new user message). The server
never keeps credentials in it: the owner token hash, the incarnation, approvals, runtime jobs and
their plugin-data namespaces, the event log and media stay the server's own.

Per-process state. The revision, head and replay cache belong to this API process (spec: 该 API
实例持有的 revision、head 和所有重放 payload), like the memory store itself: ``_workspaces`` keyed by
session id, each bound to the incarnation it was made for, so a new session with the same id
inherits nothing; a successful session DELETE rotates the incarnation and
``workspace_release`` drops the entry. Requests of one session are serialized by the session lock;
``_registry_lock`` only guards the dict.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from covel.auth import browser_private, is_operator, request_tokens
from covel.errors import ApiError, SessionNotFound, Unauthorized
from covel.times import iso
from sessions import auth
from sessions.errors import SessionDeleting, WorldDeleting, WorldNotFound
from sessions.faults import FAULTS_KEY
from sessions.lifecycle import LIFECYCLE_KEY, SESSION_END_FIRED_KEY
from sessions.locks import session_lock
from sessions.models import (
    ChatMessage,
    Session,
    Snapshot,
    TurnMessage,
    World,
    WorldDataLedgerRow,
)
from sessions.world_data_import import RECEIVERS_KEY
from turns import snapshots
from turns.engine.ports import memory_index_changed, runtime_jobs_unfinished_count
from turns.engine.trace import trace_step_summary
from turns.errors import SessionIncarnationChanged
from turns.events import TOPIC_SYSTEM, TYPE_RESET, NewEvent, session_events_append
from turns.models import InteractionRecord, Suspension, TraceEvent, TurnResult

SCHEMA_VERSION = 2
PROFILE = "browser-private"
COMMIT_CACHE_SIZE = 16
ACTION_ID_MAX = 256
SCHEMA_PATH = Path(__file__).with_name("browser_checkpoint.schema.json")
#: Keys that name a credential: a checkpoint carrying one anywhere is refused (spec: 不能携带
#: provider key、owner token 或其他凭据). Compared lower-cased without "-" / "_".
CREDENTIAL_KEYS = frozenset({"apikey", "apikeys", "providerkey", "providerkeys", "ownertoken", "ownertokenhash",
                             "sessiontoken", "operatortoken", "authorization", "accesstoken", "refreshtoken",
                             "bearertoken", "incarnation"})
_SECRET_MIN_LENGTH = 8
#: Framework bookkeeping in session metadata (as sessions.selectors keeps out of responses): never
#: exported, and an upload keeps the server's values.
PRIVATE_METADATA = (LIFECYCLE_KEY, SESSION_END_FIRED_KEY, FAULTS_KEY, RECEIVERS_KEY)

#: ``system.reset`` reason after an accepted checkpoint upload.
RESET_BROWSER_CHECKPOINT = "browser_checkpoint"
CODE_PROFILE_REQUIRED = "browser_private_profile_required"
CODE_INVALID = "invalid_checkpoint"
CODE_SCOPE = "invalid_checkpoint_scope"
CODE_RECORD_SCOPE = "session_record_scope_conflict"
CODE_UNSUPPORTED_MUTATION = "unsupported_browser_mutation"
CODE_CHECKPOINT_REQUIRED = "browser_checkpoint_required"
CODE_REVISION_CONFLICT = "browser_revision_conflict"
CODE_INVALID_COMMIT = "invalid_request"


# --- errors a client sees ------------------------------------------------------------------------


class BrowserPrivateProfileRequired(ApiError):
    """409 browser_private_profile_required: this server's store is not the in-memory one."""

    status = 409
    code = CODE_PROFILE_REQUIRED

    def __init__(self) -> None:
        super().__init__(message="Browser-private workspaces need a server started with STORE_BACKEND=memory")


class InvalidCheckpoint(ApiError):
    """400 invalid_checkpoint: the checkpoint's structure is not a valid BrowserCheckpoint."""

    status = 400
    code = CODE_INVALID


class InvalidCheckpointScope(ApiError):
    """400 invalid_checkpoint_scope: the checkpoint is for another session, world or profile."""

    status = 400
    code = CODE_SCOPE


class SessionRecordScopeConflict(ApiError):
    """400 session_record_scope_conflict: a global record id already belongs to another session."""

    status = 400
    code = CODE_RECORD_SCOPE


class UnsupportedBrowserMutation(ApiError):
    """409 unsupported_browser_mutation: a durable detached job runs; the upload changes what it owns."""

    status = 409
    code = CODE_UNSUPPORTED_MUTATION


class BrowserCheckpointRequired(ApiError):
    """409 browser_checkpoint_required: no checkpoint was uploaded and this is no first export."""

    status = 409
    code = CODE_CHECKPOINT_REQUIRED

    def __init__(self) -> None:
        super().__init__(message="Upload a browser checkpoint before exporting a commit (only a new save's first "
                                 "export — no head, baseRevision 0, actionId local:create:<sessionId>, no "
                                 "completed player turn — needs none)")


class BrowserRevisionConflict(ApiError):
    """409 browser_revision_conflict: a stale revision, or the same revision with another head (a fork)."""

    status = 409
    code = CODE_REVISION_CONFLICT

    def __init__(self, reason: str, *, server_revision: int, revision: int) -> None:
        text = {"stale": "The checkpoint's revision is older than the server's",
                "fork": "The checkpoint has the server's revision but another head (a fork)",
                "base": "baseRevision is not the server's revision"}[reason]
        super().__init__(message=text, details={"reason": reason, "serverRevision": server_revision,
                                                "revision": revision})


# --- per-process state ---------------------------------------------------------------------------


@dataclass
class _Workspace:
    incarnation: str
    revision: int = 0
    head: str | None = None
    #: The checkpoint at ``head`` (what the browser last saw): the base of 有后台作业时 uploads.
    head_checkpoint: dict[str, Any] | None = None
    commits: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)

    @property
    def has_head(self) -> bool:
        return self.head is not None


_workspaces: dict[str, _Workspace] = {}
_registry_lock = threading.Lock()


def _workspace_get(session: Session) -> _Workspace | None:
    with _registry_lock:
        workspace = _workspaces.get(session.id)
        if workspace is not None and workspace.incarnation != session.incarnation:
            # A new session under the same id inherits no revision, head or commit.
            del _workspaces[session.id]
            return None
        return workspace


def _workspace_set(session_id: str, workspace: _Workspace) -> None:
    with _registry_lock:
        _workspaces[session_id] = workspace


def workspace_release(session_id: str) -> None:
    """Forget the revision, head and cached commits of ``session_id`` (after its DELETE committed)."""
    with _registry_lock:
        _workspaces.pop(session_id, None)


def workspaces_reset() -> None:
    """Forget every session's workspace state (tests; a process restart does the same)."""
    with _registry_lock:
        _workspaces.clear()


# --- guards ----------------------------------------------------------------------------------------


def _owner_verify(request, session: Session) -> None:
    """Owner check of the browser routes: always, in every tier (spec: 鉴权和其他会话端点一样，使用
    owner token; browser-private checks it even with DEPLOYMENT_TIER=self). 401 session_owner_required."""
    if is_operator(request):
        return
    stored = session.owner_token_hash
    if stored and any(hmac.compare_digest(auth.token_hash(t), stored) for t in request_tokens(request)):
        return
    raise Unauthorized(code="session_owner_required", message="Session owner token required")


def browser_scope(request, session_id: str) -> Session | None:
    """Authorize a browser route before its body is read.

    On a normal server: the checks of every session-scoped route first (404 session_not_found, 401
    session_owner_required in the demo/commercial tiers), then 409 browser_private_profile_required.
    On the browser-private profile: the owner check of an existing session (401, in every tier).
    Returns the Session, or None when it does not exist: PUT browser-checkpoint then rebuilds it
    (after a server restart) and its owner becomes the token the request presents.
    """
    if not browser_private():
        auth.session_get_authorized(request, session_id)
        raise BrowserPrivateProfileRequired()
    session = Session.objects.filter(pk=session_id).first()
    if session is not None:
        _owner_verify(request, session)
    return session


# --- validation ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def _json_path(parts) -> str:
    out = "checkpoint"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _server_secrets() -> list[str]:
    values = [settings.COVEL_OPERATOR_TOKEN or ""]
    values += [v for k, v in os.environ.items() if k.endswith("_API_KEY")]
    return [v.strip() for v in values if v and len(v.strip()) >= _SECRET_MIN_LENGTH]


def _credentials_check(checkpoint: dict[str, Any]) -> None:
    """400 invalid_checkpoint when a credential key, or the text of a server secret, is anywhere inside."""
    secrets_ = _server_secrets()
    stack: list[tuple[Any, tuple]] = [(checkpoint, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key.replace("_", "").replace("-", "").lower() in CREDENTIAL_KEYS:
                    raise InvalidCheckpoint(message=f"A checkpoint must not carry credentials: {_json_path(path + (key,))}",
                                            details={"path": _json_path(path + (key,))})
                stack.append((item, path + (key,)))
        elif isinstance(value, list):
            stack.extend((item, path + (index,)) for index, item in enumerate(value))
        elif isinstance(value, str) and secrets_ and any(s in value for s in secrets_):
            raise InvalidCheckpoint(message=f"A checkpoint must not carry credentials: {_json_path(path)}",
                                    details={"path": _json_path(path)})


def checkpoint_validate(session_id: str, checkpoint: Any) -> dict[str, Any]:
    """Check a BrowserCheckpoint at the boundary, before any lock or write (spec 004 §校验与错误).

    Order: shape (JSON Schema: schemaVersion 2, the required session clock, canonical origin /
    commitStatus, snapshot payload schema) → scope (sessionId = path id, profile browser-private,
    every session-domain record of the session, world.id = session.worldId) → duplicate
    ``messages[i].id`` → credentials. Returns the checkpoint. Raises InvalidCheckpoint (400
    invalid_checkpoint, ``details.issues`` / ``details.path``) or InvalidCheckpointScope (400).
    """
    if not isinstance(checkpoint, dict):
        raise InvalidCheckpoint(message="checkpoint must be a JSON object")
    if checkpoint.get("schemaVersion") != SCHEMA_VERSION:
        raise InvalidCheckpoint(message=f"Unsupported checkpoint schemaVersion {checkpoint.get('schemaVersion')!r} "
                                        f"(this server reads {SCHEMA_VERSION})", details={"path": "checkpoint.schemaVersion"})
    issues = [{"path": _json_path(e.absolute_path), "message": e.message}
              for e in sorted(_validator().iter_errors(checkpoint), key=lambda e: list(map(str, e.absolute_path)))[:20]]
    if issues:
        raise InvalidCheckpoint(message=f"Invalid checkpoint: {issues[0]['path']}: {issues[0]['message']}",
                                details={"issues": issues})
    revision, head = checkpoint["revision"], checkpoint["head"]
    if (revision == 0) != (head is None):
        raise InvalidCheckpoint(message="head is null exactly at revision 0", details={"path": "checkpoint.head"})

    if checkpoint["profile"] != PROFILE:
        raise InvalidCheckpointScope(message=f"checkpoint.profile must be {PROFILE!r}", details={"path": "checkpoint.profile"})
    if checkpoint["sessionId"] != session_id:
        raise InvalidCheckpointScope(message="checkpoint.sessionId is not the session of the path",
                                     details={"path": "checkpoint.sessionId"})
    if checkpoint["session"]["id"] != session_id:
        raise InvalidCheckpointScope(message="checkpoint.session.id is not the session of the path",
                                     details={"path": "checkpoint.session.id"})
    for name in ("messages", "turnMessages", "turnResults", "traces", "suspensions", "interactions", "snapshots",
                 "worldImports"):
        for index, record in enumerate(checkpoint.get(name) or []):
            if record.get("sessionId", session_id) != session_id:
                raise InvalidCheckpointScope(message=f"{name}[{index}] belongs to another session",
                                             details={"path": f"checkpoint.{name}[{index}].sessionId"})
    world = checkpoint.get("world")
    if world is not None and world["id"] != checkpoint["session"]["worldId"]:
        raise InvalidCheckpointScope(message="checkpoint.world.id is not the session's worldId",
                                     details={"path": "checkpoint.world.id"})
    for index, record in enumerate(checkpoint.get("worldImports") or []):
        if record["worldId"] != checkpoint["session"]["worldId"]:
            raise InvalidCheckpointScope(message=f"worldImports[{index}] is for another world",
                                         details={"path": f"checkpoint.worldImports[{index}].worldId"})

    seen: dict[str, int] = {}
    for index, message in enumerate(checkpoint["messages"]):
        first = seen.setdefault(message["id"], index)
        if first != index:
            path = f"messages[{index}].id"
            raise InvalidCheckpoint(message=f"Duplicate message id at {path} (first at messages[{first}].id)",
                                    details={"path": path, "duplicateOf": f"messages[{first}].id", "id": message["id"]})
    _credentials_check(checkpoint)
    return checkpoint


def commit_request_validate(data: dict[str, Any]) -> tuple[str, int]:
    """``{actionId, baseRevision}`` of POST browser-commit: actionId a non-empty string of at most 256
    characters, baseRevision an integer ≥ 0. Returns both; 400 invalid_request otherwise."""
    action_id, base = data.get("actionId"), data.get("baseRevision")
    unknown = sorted(set(data) - {"actionId", "baseRevision"})
    if unknown:
        raise ApiError(400, CODE_INVALID_COMMIT, f"Unknown field: {unknown[0]}", {"issues": [{"path": unknown[0]}]})
    if not isinstance(action_id, str) or not action_id or len(action_id) > ACTION_ID_MAX:
        raise ApiError(400, CODE_INVALID_COMMIT, "actionId must be a non-empty string of at most 256 characters")
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise ApiError(400, CODE_INVALID_COMMIT, "baseRevision must be an integer ≥ 0")
    return action_id, base


# --- export ----------------------------------------------------------------------------------------


def _dt(value: str | None) -> datetime:
    """A stored timestamp from a checkpoint string (now when absent or unreadable)."""
    if value:
        try:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc)
        except ValueError:
            pass
    return timezone.now()


def _world_export(world_id: str) -> dict[str, Any] | None:
    from sessions.catalog import world_resolve

    if not world_id:
        return None
    row = World.objects.filter(pk=world_id).first()
    resolved = world_resolve(world_id)
    if resolved is None:
        return None
    if row is not None and (resolved.metadata or {}).get("source") == "store":
        return {"id": row.id, "name": row.name, "source": "store", "metadata": row.metadata or {}, "package": row.package or {}}
    return {"id": world_id, "name": resolved.name or world_id, "source": "file"}


def checkpoint_capture(session: Session, *, revision: int) -> dict[str, Any]:
    """The whole workspace of ``session`` as a BrowserCheckpoint at ``revision`` (head filled in by the caller).

    Excludes what stays the server's: job/log plugin-data namespaces, the owner hash, incarnation,
    approvals, runtime jobs, the event log, media bytes.
    """
    state = snapshots._payload_capture(session)  # same package: the snapshot payload's state records
    meta = {k: v for k, v in (session.metadata or {}).items()
            if k not in PRIVATE_METADATA and k.replace("_", "").replace("-", "").lower() not in CREDENTIAL_KEYS}
    return {
        "schemaVersion": SCHEMA_VERSION, "profile": PROFILE, "sessionId": session.id, "revision": revision, "head": None,
        "exportedAt": iso(timezone.now()),
        "session": {
            "id": session.id, "worldId": session.world_id, "title": session.title, "status": session.status,
            "phase": session.phase, "completedPlayerTurns": session.completed_player_turns,
            "setupRuntimes": session.setup_runtimes or {}, "locale": session.locale,
            "activePlugins": list(session.active_plugins or []), "seats": session.seats or [], "metadata": meta,
            "createdAt": iso(session.created_at),
        },
        "world": _world_export(session.world_id),
        "messages": [
            {"id": m.message_id, "role": m.role, "kind": m.kind, "content": m.content, "seatId": m.seat_id,
             "turnId": m.turn_id, "metadata": m.metadata or {}, "createdAt": iso(m.created_at)}
            for m in ChatMessage.objects.filter(session=session).order_by("created_at", "id")
        ],
        "turnMessages": [
            {"id": str(m.pk), "turnId": m.turn_id, "runtimeId": m.runtime_id, "role": m.role, "content": m.content}
            for m in TurnMessage.objects.filter(session=session).order_by("id")
        ],
        "turnResults": [
            {"turnId": t.turn_id, "origin": t.origin, "commitStatus": "committed" if t.committed else "aborted",
             "abortReason": t.abort_reason, "playerTurnIndex": t.player_turn_index, "inputMessageId": t.input_message_id,
             "summary": t.summary or {}, "createdAt": iso(t.created_at)}
            for t in TurnResult.objects.filter(session=session).order_by("id")
        ],
        "traces": [
            {"traceId": e.trace_id, "turnId": e.turn_id, "seq": e.seq, "type": e.type, "pluginId": e.plugin_id,
             "runtimeId": e.runtime_id, "payload": e.payload or {}}
            for e in TraceEvent.objects.filter(session=session).order_by("id")
        ],
        "characters": state["characters"],
        "characterSchema": state["characterSchema"],
        "lorebookEntries": state["lorebookEntries"],
        "dimensions": state["dimensions"],
        "pluginData": [r for r in state["pluginData"] if r["namespace"] not in snapshots.CONTROL_NAMESPACES],
        "suspensions": [
            {"suspensionId": s.suspension_id, "turnId": s.turn_id, "pluginId": s.plugin_id, "runtimeId": s.runtime_id,
             "status": s.status, "resumeSchema": s.resume_schema or {}, "payload": s.payload or {},
             "createdAt": iso(s.created_at)}
            for s in Suspension.objects.filter(session=session).order_by("created_at", "id")
        ],
        "interactions": [
            {"interactionId": r.interaction_id, "turnId": r.turn_id, "type": r.type, "pluginId": r.plugin_id,
             "runtimeId": r.runtime_id, "spec": r.spec or {}, "status": r.status, "answer": r.answer,
             "createdAt": iso(r.created_at), "answeredAt": iso(r.answered_at) if r.answered_at else None}
            for r in InteractionRecord.objects.filter(session=session).order_by("created_at", "id")
        ],
        "snapshots": [
            {"id": s.snapshot_id, "sessionId": session.id, "label": s.label, "kind": s.kind, "turnId": s.turn_id or None,
             "parentId": s.parent_snapshot_id or None, "completedPlayerTurns": s.completed_player_turns,
             "createdAt": iso(s.created_at), "payload": s.data or {}}
            for s in Snapshot.objects.filter(session=session).order_by("created_at", "id")
        ],
        "worldImports": [
            {"worldId": r.world_id, "kind": r.kind, "sourceId": r.source_id, "target": r.target, "pluginId": r.plugin_id,
             "namespace": r.namespace, "key": r.key, "valueHash": r.value_hash, "definitionHash": r.definition_hash,
             "version": r.version, "managed": r.managed}
            for r in WorldDataLedgerRow.objects.filter(session=session).order_by("id")
        ],
    }


def _head_of(checkpoint: dict[str, Any]) -> str:
    """The head id of an exported checkpoint: SHA-256 of its canonical JSON (head itself left out)."""
    body = {k: v for k, v in checkpoint.items() if k not in ("head", "exportedAt")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


# --- replacement -----------------------------------------------------------------------------------


def _world_sync(request, checkpoint: dict[str, Any]) -> None:
    """Shared-deployment rule (spec 004 §共享部署; browser-private is one): the server's world wins and
    uploaded content is ignored, unless the operator sends it for a store world (then it is written).
    A world the server does not have: the operator creates it from ``checkpoint.world`` (404
    world_not_found without content); anyone else gets 401 operator_token_required. 409 world_deleting."""
    from sessions.catalog import world_resolve

    world_id = checkpoint["session"]["worldId"]
    if not world_id:
        return
    uploaded = checkpoint.get("world")
    resolved = world_resolve(world_id)
    if resolved is not None:
        if resolved.is_deleting:
            raise WorldDeleting(world_id)
        row = World.objects.filter(pk=world_id).first()
        if (uploaded and uploaded.get("package") is not None and is_operator(request) and row is not None
                and (resolved.metadata or {}).get("source") == "store"):
            row.name = uploaded.get("name") or row.name
            row.metadata = uploaded.get("metadata") or row.metadata
            row.package = uploaded["package"]
            row.save()
        return
    if not is_operator(request):
        raise Unauthorized(code="operator_token_required",
                           message="Creating the checkpoint's world on this server needs the operator token")
    if not uploaded or uploaded.get("package") is None:
        raise WorldNotFound(world_id)
    World.objects.create(id=world_id, name=uploaded.get("name") or world_id,
                         metadata={**(uploaded.get("metadata") or {}), "source": "store"}, package=uploaded["package"])


def _session_fields_apply(session: Session, data: dict[str, Any]) -> None:
    """Session metadata from the browser's save; the server keeps its own credentials and generations
    (owner hash, incarnation, deletion state, event epoch / seq)."""
    session.world_id = data["worldId"]
    session.title = data.get("title", session.title)
    session.status = data["status"]
    session.phase = data["phase"]
    session.completed_player_turns = data["completedPlayerTurns"]
    session.setup_runtimes = data["setupRuntimes"]
    session.locale = data.get("locale") or session.locale
    session.active_plugins = list(data.get("activePlugins") or [])
    session.seats = data.get("seats") if data.get("seats") is not None else session.seats
    kept = {k: v for k, v in (session.metadata or {}).items() if k in PRIVATE_METADATA}
    session.metadata = {**{k: v for k, v in (data.get("metadata") or {}).items() if k not in PRIVATE_METADATA}, **kept}


def _global_ids_check(session_id: str, checkpoint: dict[str, Any]) -> None:
    """400 session_record_scope_conflict: a snapshot or suspension id that another session holds."""
    for name, model, column, key in (("snapshots", Snapshot, "snapshot_id", "id"),
                                     ("suspensions", Suspension, "suspension_id", "suspensionId")):
        ids = [r[key] for r in checkpoint.get(name) or []]
        if not ids:
            continue
        taken = model.objects.filter(**{f"{column}__in": ids}).exclude(session_id=session_id).values_list(column, flat=True).first()
        if taken is not None:
            raise SessionRecordScopeConflict(message=f"{name} id {taken!r} already belongs to another session",
                                             details={"path": f"checkpoint.{name}", "id": taken})


def _rows_replace(session: Session, checkpoint: dict[str, Any]) -> None:
    """Replace every session-domain row of ``session`` by the checkpoint's (inside the caller's transaction)."""
    _global_ids_check(session.id, checkpoint)
    state = {k: checkpoint.get(k) for k in ("characters", "characterSchema", "lorebookEntries", "dimensions")}
    state["pluginData"] = [dict(r, value=r.get("value"), createdAt=r.get("createdAt") or iso(timezone.now()))
                           for r in checkpoint.get("pluginData") or [] if r["namespace"] not in snapshots.CONTROL_NAMESPACES]
    state["characters"] = [dict(c, createdAt=c.get("createdAt") or iso(timezone.now())) for c in state["characters"] or []]
    for c in state["characters"]:
        c["createdAt"] = iso(_dt(c["createdAt"]))
    for r in state["pluginData"]:
        r["createdAt"] = iso(_dt(r["createdAt"]))
    snapshots._state_rows_replace(session, state, keep_control_rows=True)  # same package: the snapshot restore's writer

    ChatMessage.objects.filter(session=session).delete()
    ChatMessage.objects.bulk_create([
        ChatMessage(session=session, message_id=m["id"], role=m["role"], kind=m.get("kind") or "text", content=m["content"],
                    seat_id=m.get("seatId") or "", turn_id=m.get("turnId") or "", metadata=m.get("metadata") or {},
                    created_at=_dt(m.get("createdAt")))
        for m in checkpoint["messages"]
    ])
    TurnMessage.objects.filter(session=session).delete()
    cursor_map: dict[str, str] = {}
    for m in checkpoint.get("turnMessages") or []:
        row = TurnMessage.objects.create(session=session, turn_id=m["turnId"], runtime_id=m.get("runtimeId") or "",
                                         role=m["role"], content=m["content"])
        cursor_map[m["id"]] = str(row.pk)
    TurnResult.objects.filter(session=session).delete()
    TurnResult.objects.bulk_create([
        TurnResult(session=session, turn_id=t["turnId"], origin=t["origin"], committed=t["commitStatus"] == "committed",
                   abort_reason=t.get("abortReason") or "", player_turn_index=t.get("playerTurnIndex"),
                   input_message_id=t.get("inputMessageId") or "", summary=t.get("summary") or {})
        for t in checkpoint.get("turnResults") or []
    ])
    TraceEvent.objects.filter(session=session).delete()
    TraceEvent.objects.bulk_create([
        TraceEvent(session=session, trace_id=e["traceId"], turn_id=e.get("turnId") or "", seq=e["seq"], type=e["type"],
                   plugin_id=e.get("pluginId") or "", runtime_id=e.get("runtimeId") or "", payload=e.get("payload") or {},
                   summary=trace_step_summary(e["type"], e.get("payload")))
        for e in checkpoint.get("traces") or []
    ])
    Suspension.objects.filter(session=session).delete()
    InteractionRecord.objects.filter(session=session).delete()
    Snapshot.objects.filter(session=session).delete()
    try:
        with transaction.atomic():
            Suspension.objects.bulk_create([
                Suspension(session=session, suspension_id=s["suspensionId"], turn_id=s["turnId"], plugin_id=s["pluginId"],
                           runtime_id=s["runtimeId"], status=s.get("status") or "pending",
                           resume_schema=s.get("resumeSchema") or {}, payload=s.get("payload") or {})
                for s in checkpoint.get("suspensions") or []
            ])
            Snapshot.objects.bulk_create([
                Snapshot(session=session, snapshot_id=s["id"], label=s.get("label") or "", kind=s["kind"],
                         turn_id=s.get("turnId") or "", parent_snapshot_id=s.get("parentId") or "",
                         completed_player_turns=s.get("completedPlayerTurns", s["payload"]["session"]["completedPlayerTurns"]),
                         data=_snapshot_payload_remap(s["payload"], cursor_map),
                         payload_size_bytes=len(json.dumps(s["payload"], ensure_ascii=False, separators=(",", ":")).encode()))
                for s in checkpoint.get("snapshots") or []
            ])
    except IntegrityError as exc:
        # Two records of the checkpoint itself sharing a global id (or a concurrent writer taking one).
        raise SessionRecordScopeConflict(message=f"A snapshot or suspension id is not unique: {exc}") from exc
    InteractionRecord.objects.bulk_create([
        InteractionRecord(session=session, interaction_id=r["interactionId"], turn_id=r["turnId"], type=r["type"],
                          plugin_id=r.get("pluginId") or "", runtime_id=r.get("runtimeId") or "", spec=r.get("spec") or {},
                          status=r["status"], answer=r.get("answer"),
                          answered_at=_dt(r["answeredAt"]) if r.get("answeredAt") else None)
        for r in checkpoint.get("interactions") or []
    ])
    WorldDataLedgerRow.objects.filter(session=session).delete()
    WorldDataLedgerRow.objects.bulk_create([
        WorldDataLedgerRow(session=session, world_id=r["worldId"], kind=r["kind"], source_id=r["sourceId"], target=r["target"],
                           plugin_id=r.get("pluginId") or "", namespace=r.get("namespace") or "", key=r["key"],
                           value_hash=r["valueHash"], definition_hash=r.get("definitionHash") or "",
                           version=r.get("version") or 0, managed=r.get("managed", True))
        for r in checkpoint.get("worldImports") or []
    ])


def _snapshot_payload_remap(payload: dict[str, Any], cursor_map: dict[str, str]) -> dict[str, Any]:
    """A snapshot's messagesCursor names a prompt-history row by its id in the checkpoint; rows get new
    ids here, so the cursor follows its row."""
    cursor = payload.get("messagesCursor")
    if cursor is not None and cursor in cursor_map:
        return dict(payload, messagesCursor=cursor_map[cursor])
    return payload


#: Checkpoint parts a durable detached job owns: an upload while one runs must leave them as at head.
_EXECUTION_DOMAIN = ("turnMessages", "turnResults", "traces", "characters", "characterSchema", "lorebookEntries",
                     "dimensions", "pluginData", "suspensions", "interactions", "snapshots", "worldImports")


def _delta_apply(session: Session, checkpoint: dict[str, Any], head: dict[str, Any]) -> None:
    """有后台作业时上传 checkpoint: keep the server's jobs, leases and results; take only the new user
    messages, the session status and model overrides (and, through _world_sync, authorized world
    changes) relative to the last head. 409 unsupported_browser_mutation for anything else."""
    def refuse(what: str) -> None:
        raise UnsupportedBrowserMutation(message=f"A background job of this session is running: the upload may not "
                                                 f"change {what}", details={"path": f"checkpoint.{what}"})

    new_session, old_session = checkpoint["session"], head["session"]
    for key in ("id", "worldId"):
        if new_session.get(key) != old_session.get(key):
            refuse(f"session.{key}")
    for key in ("phase", "completedPlayerTurns", "setupRuntimes", "activePlugins", "seats", "locale", "title"):
        if new_session.get(key) != old_session.get(key):
            refuse(f"session.{key}")
    strip = lambda meta: {k: v for k, v in (meta or {}).items() if k != "runtimeModelOverrides"}
    if strip(new_session.get("metadata")) != strip(old_session.get("metadata")):
        refuse("session.metadata")
    for name in _EXECUTION_DOMAIN:
        if checkpoint.get(name) != head.get(name):
            refuse(name)
    old_messages = {m["id"]: m for m in head["messages"]}
    uploaded_ids = {m["id"] for m in checkpoint["messages"]}
    for message_id, message in old_messages.items():
        if message_id not in uploaded_ids:
            refuse("messages (a message was deleted)")
    added = []
    for index, message in enumerate(checkpoint["messages"]):
        old = old_messages.get(message["id"])
        if old is not None:
            if old != message:
                refuse(f"messages[{index}]")
            continue
        if message["role"] != "user":
            refuse(f"messages[{index}] (only new user messages)")
        added.append(message)
    existing = set(ChatMessage.objects.filter(session=session, message_id__in=[m["id"] for m in added])
                   .values_list("message_id", flat=True))
    ChatMessage.objects.bulk_create([
        ChatMessage(session=session, message_id=m["id"], role="user", kind=m.get("kind") or "text", content=m["content"],
                    seat_id=m.get("seatId") or "", turn_id=m.get("turnId") or "", metadata=m.get("metadata") or {},
                    created_at=_dt(m.get("createdAt")))
        for m in added if m["id"] not in existing
    ])
    session.status = new_session["status"]
    meta = dict(session.metadata or {})
    overrides = (new_session.get("metadata") or {}).get("runtimeModelOverrides")
    if overrides is None:
        meta.pop("runtimeModelOverrides", None)
    else:
        meta["runtimeModelOverrides"] = overrides
    session.metadata = meta


@dataclass
class CheckpointResult:
    """browser_checkpoint_put's answer: ``{ok, sessionId, revision, head, reconcileRequired?}``."""

    session_id: str
    revision: int
    head: str | None
    reconcile_required: bool

    def out(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": True, "sessionId": self.session_id, "revision": self.revision, "head": self.head}
        if self.reconcile_required:
            body["reconcileRequired"] = True
        return body


def _session_relock(request, session_id: str, seen: Session | None) -> Session | None:
    """Inside the session lock and transaction: the row again (FOR UPDATE), with the owner, the
    incarnation and the deletion state re-verified (spec: 拿到会话锁之后，重新验证所有者、会话实例和删除状态).
    401 session_owner_required, 409 session_incarnation_changed / session_deleting."""
    session = Session.objects.select_for_update().filter(pk=session_id).first()
    if seen is not None and (session is None or session.incarnation != seen.incarnation):
        raise SessionIncarnationChanged()
    if session is None:
        return None
    if session.deletion_state == Session.DELETION_DELETING:
        raise SessionDeleting()
    _owner_verify(request, session)
    return session


def _session_rebuild(request, checkpoint: dict[str, Any]) -> Session:
    """A session this process does not have (its restart lost it): rebuilt from the checkpoint, owned
    by the token the request presents (401 session_owner_required without one)."""
    tokens = request_tokens(request)
    if not tokens:
        raise Unauthorized(code="session_owner_required", message="Session owner token required")
    import secrets

    data = checkpoint["session"]
    return Session.objects.create(
        id=checkpoint["sessionId"], world_id=data["worldId"], locale=data.get("locale") or "en-US",
        owner_token_hash=auth.token_hash(tokens[0]), incarnation=secrets.token_hex(16),
        event_epoch=secrets.token_hex(8))


def browser_checkpoint_put(request, session_id: str, checkpoint: Any, *, seen: Session | None) -> CheckpointResult:
    """PUT /api/sessions/:id/browser-checkpoint: replace the session's temporary workspace.

    checkpoint: a BrowserCheckpoint (module docstring), validated first (400 invalid_checkpoint /
    invalid_checkpoint_scope, nothing locked or written). seen: the session the route authorized
    (None: rebuild it). Then under the session lock, in one transaction: owner, incarnation and
    deletion re-verified (401 / 409 session_incarnation_changed / session_deleting); the revision
    checked against this process's head (409 browser_revision_conflict: ``stale`` below it, ``fork``
    at it with another head); the world synced (§共享部署: 401 operator_token_required, 404
    world_not_found, 409 world_deleting); then either the whole workspace replaced, or — a verified
    head and an unfinished runtime job — only the allowed changes taken (409
    unsupported_browser_mutation otherwise; the answer says ``reconcileRequired: true``). A global
    record id of another session is 400 session_record_scope_conflict and rolls the whole write
    back. The accepted revision and head become this process's head. Raises SessionBusy (503).
    """
    checkpoint_validate(session_id, checkpoint)
    with session_lock(session_id):
        with transaction.atomic():
            session = _session_relock(request, session_id, seen)
            if session is None:
                session = _session_rebuild(request, checkpoint)
            workspace = _workspace_get(session)
            revision, head = checkpoint["revision"], checkpoint["head"]
            if workspace is not None and workspace.has_head:
                if revision < workspace.revision:
                    raise BrowserRevisionConflict("stale", server_revision=workspace.revision, revision=revision)
                if revision == workspace.revision and head != workspace.head:
                    raise BrowserRevisionConflict("fork", server_revision=workspace.revision, revision=revision)
            _world_sync(request, checkpoint)
            detached = (workspace is not None and workspace.has_head and workspace.head_checkpoint is not None
                        and revision == workspace.revision and runtime_jobs_unfinished_count(session_id) > 0)
            if detached:
                _delta_apply(session, checkpoint, workspace.head_checkpoint)
            else:
                _session_fields_apply(session, checkpoint["session"])
                try:
                    with transaction.atomic():
                        _rows_replace(session, checkpoint)
                except IntegrityError as exc:
                    # Two records of the checkpoint with one identity (character, lorebook entry,
                    # dimension, plugin-data key, turn, interaction, ledger row): the whole write goes.
                    raise InvalidCheckpoint(message=f"The checkpoint repeats a record identity: {exc}") from exc
            session.save()
            # Subscribers re-read the session (its rows were replaced), and the memory index follows.
            session_events_append(session_id, [NewEvent(type=TYPE_RESET, topic=TOPIC_SYSTEM, payload={
                "reason": RESET_BROWSER_CHECKPOINT, "revision": revision})])
            memory_index_changed(session_id)
            new = None
            if not detached:
                new = _Workspace(incarnation=session.incarnation, revision=revision, head=head,
                                 head_checkpoint=checkpoint if head is not None else None)
                if workspace is not None and workspace.incarnation == session.incarnation:
                    new.commits = workspace.commits  # replays of earlier exports stay answerable
        # The write committed; still under the session lock, so no other request of it sees the old head.
        if new is not None:
            _workspace_set(session_id, new)
    return CheckpointResult(session_id=session_id, revision=revision, head=head, reconcile_required=detached)


def _first_export_allowed(session: Session, action_id: str, base_revision: int) -> bool:
    """A new save's first export (spec: 服务端还没有这个会话的 head、且会话还没有完成任何玩家回合)."""
    return (base_revision == 0 and action_id == f"local:create:{session.id}" and session.completed_player_turns == 0
            and not TurnResult.objects.filter(session=session, origin="player", committed=True).exists())


def browser_commit_export(request, session_id: str, *, action_id: str, base_revision: int, seen: Session) -> dict[str, Any]:
    """POST /api/sessions/:id/browser-commit: export the session as the next revision.

    Returns SessionCommit ``{baseRevision, revision, actionId, checkpoint}``; ``checkpoint.head`` is
    the new head. Under the session lock, after owner / incarnation / deletion are re-verified (401,
    409 session_incarnation_changed / session_deleting): a cached ``actionId`` returns its commit
    unchanged (the last 16 per session). Without a head only a new save's first export is allowed
    (409 browser_checkpoint_required); with one, ``baseRevision`` must be the head's revision (409
    browser_revision_conflict, reason ``base``). Raises SessionNotFound (404), SessionBusy (503).
    """
    with session_lock(session_id), transaction.atomic():
        session = _session_relock(request, session_id, seen)
        if session is None:
            raise SessionNotFound(session_id)
        workspace = _workspace_get(session)
        if workspace is not None and action_id in workspace.commits:
            return workspace.commits[action_id]
        if workspace is None or not workspace.has_head:
            if not _first_export_allowed(session, action_id, base_revision):
                raise BrowserCheckpointRequired()
            workspace = workspace or _Workspace(incarnation=session.incarnation)
        elif base_revision != workspace.revision:
            raise BrowserRevisionConflict("base", server_revision=workspace.revision, revision=base_revision)
        revision = workspace.revision + 1
        checkpoint = checkpoint_capture(session, revision=revision)
        checkpoint["head"] = _head_of(checkpoint)
        commit = {"baseRevision": base_revision, "revision": revision, "actionId": action_id, "checkpoint": checkpoint}
        workspace.revision, workspace.head, workspace.head_checkpoint = revision, checkpoint["head"], checkpoint
        workspace.commits[action_id] = commit
        while len(workspace.commits) > COMMIT_CACHE_SIZE:
            workspace.commits.popitem(last=False)
        _workspace_set(session_id, workspace)
        return commit
