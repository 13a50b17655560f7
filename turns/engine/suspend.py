"""Suspensions in the engine (spec 004 §Suspend / Resume; spec 000 suspend).

A runtime that calls the builtin ``suspend`` tool ends ``suspended``: its result carries
``suspension = {reason, resumeSchema, continuation}`` and keeps its staged writes. The turn commit
saves one Suspension row per suspended result in the same transaction as the turn's other writes
(``suspension_rows_hook``), sends ``turn.suspended`` after commit, and does not count the player
turn: the saved ``countPolicy`` counts it once, on the last successful resume of its logical turn
(or when the last pending suspension is abandoned).

What a row's ``payload`` holds (never returned by the list route):

- ``continuation``: the agent loop's saved conversation, the suspend call id and loop state.
- ``proposals``: the writes staged before the suspension (committed only by the last resume).
- ``logicalTurn`` / ``logicalTurnId``, ``countPolicy`` (whether the source turn would have counted),
  ``playerTurns`` (completedPlayerTurns at suspension), ``pluginVersion``, ``turnKind``.
- ``touched``: the content, at suspension, of every record the buffered writes touch — a plugin-data
  key, a character, the character schema, a lorebook entry — compared again before a resume runs
  and at its commit (``data-changed``).
- ``heldJobs``: the job specs of the turn's detached runtimes (``schedule.detached``). A turn that
  suspends holds them back (spec 004 §挂起与回合计数 / §再次挂起): no RuntimeJob row exists while the
  turn waits, a re-suspension hands them to the new row, and they are staged (``runtime_jobs_stage``,
  queued after the commit) in the transaction that ends the logical turn — its last successful
  resume, or the abandonment / expiry / voiding of its last waiting suspension. Every row of one
  logical turn carries the same list; only the last one to end stages it, so it is staged once.
- ``progressJobId`` (in ``continuation``): the ctx.progress job of a suspended function runtime,
  ``waiting-input`` while the chain waits; ``cancelled`` when the suspension is abandoned, expires
  or is voided (``job-status.updated`` in the same transaction).
- ``stage`` ``setup``: a suspended setup runtime keeps its setup state pending (the attempt is not
  counted); its resume settles it and may switch the phase, its abandonment counts the attempt as
  failed (pending again, or blocked at maxTriggerCount; spec 004 §Setup runtime 控制).

Resuming a row is turns.engine.resume (``suspension_resume_run``).
"""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from covel.jsoncopy import json_copy
from plugins_app.toolkit import proposals as P
from turns.engine.runtime import STATUS_SUSPENDED, RuntimeResult, TurnInfo
from turns.events import NewEvent

TURN_SUSPENDED = "turn.suspended"
TURN_RESUMED = "turn.resumed"
STATUS_PENDING = "pending"
STATUS_RESUMING = "resuming"
STATUS_RESOLVED = "resolved"
STATUS_ABANDONED = "abandoned"
#: A suspension waits this long for its answer (COVEL_SUSPENSION_TTL_SECONDS overrides).
DEFAULT_TTL_SECONDS = 7 * 24 * 3600


def ttl_seconds() -> int:
    return int(getattr(settings, "COVEL_SUSPENSION_TTL_SECONDS", DEFAULT_TTL_SECONDS) or DEFAULT_TTL_SECONDS)


def proposal_to_json(proposal: P.Proposal) -> dict[str, Any]:
    """A staged write as stored in a suspension (kind, payload, source, call id)."""
    return {"kind": proposal.kind, "payload": json_copy(proposal.payload), "pluginId": proposal.plugin_id,
            "runtimeId": proposal.runtime_id, "callId": proposal.call_id}


def proposal_from_json(item: dict[str, Any]) -> P.Proposal:
    return P.Proposal(item["kind"], json_copy(item["payload"]), plugin_id=item.get("pluginId"),
                      runtime_id=item.get("runtimeId"), call_id=item.get("callId"))


def touched_keys(proposals: list[P.Proposal]) -> list[str]:
    """Record keys the writes touch: ``pd:<plugin>:<namespace>:<key>``, ``ch:<id>``, ``schema``,
    ``lore:<entry id>`` (dimensions check their own versions at commit)."""
    keys: list[str] = []

    def add(key: str) -> None:
        if key not in keys:
            keys.append(key)

    for p in proposals:
        payload = p.payload
        if p.kind in (P.PLUGIN_DATA, P.PLUGIN_DATA_DELETE, P.PLUGIN_DATA_UPDATE):
            add(f"pd:{p.plugin_id}:{payload['namespace']}:{payload['key']}")
        elif p.kind == P.PLUGIN_DATA_BATCH:
            for entry in payload.get("entries") or []:
                add(f"pd:{p.plugin_id}:{entry['namespace']}:{entry['key']}")
        elif p.kind == P.CHARACTER_UPSERT:
            add(f"ch:{payload['id']}")
        elif p.kind == P.CHARACTER_SCHEMA_SET:
            add("schema")
        elif p.kind == P.LOREBOOK_UPSERT:
            for entry in payload.get("entries") or []:
                add(f"lore:{entry['id']}")
    return keys


def records_content(session_id: str, keys: list[str]) -> dict[str, Any]:
    """The committed content of each touched record (None when it does not exist). One query per
    record family."""
    from plugins_app.models import PluginData
    from sessions.models import Character, CharacterSchema, LorebookEntry

    out: dict[str, Any] = {k: None for k in keys}
    pd = [k.split(":", 3) for k in keys if k.startswith("pd:")]
    if pd:
        rows = PluginData.objects.filter(session_id=session_id, plugin_id__in={p[1] for p in pd}, key__in={p[3] for p in pd})
        for row in rows:
            key = f"pd:{row.plugin_id}:{row.namespace}:{row.key}"
            if key in out:
                out[key] = json_copy(row.value)
    ids = [k[3:] for k in keys if k.startswith("ch:")]
    if ids:
        for c in Character.objects.filter(session_id=session_id, character_id__in=ids):
            out[f"ch:{c.character_id}"] = {"name": c.name, "type": c.type, "aliases": json_copy(c.aliases),
                                           "description": c.description, "fields": json_copy(c.fields)}
    if "schema" in out:
        row = CharacterSchema.objects.filter(session_id=session_id).first()
        out["schema"] = json_copy(row.schema) if row and row.schema else None
    lore = [k[5:] for k in keys if k.startswith("lore:")]
    if lore:
        for e in LorebookEntry.objects.filter(session_id=session_id, entry_id__in=lore):
            out[f"lore:{e.entry_id}"] = {"keys": json_copy(e.keys), "content": e.content, "enabled": e.enabled}
    return out


def suspension_rows_hook(*, results: list[RuntimeResult], turn: TurnInfo, count_policy: bool, player_turns: int,
                         plugin_versions: dict[str, str | None], held_jobs: list[dict[str, Any]] | None = None):
    """The CommitPlan ``in_transaction`` hook that saves the turn's suspended results: one row each,
    the older pending suspension of the same runtime abandoned in the same transaction (no event
    of its own: its progress job is cancelled and the jobs it held are staged), and a
    ``turn.suspended`` NewEvent per row. ``held_jobs``: the turn's detached job specs
    (``[{jobId, pluginId, runtimeId, payload}]``), held by the rows instead of being staged now.
    Returns None when nothing suspended (the caller stages ``held_jobs`` itself)."""
    suspended = [r for r in results if r.status == STATUS_SUSPENDED and r.suspension is not None]
    if not suspended:
        return None

    def hook(session) -> list[NewEvent]:
        from turns.models import Suspension

        events = []
        expires = timezone.now() + timedelta(seconds=ttl_seconds())
        for result in suspended:
            for old in Suspension.objects.filter(session=session, runtime_id=result.runtime_id, status=STATUS_PENDING):
                events.extend(_superseded_finish(session, old))
            suspension_id = f"susp_{uuid.uuid4().hex[:16]}"
            payload = {
                "continuation": result.suspension["continuation"],
                "proposals": [proposal_to_json(p) for p in result.proposals],
                "logicalTurn": turn.logical_turn, "logicalTurnId": turn.turn_id, "countPolicy": count_policy,
                "playerTurns": player_turns, "pluginVersion": plugin_versions.get(result.plugin_id),
                "turnKind": turn.kind, "stage": result.stage, "reason": result.suspension["reason"],
                "touched": records_content(session.pk, touched_keys(result.proposals)),
                "expiresAt": expires.isoformat(), "heldJobs": json_copy(held_jobs or []),
            }
            Suspension.objects.create(session=session, suspension_id=suspension_id, turn_id=turn.turn_id,
                                      plugin_id=result.plugin_id, runtime_id=result.runtime_id, status=STATUS_PENDING,
                                      resume_schema=result.suspension["resumeSchema"], payload=payload)
            result.suspension["suspensionId"] = suspension_id
            events.append(NewEvent(type=TURN_SUSPENDED, topic="turn", turn_id=turn.turn_id, payload={
                "suspensionId": suspension_id, "turnId": turn.turn_id, "runtimeId": result.runtime_id,
                "pluginId": result.plugin_id, "reason": result.suspension["reason"],
                "resumeSchema": result.suspension["resumeSchema"]}))
        return events

    return hook


class SuspensionOutdated(Exception):
    """The suspension is stale: ``reason`` session-moved-on | plugin-updated | data-changed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def staleness_check(row: Any, session: Any, plugin_version: str | None) -> None:
    """Raise SuspensionOutdated when the session moved on, the plugin changed version, or a record
    the buffered writes touch changed since the suspension (spec 004 §过时的挂起项)."""
    payload = row.payload or {}
    if int(payload.get("playerTurns", 0)) != session.completed_player_turns:
        raise SuspensionOutdated("session-moved-on")
    if payload.get("pluginVersion") != plugin_version:
        raise SuspensionOutdated("plugin-updated")
    touched = payload.get("touched") or {}
    if touched and records_content(session.pk, list(touched)) != touched:
        raise SuspensionOutdated("data-changed")


def suspension_expired(row: Any) -> bool:
    """Whether ``row`` waited past its expiry (payload.expiresAt)."""
    expires = (row.payload or {}).get("expiresAt")
    if not expires:
        return False
    from datetime import datetime

    try:
        return datetime.fromisoformat(expires) <= timezone.now()
    except ValueError:
        return False


def logical_turn_waiting(session: Any, payload: dict[str, Any], *, exclude_pk: Any = None) -> bool:
    """Whether another suspension of the same logical turn still waits (pending or being resumed)."""
    from turns.models import Suspension

    others = Suspension.objects.filter(session=session, status__in=(STATUS_PENDING, STATUS_RESUMING))
    if exclude_pk is not None:
        others = others.exclude(pk=exclude_pk)
    return any((o.payload or {}).get("logicalTurnId") == payload.get("logicalTurnId") for o in others)


def held_jobs_release(session: Any, payload: dict[str, Any]) -> list[NewEvent]:
    """Stage the detached jobs the logical turn held (inside the transaction that ends it; the
    jobs are queued after its commit). Returns their ``runtime.deferred`` / ``job-status.updated``
    events. Nothing when the row held none."""
    jobs = payload.get("heldJobs") or []
    if not jobs:
        return []
    from turns.engine import ports

    return list(ports.runtime_jobs_stage(session=session, jobs=json_copy(jobs)) or [])


def progress_cancelled_event(row: Any) -> NewEvent | None:
    """``job-status.updated`` ``{jobId, kind: progress, runtimeId, pluginId, status: cancelled}``
    for the ctx.progress job a suspended function runtime left ``waiting-input``; None without one."""
    job_id = ((row.payload or {}).get("continuation") or {}).get("progressJobId")
    if not job_id:
        return None
    return NewEvent(type="job-status.updated", topic="job", turn_id=row.turn_id, payload={
        "jobId": job_id, "kind": "progress", "runtimeId": row.runtime_id, "pluginId": row.plugin_id, "status": "cancelled"})


def _setup_attempt_failed(session: Any, row: Any) -> None:
    """An abandoned setup suspension: its attempt counts as failed — pending again, blocked once
    maxTriggerCount attempts ended (spec 004 §Setup runtime 控制). Saved on the locked session."""
    from plugins_app.registry import plugin_registry
    from turns.engine.runtime import STATUS_FAILED
    from turns.engine.setup import setup_states_settle

    payload = row.payload or {}
    record = plugin_registry().get(row.plugin_id)
    runtime = next((r for r in getattr(getattr(record, "manifest", None), "runtimes", None) or [] if r.id == row.runtime_id), None)
    limit = getattr(getattr(runtime, "trigger", None), "max_trigger_count", None)
    failed = RuntimeResult(runtime_id=row.runtime_id, plugin_id=row.plugin_id, stage="setup", status=STATUS_FAILED,
                           error={"code": "suspension_abandoned", "message": "the player's answer was abandoned"})
    session.setup_runtimes = setup_states_settle(session.setup_runtimes or {}, [failed], max_trigger_counts={row.runtime_id: limit},
                                                 plugin_versions={row.plugin_id: payload.get("pluginVersion")}, committed=True)
    session.save(update_fields=["setup_runtimes", "updated_at"])


def _superseded_finish(session: Any, row: Any) -> list[NewEvent]:
    """The runtime suspended again in another execution: its older pending row is voided like an
    abandonment without an event of its own (spec 004 §过时的挂起项): marked abandoned, its progress
    job cancelled, and the jobs it held staged when no other row of its logical turn waits. The
    player-turn count and the setup state are left to the new execution that replaced it."""
    payload = row.payload or {}
    row.status = STATUS_ABANDONED
    row.resolved_at = timezone.now()
    row.save(update_fields=["status", "resolved_at"])
    events: list[NewEvent] = []
    cancelled = progress_cancelled_event(row)
    if cancelled is not None:
        events.append(cancelled)
    if not logical_turn_waiting(session, payload):
        events.extend(held_jobs_release(session, payload))
    return events


def abandon_in_transaction(session: Any, row: Any) -> bool:
    """Abandon ``row`` (inside a transaction holding the locked session; DELETE, expiry and
    suspension_outdated all end here — spec 004 §挂起与回合计数): delete it, end its ctx.progress job
    ``cancelled``, count a setup runtime's attempt as failed, and, when it was the last suspension
    its logical turn waited on, finish that turn: count the player turn (when the turn would have
    counted and the session did not move on) and stage the detached jobs it held. Its events are
    appended in the same transaction. Returns whether the turn was counted."""
    from turns.events import session_events_append

    payload = row.payload or {}
    row.delete()
    events: list[NewEvent] = []
    cancelled = progress_cancelled_event(row)
    if cancelled is not None:
        events.append(cancelled)
    if payload.get("stage") == "setup":
        _setup_attempt_failed(session, row)
    counted = False
    if not logical_turn_waiting(session, payload):
        events.extend(held_jobs_release(session, payload))
        if payload.get("countPolicy") and int(payload.get("playerTurns", -1)) == session.completed_player_turns:
            session.completed_player_turns += 1
            session.save(update_fields=["completed_player_turns", "updated_at"])
            counted = True
    session_events_append(str(session.pk), events)
    return counted


