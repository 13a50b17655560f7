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
                         plugin_versions: dict[str, str | None]):
    """The CommitPlan ``in_transaction`` hook that saves the turn's suspended results: one row each,
    the older pending suspension of the same runtime abandoned in the same transaction (no event),
    and a ``turn.suspended`` NewEvent per row. Returns None when nothing suspended."""
    suspended = [r for r in results if r.status == STATUS_SUSPENDED and r.suspension is not None]
    if not suspended:
        return None

    def hook(session) -> list[NewEvent]:
        from turns.models import Suspension

        events = []
        expires = timezone.now() + timedelta(seconds=ttl_seconds())
        for result in suspended:
            Suspension.objects.filter(session=session, runtime_id=result.runtime_id,
                                      status__in=(STATUS_PENDING,)).update(status=STATUS_ABANDONED, resolved_at=timezone.now())
            suspension_id = f"susp_{uuid.uuid4().hex[:16]}"
            payload = {
                "continuation": result.suspension["continuation"],
                "proposals": [proposal_to_json(p) for p in result.proposals],
                "logicalTurn": turn.logical_turn, "logicalTurnId": turn.turn_id, "countPolicy": count_policy,
                "playerTurns": player_turns, "pluginVersion": plugin_versions.get(result.plugin_id),
                "turnKind": turn.kind, "stage": result.stage, "reason": result.suspension["reason"],
                "touched": records_content(session.pk, touched_keys(result.proposals)),
                "expiresAt": expires.isoformat(),
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


def abandon_in_transaction(session: Any, row: Any) -> bool:
    """Abandon ``row`` (inside a transaction holding the locked session): delete it and, when it
    was the last suspension its logical turn waited on and that turn would have counted, count the
    player turn. Returns whether the turn was counted."""
    from turns.models import Suspension

    payload = row.payload or {}
    row.delete()
    others = Suspension.objects.filter(session=session, status__in=(STATUS_PENDING, STATUS_RESUMING))
    waiting = any((o.payload or {}).get("logicalTurnId") == payload.get("logicalTurnId") for o in others)
    if payload.get("countPolicy") and not waiting and int(payload.get("playerTurns", -1)) == session.completed_player_turns:
        session.completed_player_turns += 1
        session.save(update_fields=["completed_player_turns", "updated_at"])
        return True
    return False


