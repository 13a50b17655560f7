"""World data after session creation: the provenance ledger, preflight, sync-data, sync-dimensions
(spec 004 世界管理: POST /api/worlds/:id/world-data/preflight, /sync-data, /sync-dimensions).

The ledger (``sessions.models.WorldDataLedgerRow``, table ``world_data_import_ledger``) records every
record the importer wrote into a session with the SHA-256 of the value written (``value_hash``).
A sync only touches *managed* ledger rows of this world, decided by these rules:

plugin-data rows (``contract:<c>`` sources; per receiving namespace the rows of
``world_data_contracts.contract_source_rows`` — one per keyed item of a list source — the same rule as
session creation):

    planned, no ledger row      target absent → create; equal value → adopt; other value → conflict "unmanaged"
    planned, ledger row         target absent → conflict "missing"  (force: recreate)
                                target ≠ ledger hash → conflict "modified" (force: overwrite)
                                new value = ledger hash → unchanged; else replace
    not planned, ledger row     target = ledger hash (or force) → delete; else conflict "modified"

dimensions (the protected ``_dimensions`` records = DimensionValue rows; force never applies):

    same definition             unchanged: the evolved value is kept, initialValue not re-applied
    new dimension               created with its initialValue
    changed / removed           applied only while value and version are still the import baseline;
                                otherwise conflict "modified" (definition, value, version untouched)

Conflicting rows stay as they are and are listed; the other rows are applied. A dry run reads only.
Apply re-checks, under the session row lock, that the world, locale, active plugins and approval
scope (incarnation) are those the plan was made from (else 409 world_data_sync_plan_stale).
Events go out through ``world_event_emit`` (installed by the turns app; sessions imports no higher layer).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from django.db import transaction

from covel.errors import ApiError, SessionNotFound
from sessions.errors import DimensionProviderConflict, WorldDeleting, WorldNotFound
from sessions.models import DimensionValue, Session, WorldDataLedgerRow
from sessions.world_data_projections import CODE_PROJECTION_DEFERRED, ProjectionResult, projections_of, world_projections_run
from sessions.world_data_contracts import (CODE_DIMENSION_PROVIDER_MISSING, HIDDEN_NAMESPACE_PREFIX, TARGET_CONTRACT_PREFIX,
                                           _accepting_namespaces, _contract_sources, contract_source_rows,
                                           contract_sources_unreceived, world_dimensions_for)

DIMENSIONS_TARGET = "world:metadata.dimensions"
DIMENSIONS_SOURCE = "dimensions"
CODE_PLAN_STALE = "world_data_sync_plan_stale"

# ------------------------------------------------------------------------------ event port

WorldEventEmit = Callable[[str, str, str, dict], None]
_emit: WorldEventEmit | None = None


def world_event_emit_install(emit: WorldEventEmit) -> None:
    """Install ``emit(session_id, type, topic, payload)``: appends one session event in the caller's
    transaction (the turns app installs turns.events.session_events_append at start-up)."""
    global _emit
    _emit = emit


def world_event_emit(session_id: str, event_type: str, topic: str, payload: dict[str, Any]) -> None:
    """Append a session event through the installed port (no-op when none is installed)."""
    if _emit is not None:
        _emit(session_id, event_type, topic, payload)


def world_dimensions_changed_notify(world_id: str, *, reason: str) -> list[str]:
    """Tell every active session of ``world_id`` that the author's dimension definitions changed
    (event ``world.dimensions.changed``, payload ``{worldId, reason, updateAvailable: true}``).
    Values are not reset. Returns the session ids told."""
    told = []
    for session_id in Session.objects.filter(world_id=world_id, status=Session.STATUS_ACTIVE, deletion_state="") \
            .values_list("id", flat=True):
        with transaction.atomic():
            if Session.objects.select_for_update().filter(pk=session_id).exists():
                world_event_emit(session_id, "world.dimensions.changed", "state",
                                 {"worldId": world_id, "reason": reason, "updateAvailable": True})
                told.append(session_id)
    return told


# ------------------------------------------------------------------------------ plan


def value_hash(value: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``value`` (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


@dataclass
class PlanRow:
    """One record the importer would write. kind "plugin-data" | "dimension"; value: the record
    (for a dimension, its definition)."""

    kind: str
    target: str
    source_id: str
    key: str
    value: Any
    plugin_id: str = ""
    namespace: str = ""

    def target_out(self) -> dict[str, Any]:
        out = {"kind": self.kind, "target": self.target, "sourceId": self.source_id, "key": self.key}
        if self.plugin_id:
            out["pluginId"] = self.plugin_id
        if self.namespace:
            out["namespace"] = self.namespace
        return out

    @property
    def ident(self) -> tuple[str, str, str, str]:
        return self.kind, self.plugin_id, self.namespace, self.key


@dataclass
class Plan:
    rows: list[PlanRow] = field(default_factory=list)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    provider: str | None = None
    plugin_ids: list[str] = field(default_factory=list)
    #: (pluginId, namespace) of projections that failed this plan: their managed rows are kept.
    held: set[tuple[str, str]] = field(default_factory=set)




def plan_build(world, locale: str, plugin_ids: list[str], registry, *, projections: bool = False,
               projected: ProjectionResult | None = None) -> Plan:
    """The import plan of ``world`` (a sessions.catalog.ResolvedWorld) for ``plugin_ids``: dimensions
    from the world record, other data from the package's data/ (``world.content(locale)``).
    World projections (sessions.world_data_projections) are run only with ``projections`` (sync),
    or their rows taken from ``projected`` (creation, which already ran them); otherwise each one is
    a ``projection-deferred`` warning (spec 004 §preflight: 预检不会加载也不会执行 worldProjections handler).
    Raises 409 dimension_provider_conflict with more than one world.dimensions@1 provider."""
    from sessions.plugin_selection import dimension_providers

    providers = dimension_providers(registry, plugin_ids)
    if len(providers) > 1:
        raise DimensionProviderConflict(providers)
    plan = Plan(provider=providers[0] if providers else None, plugin_ids=list(plugin_ids))
    if world.dimensions:
        if plan.provider:
            plan.rows += [PlanRow("dimension", DIMENSIONS_TARGET, DIMENSIONS_SOURCE, dim_id, definition, plan.provider)
                          for dim_id, definition in world_dimensions_for(world, locale).items() if isinstance(definition, dict)]
        else:
            plan.diagnostics.append({"level": "warning", "code": CODE_DIMENSION_PROVIDER_MISSING, "sourceId": DIMENSIONS_SOURCE,
                                     "message": "no plugin of this set provides world.dimensions@1; dimensions are not imported"})
    data = world.content(locale).get("data") or {}
    for source in _contract_sources(world):
        value = data.get(source.get("id"))
        if value is None:
            continue
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):].split("+", 1)[0]  # "…@1+lorebook" too
        rows = contract_source_rows(source, value)  # one row per keyed record, as at creation
        hidden = source.get("visibility") == "hidden"  # the receiver's _hidden.<ns> bucket, as at creation
        for plugin_id in plugin_ids:
            for namespace in _accepting_namespaces(registry.get(plugin_id), contract):
                namespace = f"{HIDDEN_NAMESPACE_PREFIX}{namespace}" if hidden else namespace
                plan.rows += [PlanRow("plugin-data", source["target"], str(source.get("id")), key, record, plugin_id, namespace)
                              for key, record in rows]
            if projections or projected is not None:
                continue
            for projection_id, _decl in projections_of(registry.get(plugin_id), contract):
                plan.diagnostics.append({"level": "warning", "code": CODE_PROJECTION_DEFERRED, "sourceId": source.get("id"),
                                         "pluginId": plugin_id, "projectionId": projection_id,
                                         "message": f"{plugin_id} projection {projection_id} runs when the data is imported, not in this plan"})
    if projections and projected is None:
        projected = world_projections_run(_contract_sources(world), data, registry, plugin_ids)
        plan.diagnostics += projected.notices
    if projected is not None:
        plan.rows += [PlanRow("plugin-data", e.target, e.source_id, e.key, e.record, e.plugin_id, e.namespace)
                      for e in dict(((e.plugin_id, e.namespace, e.key), e) for e in projected.entries).values()]
        plan.held |= projected.held
    for notice in contract_sources_unreceived(world.metadata, registry, plugin_ids):
        plan.diagnostics.append({"level": "warning", **{k: v for k, v in notice.items() if k != "contract"}})
    return plan


def _world_for(world_id: str):
    from sessions.catalog import world_resolve

    world = world_resolve(world_id)
    if world is None:
        raise WorldNotFound(world_id)
    return world


def _session_of_world(world_id: str, session_id: Any) -> Session:
    if not isinstance(session_id, str) or not session_id:
        raise ApiError(400, "invalid_request", "sessionId (string) is required")
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        raise SessionNotFound(session_id)
    if session.world_id != world_id:
        raise ApiError(400, "invalid_request", "The session does not belong to this world")
    return session


def world_data_preflight(*, world_id: str, payload: Any, registry) -> dict[str, Any]:
    """POST /api/worlds/:id/world-data/preflight: the plan, written nowhere.

    payload: ``{sessionId}`` (that session's activePlugins; ``plugins`` ignored) or ``{plugins: [...]}``.
    Returns ``{imported, planned, diagnostics, targets}``. 400 bad body, 404 world / session,
    409 dimension_provider_conflict.
    """
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_request", "Body must be an object")
    world = _world_for(world_id)
    if payload.get("sessionId") is not None:
        session = _session_of_world(world_id, payload.get("sessionId"))
        plugin_ids, locale = list(session.active_plugins or []), session.locale
    else:
        plugins = payload.get("plugins")
        if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
            raise ApiError(400, "invalid_request", "Give sessionId or plugins (a list of plugin ids)")
        plugin_ids = [p for p in dict.fromkeys(plugins) if registry.get(p) is not None]
        unknown = [p for p in plugins if registry.get(p) is None]
        locale = payload.get("locale") if isinstance(payload.get("locale"), str) else world.default_locale
    plan = plan_build(world, locale, plugin_ids, registry)
    diagnostics = list(plan.diagnostics)
    if payload.get("sessionId") is None:
        diagnostics += [{"level": "warning", "code": "unknown-plugin", "message": f"plugin {p} is not installed"} for p in unknown]
    return {"imported": not any(d["level"] == "error" for d in diagnostics), "planned": len(plan.rows),
            "diagnostics": diagnostics, "targets": [r.target_out() for r in plan.rows]}


# ------------------------------------------------------------------------------ sync


@dataclass
class _Outcome:
    upserts: list[tuple[PlanRow, Any]] = field(default_factory=list)  # (row, existing target or None)
    deletes: list[WorldDataLedgerRow] = field(default_factory=list)
    adopts: list[PlanRow] = field(default_factory=list)
    unchanged: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def _conflict(kind: str, target: str, key: str, source_id: str, reason: str, plugin_id: str = "") -> dict[str, Any]:
    out = {"target": target, "key": key, "sourceId": source_id, "reason": reason}
    if plugin_id:
        out["pluginId"] = plugin_id
    if kind == "dimension":
        out["kind"] = "dimension"
    return out


def _compute(session: Session, world_id: str, plan: Plan, *, force: bool, dimensions_only: bool) -> _Outcome:
    from plugins_app.models import PluginData

    out = _Outcome()
    ledger = {(r.kind, r.plugin_id, r.namespace, r.key): r for r in
              WorldDataLedgerRow.objects.filter(session=session, world_id=world_id, managed=True)}
    dims = {d.dimension_id: d for d in DimensionValue.objects.filter(session=session)}
    planned: set[tuple[str, str, str, str]] = set()
    for row in plan.rows:
        if dimensions_only and row.kind != "dimension":
            continue
        planned.add(row.ident)
        led = ledger.get(row.ident)
        if row.kind == "dimension":
            cur = dims.get(row.key)
            if cur is None:
                if led is None:
                    out.upserts.append((row, None))
                else:
                    out.conflicts.append(_conflict("dimension", row.target, row.key, row.source_id, "missing"))
            elif led is None:
                if value_hash(cur.definition) == value_hash(row.value):
                    out.unchanged += 1
                    out.adopts.append(row)
                else:
                    out.conflicts.append(_conflict("dimension", row.target, row.key, row.source_id, "unmanaged"))
            elif led.definition_hash == value_hash(row.value):
                out.unchanged += 1
            elif value_hash(cur.value) == led.value_hash and cur.version == led.version:
                out.upserts.append((row, cur))
            else:
                out.conflicts.append(_conflict("dimension", row.target, row.key, row.source_id, "modified"))
            continue
        cur = PluginData.objects.filter(session=session, plugin_id=row.plugin_id, namespace=row.namespace, key=row.key).first()
        if led is None:
            if cur is None:
                out.upserts.append((row, None))
            elif value_hash(cur.value) == value_hash(row.value):
                out.unchanged += 1
                out.adopts.append(row)
            else:
                out.conflicts.append(_conflict(row.kind, row.target, row.key, row.source_id, "unmanaged", row.plugin_id))
        elif cur is None:
            if force:
                out.upserts.append((row, None))
            else:
                out.conflicts.append(_conflict(row.kind, row.target, row.key, row.source_id, "missing", row.plugin_id))
        elif value_hash(cur.value) != led.value_hash and not force:
            out.conflicts.append(_conflict(row.kind, row.target, row.key, row.source_id, "modified", row.plugin_id))
        elif value_hash(row.value) == led.value_hash and value_hash(cur.value) == led.value_hash:
            out.unchanged += 1
        else:
            out.upserts.append((row, cur))
    for ident, led in ledger.items():
        if ident in planned:
            continue
        if led.kind == "dimension":
            if not plan.provider:
                continue  # no provider now: the dimension records stay as they are
            cur = dims.get(led.key)
            if cur is None or (value_hash(cur.value) == led.value_hash and cur.version == led.version):
                out.deletes.append(led)
            else:
                out.conflicts.append(_conflict("dimension", led.target, led.key, led.source_id, "modified"))
            continue
        if dimensions_only or led.plugin_id not in plan.plugin_ids:
            continue  # a receiver not enabled now keeps its managed data
        if (led.plugin_id, led.namespace) in plan.held:
            continue  # its projection failed this time: the old rows and their ledger stay
        cur = PluginData.objects.filter(session=session, plugin_id=led.plugin_id, namespace=led.namespace, key=led.key).first()
        if cur is None or force or value_hash(cur.value) == led.value_hash:
            out.deletes.append(led)
        else:
            out.conflicts.append(_conflict(led.kind, led.target, led.key, led.source_id, "modified", led.plugin_id))
    return out


def ledger_write(session: Session, world_id: str, row: PlanRow, value: Any, version: int = 0) -> None:
    """Record (or refresh) the ledger row of one imported record: ``value`` is what the target now holds."""
    WorldDataLedgerRow.objects.update_or_create(
        session=session, kind=row.kind, plugin_id=row.plugin_id, namespace=row.namespace, key=row.key,
        defaults={"world_id": world_id, "source_id": row.source_id, "target": row.target, "value_hash": value_hash(value),
                  "definition_hash": value_hash(row.value) if row.kind == "dimension" else "", "version": version,
                  "managed": True})


def _apply(session: Session, world_id: str, outcome: _Outcome) -> tuple[int, int]:
    from plugins_app.models import PluginData

    upserted = deleted = 0
    for row, cur in outcome.upserts:
        if row.kind == "dimension":
            initial = row.value.get("initialValue")
            if cur is None:
                cur = DimensionValue.objects.create(session=session, dimension_id=row.key, definition=row.value, value=initial, version=1)
            else:
                cur.definition, cur.value, cur.version = row.value, initial, cur.version + 1
                cur.save(update_fields=["definition", "value", "version", "updated_at"])
            ledger_write(session, world_id, row, cur.value, cur.version)
        else:
            PluginData.objects.update_or_create(session=session, plugin_id=row.plugin_id, namespace=row.namespace,
                                                key=row.key, defaults={"value": row.value})
            ledger_write(session, world_id, row, row.value)
        upserted += 1
    for row in outcome.adopts:
        if row.kind == "dimension":
            cur = DimensionValue.objects.get(session=session, dimension_id=row.key)
            ledger_write(session, world_id, row, cur.value, cur.version)
        else:
            ledger_write(session, world_id, row, row.value)
    for led in outcome.deletes:
        if led.kind == "dimension":
            deleted += DimensionValue.objects.filter(session=session, dimension_id=led.key).delete()[0]
        else:
            deleted += PluginData.objects.filter(session=session, plugin_id=led.plugin_id, namespace=led.namespace,
                                                 key=led.key).delete()[0]
        led.delete()
    return upserted, deleted


def _fingerprint(world, session: Session) -> str:
    meta = world.metadata or {}
    return value_hash([meta.get("dimensions"), meta.get("packageDigest"), (meta.get("worldData") or {}).get("sources"),
                       session.locale, list(session.active_plugins or []), session.incarnation, world.is_deleting])


def world_data_sync(*, world_id: str, payload: Any, registry, dimensions_only: bool = False) -> dict[str, Any]:
    """POST /api/worlds/:id/sync-data (``dimensions_only=False``: dryRun default true, force) and
    POST /api/worlds/:id/sync-dimensions (``dimensions_only=True``: always writes, no force).

    Returns ``{ok, imported, dryRun, diagnostics, planned, upserted, deleted, unchanged, conflicts,
    mediaRefs}``. Errors: 400 (no sessionId, not this world's session, bad dryRun/force), 404 world /
    session, 409 world_deleting, dimension_provider_conflict, world_data_sync_plan_stale,
    session_not_active (a write needs an active session).
    """
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_request", "Body must be an object")
    dry_run = False if dimensions_only else payload.get("dryRun", True)
    force = False if dimensions_only else payload.get("force", False)
    if not isinstance(dry_run, bool) or not isinstance(force, bool):
        raise ApiError(400, "invalid_request", "dryRun and force are booleans")
    session = _session_of_world(world_id, payload.get("sessionId"))
    world = _world_for(world_id)
    if world.is_deleting:
        raise WorldDeleting(world_id)
    # Reading sources and checking schemas happen outside the session lock; a dry run only reads.
    plan = plan_build(world, session.locale, list(session.active_plugins or []), registry, projections=not dimensions_only)
    fingerprint = _fingerprint(world, session)
    diagnostics = list(plan.diagnostics)
    if dimensions_only:
        diagnostics = [d for d in diagnostics if d.get("code") == CODE_DIMENSION_PROVIDER_MISSING]
    if dry_run:
        outcome = _compute(session, world_id, plan, force=force, dimensions_only=dimensions_only)
        upserted, deleted = len(outcome.upserts), len(outcome.deletes)
    else:
        if session.status != Session.STATUS_ACTIVE or session.deletion_state:
            raise ApiError(409, "session_not_active", "Writing world data needs an active session")
        with transaction.atomic():
            locked = Session.objects.select_for_update().filter(pk=session.pk).first()
            if locked is None:
                raise SessionNotFound(session.pk)
            again = _world_for(world_id)
            if _fingerprint(again, locked) != fingerprint:
                raise ApiError(409, CODE_PLAN_STALE, "The world, locale, plugins or approvals changed while the sync was planned")
            # Re-checked inside the write transaction: a concurrent write is never overwritten.
            outcome = _compute(locked, world_id, plan, force=force, dimensions_only=dimensions_only)
            upserted, deleted = _apply(locked, world_id, outcome)
            if upserted or deleted:
                kinds = {r.kind for r, _ in outcome.upserts} | {d.kind for d in outcome.deletes}
                if "dimension" in kinds:
                    world_event_emit(locked.pk, "dimensions.changed", "state", {"provider": plan.provider, "reason": "world-sync"})
                if "plugin-data" in kinds:
                    world_event_emit(locked.pk, "plugin-data.changed", "plugin-data", {"reason": "world-sync"})
    planned = len([r for r in plan.rows if not dimensions_only or r.kind == "dimension"])
    return {"ok": True, "imported": True, "dryRun": dry_run, "diagnostics": diagnostics, "planned": planned,
            "upserted": upserted, "deleted": deleted, "unchanged": outcome.unchanged, "conflicts": outcome.conflicts,
            "mediaRefs": []}


def ledger_record_creation(session: Session, world, plan_rows_for: list[str], registry,
                           projected: ProjectionResult | None = None) -> None:
    """Record what session creation (or a late receiver) imported: every planned row whose target
    now holds the planned value becomes a managed ledger row (``projected``: the rows the world
    projections produced in this delivery). Called in the creating transaction."""
    plan = plan_build(world, session.locale, plan_rows_for, registry, projected=projected)
    from plugins_app.models import PluginData

    for row in plan.rows:
        if row.kind == "dimension":
            cur = DimensionValue.objects.filter(session=session, dimension_id=row.key).first()
            if cur is not None and value_hash(cur.definition) == value_hash(row.value):
                ledger_write(session, world.id, row, cur.value, cur.version)
        else:
            cur = PluginData.objects.filter(session=session, plugin_id=row.plugin_id, namespace=row.namespace, key=row.key).first()
            if cur is not None and value_hash(cur.value) == value_hash(row.value):
                ledger_write(session, world.id, row, row.value)
