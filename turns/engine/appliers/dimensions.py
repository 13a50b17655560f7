"""dimension.initialize / dimension.update (DimensionValue rows, ``dimensions.changed``).
Updates are compare-and-set: an ``expectedVersion`` that is not the row's version rejects the
whole proposal (code "conflict").

Settlement receipts (turns.engine.settlements; spec 004 §维度编辑与待结算恢复): a dimension.update
that carries ``source: {resultId, turnNumber}`` is an automatic settlement (the tracker). It writes
the source's receipt in the same transaction: ``settled`` / ``no-change``, or — when a version no
longer matches (a concurrent edit) — ``pending-settlement`` with the error and the current
versions, applying no value and refusing nothing (the narrative stays committed). A receipt
already terminal is never settled again. A dimension.update with ``settlement: {resultId,
resolution: manual|skipped}`` (the editor runtime) resolves a pending receipt; its version
conflict rejects it with code ``dimension-version-conflict``."""

from __future__ import annotations

import copy

from plugins_app.models import PluginData
from sessions.models import DimensionValue
from turns.engine import settlements as S
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.appliers.plugin_data import apply_plugin_data, plugin_data_flush, plugin_data_forget, plugin_data_rows_get
from plugins_app.toolkit import proposals as P
from plugins_app.toolkit.proposals import Proposal

DIMENSIONS_CHANGED = "dimensions.changed"
#: The author's dimension declarations changed (spec 004 §SSE 协议); current values are kept.
WORLD_DIMENSIONS_CHANGED = "world.dimensions.changed"
TOPIC_SESSION = "session"


def apply_dimension_initialize(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    values = p.get("values") or {}
    changed, redeclared = {}, {}
    for dim_id, definition in p["definitions"].items():
        definition = definition if isinstance(definition, dict) else {}
        value = values.get(dim_id, definition.get("initialValue"))
        row, created = DimensionValue.objects.get_or_create(
            session=ctx.session, dimension_id=dim_id, defaults={"definition": copy.deepcopy(definition), "value": value, "version": 1})
        rows = getattr(ctx, _ROWS_ATTR, None)
        if rows is not None:
            rows.pop(dim_id, None)  # read again, locked, by a later update of this commit
        if not created and row.definition != definition:
            # The author's declaration changed (hot update): the current value and version stay.
            row.definition = copy.deepcopy(definition)
            row.save(update_fields=["definition", "updated_at"])
            redeclared[dim_id] = _public_definition(definition)
        changed[dim_id] = {"value": row.value, "version": row.version}
    ctx.event(DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "snapshot": changed})
    if redeclared:
        ctx.event(WORLD_DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "dimensions": redeclared})


def _public_definition(definition: dict) -> dict:
    """What world.dimensions.changed shows of a declaration: name, description, schema (never the
    rule or the initial value)."""
    return {k: copy.deepcopy(definition[k]) for k in ("name", "description", "schema") if k in definition}


def _receipt_current(ctx: CommitContext, plugin_id: str, result_id: str) -> dict | None:
    # Through the commit's plugin-data cache: the receipt's write below finds the row there.
    row = plugin_data_rows_get(ctx, plugin_id, [(S.SETTLEMENTS_NAMESPACE, result_id)])[
        (plugin_id, S.SETTLEMENTS_NAMESPACE, result_id)]
    return row.value if row is not None and isinstance(row.value, dict) else None


def dimension_receipt_keys(proposals: list[Proposal]) -> list[tuple[str, str, str]]:
    """(plugin, namespace, key) of the settlement receipts the dimension.update proposals of
    ``proposals`` read: for the commit's one plugin-data prefetch (plugin_data_prefetch)."""
    keys = []
    for proposal in proposals:
        payload = proposal.payload if isinstance(proposal.payload, dict) else {}
        if proposal.kind != P.DIMENSION_UPDATE or not proposal.plugin_id:
            continue
        for name in ("settlement", "source"):
            ref = payload.get(name)
            if isinstance(ref, dict) and ref.get("resultId"):
                keys.append((proposal.plugin_id, S.SETTLEMENTS_NAMESPACE, str(ref["resultId"])))
                break
    return keys


def _receipt_write(ctx: CommitContext, proposal: Proposal, previous: dict | None, value: dict) -> dict:
    value = {**value, "version": int((previous or {}).get("version") or 0) + 1}
    value.setdefault("sourceTurnId", (previous or {}).get("sourceTurnId") or ctx.turn_id)
    apply_plugin_data(ctx, Proposal(P.PLUGIN_DATA, {"namespace": S.SETTLEMENTS_NAMESPACE, "key": value["resultId"],
                                                    "value": value}, plugin_id=proposal.plugin_id,
                                    runtime_id=proposal.runtime_id))
    if value.get("status") != S.STATUS_PENDING:
        _resolved_receipts_prune(ctx, proposal.plugin_id)
    return value


def _resolved_receipts_prune(ctx: CommitContext, plugin_id: str) -> None:
    """Delete the provider's resolved receipts beyond the newest ``RESOLVED_RECEIPTS_KEPT`` (one
    statement; housekeeping, so no plugin-data.changed event: nothing reads an old resolved receipt)."""
    from django.db import connection

    plugin_data_flush(ctx)  # the prune reads the rows: the receipts this commit wrote must be there
    # Plain SQL: this runs in most turns, and the ORM's compilation of the JSON-key exclusion and
    # the sliced subquery cost more than the statement (issue 18 profile).
    table = PluginData._meta.db_table
    if connection.vendor == "postgresql":
        status, beyond = "COALESCE(value->>'status', '')", "OFFSET %s"
    else:
        status, beyond = "COALESCE(json_extract(value, '$.status'), '')", "LIMIT -1 OFFSET %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f'DELETE FROM "{table}" WHERE id IN (SELECT id FROM "{table}" WHERE session_id = %s AND plugin_id = %s '
            f'AND namespace = %s AND {status} <> %s ORDER BY id DESC {beyond})',
            [ctx.session.pk, plugin_id, S.SETTLEMENTS_NAMESPACE, S.STATUS_PENDING, S.RESOLVED_RECEIPTS_KEPT])
        pruned = cursor.rowcount
    if pruned:
        plugin_data_forget(ctx)  # the commit's row cache may hold a pruned row


_ROWS_ATTR = "dimension_rows"  # CommitContext attribute: {dimension id: locked DimensionValue row}


def _rows_locked(ctx: CommitContext, ids: list[str]) -> dict[str, DimensionValue]:
    """The DimensionValue rows of ``ids`` that exist, locked (SELECT … FOR UPDATE), from the
    commit's cache, the rest in one query. Appliers update the cached rows in place, so a later
    read in the same commit sees its own writes."""
    cache = getattr(ctx, _ROWS_ATTR, None)
    if cache is None:
        cache = {}
        setattr(ctx, _ROWS_ATTR, cache)
    missing = [i for i in dict.fromkeys(ids) if i not in cache]
    if missing:
        for row in DimensionValue.objects.select_for_update().filter(session=ctx.session, dimension_id__in=missing):
            cache[row.dimension_id] = row
    return {i: cache[i] for i in ids if i in cache}


def _conflicts(ctx: CommitContext, updates: list[dict]) -> tuple[dict, dict]:
    """(rows by id, {id: current version} of the updates whose expectedVersion no longer holds)."""
    rows, stale = {}, {}
    found = _rows_locked(ctx, [u["id"] for u in updates])
    for update in updates:
        row = found.get(update["id"])
        if row is None:
            raise ProposalRejected("not-found", f"dimension {update['id']!r} does not exist")
        rows[update["id"]] = row
        if "expectedVersion" in update and update["expectedVersion"] != row.version:
            stale[update["id"]] = row.version
    return rows, stale


def apply_dimension_update(ctx: CommitContext, proposal: Proposal) -> None:
    payload = proposal.payload
    source = payload.get("source") if isinstance(payload.get("source"), dict) else None
    settlement = payload.get("settlement") if isinstance(payload.get("settlement"), dict) else None
    if settlement is None and (source is None or not source.get("resultId")):
        if payload.get("origin") == "editor":
            _rows, stale = _conflicts(ctx, payload["updates"])
            if stale:
                raise ProposalRejected(S.VERSION_CONFLICT, f"{S.VERSION_CONFLICT}: dimension versions changed: {stale}")
        _values_apply(ctx, proposal, payload["updates"])
        return
    result_id = str((settlement or source)["resultId"])
    previous = _receipt_current(ctx, proposal.plugin_id, result_id)
    updates = payload["updates"]
    if settlement is not None:
        resolution = settlement.get("resolution")
        if resolution not in S.RESOLUTIONS:
            raise ProposalRejected("invalid-input", "settlement.resolution is manual or skipped")
        if previous is None or previous.get("status") != S.STATUS_PENDING:
            raise ProposalRejected("settlement-not-pending", f"source {result_id} has no pending settlement")
        _rows, stale = _conflicts(ctx, updates)
        if stale:
            raise ProposalRejected(S.VERSION_CONFLICT, f"{S.VERSION_CONFLICT}: dimension versions changed: {stale}")
        changed = _values_apply(ctx, proposal, updates, announce=False)
        receipt = _receipt_write(ctx, proposal, previous, {
            **{k: v for k, v in previous.items() if k not in ("error", "version")}, "status": resolution,
            "updateCount": len(updates)})
    else:
        if previous is not None and previous.get("status") in S.TERMINAL_STATUSES:
            return  # an ended source is never settled again
        _rows, stale = _conflicts(ctx, updates)
        base = {"resultId": result_id, "turn": source.get("turnNumber"), "updateCount": len(updates),
                "expectedVersions": {u["id"]: u["expectedVersion"] for u in updates if "expectedVersion" in u}}
        if stale:
            current = {u["id"]: _rows[u["id"]].version for u in updates}
            receipt = _receipt_write(ctx, proposal, previous, {**base, "status": S.STATUS_PENDING, "error": {
                "code": S.VERSION_CONFLICT, "message": "a dimension changed after this turn read it; the settlement was "
                "not applied", "currentVersions": current}})
            ctx.event(S.SETTLEMENT_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id,
                                                            "settlement": S.receipt_summary(receipt)})
            return
        changed = _values_apply(ctx, proposal, updates, announce=False)
        receipt = _receipt_write(ctx, proposal, previous, {**base, "status": S.STATUS_SETTLED if updates else S.STATUS_NO_CHANGE})
    summary = S.receipt_summary(receipt)
    if changed:
        ctx.event(DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "snapshot": changed,
                                                      "settlement": summary})
    else:
        ctx.event(S.SETTLEMENT_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "settlement": summary})


def _values_apply(ctx: CommitContext, proposal: Proposal, updates: list[dict], *, announce: bool = True) -> dict:
    changed = {}
    found = _rows_locked(ctx, [u["id"] for u in updates])
    for update in updates:
        row = found.get(update["id"])
        if row is None:
            raise ProposalRejected("not-found", f"dimension {update['id']!r} does not exist")
        if "expectedVersion" in update and update["expectedVersion"] != row.version:
            raise ProposalRejected("conflict", f"dimension {update['id']!r} is at version {row.version}, not {update['expectedVersion']}")
        row.value = copy.deepcopy(update["value"])
        row.version += 1
        row.save(update_fields=["value", "version", "updated_at"])
        changed[row.dimension_id] = {"value": row.value, "version": row.version}
    if announce:
        ctx.event(DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "snapshot": changed})
    return changed
