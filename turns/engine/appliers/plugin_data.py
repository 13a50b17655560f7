"""plugin.data / plugin.data.batch / plugin.data.delete / plugin.data.update (PluginData rows,
``plugin-data.changed``). Rows are keyed by the proposal's source plugin; namespaces starting
with ``_`` are reserved for the framework and values are at most 256 KiB of JSON.

Reads are batched per commit: ``plugin_data_prefetch`` (called by the commit chain before the
runtimes are applied) loads every row the commit's plugin-data proposals name in one query into
a cache on the CommitContext; appliers read and update that cache instead of selecting each key,
and fall back to the database for a key it does not know. The commit chain drops the cache
(``plugin_data_forget``) when part of a commit is rolled back, since it may then hold rows that
no longer exist.

Writes are held back too (issue 18: a full-game turn wrote its rows one statement each): the
appliers change the cached rows and note them as pending; ``plugin_data_flush`` writes every
pending change of the commit with one DELETE, one multi-row INSERT and one UPDATE executemany at most. The
commit chain flushes after the runtimes are applied, and anything that reads plugin-data rows
from the database inside the commit (the settlement prune) flushes first. A key created and
deleted in the same commit never reaches the database.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone

from covel.sqlrows import rows_delete, rows_insert, rows_update
from plugins_app.models import PLUGIN_DATA_VALUE_MAX_BYTES, PluginData
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.tools.dataops import DataOpError, apply_data_ops
from plugins_app.toolkit.proposals import Proposal

PLUGIN_DATA_CHANGED = "plugin-data.changed"
TOPIC_PLUGIN_DATA = "plugin-data"
#: A plugin may write its own hidden bucket (``_hidden.<ns>``, never shown to players: spec 004
#: §插件数据), e.g. story-events' planned events next to the hidden world data it received.
HIDDEN_PREFIX = "_hidden."


def _check(plugin_id: str | None, namespace: str, value: Any = None, *, has_value: bool = False) -> str:
    if not plugin_id:
        raise ProposalRejected("proposal-invalid", "plugin data proposals need a source plugin")
    if namespace.startswith("_") and not namespace.startswith(HIDDEN_PREFIX):
        raise ProposalRejected("reserved-namespace", f"namespace {namespace!r} is reserved for the framework")
    if has_value and len(json.dumps(value, ensure_ascii=False).encode("utf-8")) > PLUGIN_DATA_VALUE_MAX_BYTES:
        raise ProposalRejected("too-large", f"value of {namespace} is larger than {PLUGIN_DATA_VALUE_MAX_BYTES} bytes")
    return plugin_id


_CACHE_ATTR = "plugin_data_rows"  # CommitContext attribute: {(plugin, ns, key): PluginData | None}
_KINDS = frozenset({"plugin.data", "plugin.data.batch", "plugin.data.delete", "plugin.data.update"})

Key = tuple[str, str, str]


def plugin_data_prefetch(ctx: CommitContext, proposals: list[Proposal], extra: list[Key] = ()) -> None:
    """Load, in one query, the PluginData rows every plugin-data proposal of ``proposals`` names
    (raw payloads; malformed entries are skipped and later read one by one), and the ``extra``
    (plugin, namespace, key) rows other appliers will read, into ctx's cache."""
    keys: set[Key] = set(extra)
    for proposal in proposals:
        if proposal.kind not in _KINDS or not proposal.plugin_id or not isinstance(proposal.payload, dict):
            continue
        entries = proposal.payload.get("entries") if proposal.kind == "plugin.data.batch" else [proposal.payload]
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("namespace"), str) and isinstance(entry.get("key"), str):
                keys.add((proposal.plugin_id, entry["namespace"], entry["key"]))
    cache: dict[Key, PluginData | None] = dict.fromkeys(keys)
    if keys:
        for row in _rows_matching(ctx, keys):
            cache[(row.plugin_id, row.namespace, row.key)] = row
    setattr(ctx, _CACHE_ATTR, cache)


def _rows_matching(ctx: CommitContext, keys: set[Key]) -> list[PluginData]:
    """The session's PluginData rows of ``keys``: read by three IN lists (a superset: the product
    of the plugins, namespaces and keys named) and kept when their own triple is asked for. An OR
    of one (plugin, namespace, key) clause per key cost Django more to build than the query to run."""
    rows = PluginData.objects.filter(session=ctx.session, plugin_id__in={k[0] for k in keys},
                                     namespace__in={k[1] for k in keys}, key__in={k[2] for k in keys})
    return [row for row in rows if (row.plugin_id, row.namespace, row.key) in keys]


def plugin_data_forget(ctx: CommitContext) -> None:
    """Drop ctx's row cache and its unwritten changes (after a savepoint rollback); later reads go
    to the database."""
    setattr(ctx, _CACHE_ATTR, None)
    setattr(ctx, _PENDING_ATTR, None)


def plugin_data_rows_get(ctx: CommitContext, plugin_id: str, keys: list[tuple[str, str]]) -> dict[Key, PluginData | None]:
    """Current rows of ``keys`` ((namespace, key) pairs) of ``plugin_id``, as {(plugin, namespace,
    key): row or None}: from the commit's cache, the rest in one query (and then cached)."""
    cache = getattr(ctx, _CACHE_ATTR, None)
    out: dict[Key, PluginData | None] = {}
    missing: list[Key] = []
    for namespace, key in keys:
        full = (plugin_id, namespace, key)
        if cache is not None and full in cache:
            out[full] = cache[full]
        else:
            missing.append(full)
    if missing:
        out.update(dict.fromkeys(missing))
        for row in _rows_matching(ctx, set(missing)):
            out[(plugin_id, row.namespace, row.key)] = row
        if cache is None:
            cache = {}
            setattr(ctx, _CACHE_ATTR, cache)
        cache.update((full, out[full]) for full in missing)
    return out


_PENDING_ATTR = "plugin_data_pending"  # CommitContext attribute: _Pending


class _Pending:
    """The commit's unwritten plugin-data changes: new rows and changed rows by key (in the order
    first touched), and the ids of stored rows to delete."""

    def __init__(self) -> None:
        self.creates: dict[Key, PluginData] = {}
        self.updates: dict[Key, PluginData] = {}
        self.deletes: list[int] = []


def _pending(ctx: CommitContext) -> _Pending:
    pending = getattr(ctx, _PENDING_ATTR, None)
    if pending is None:
        pending = _Pending()
        setattr(ctx, _PENDING_ATTR, pending)
    return pending


def plugin_data_flush(ctx: CommitContext) -> None:
    """Write ctx's pending plugin-data changes in the caller's transaction: one DELETE, one
    multi-row INSERT, one UPDATE executemany at most (in that order, so a key deleted and created again in the
    same commit does not meet its old row). Call before reading plugin-data rows from the database
    inside the commit, and before the commit ends (the commit chain does)."""
    pending = getattr(ctx, _PENDING_ATTR, None)
    if pending is None:
        return
    setattr(ctx, _PENDING_ATTR, None)
    # Plain statements (covel.sqlrows): Django's bulk_update builds a CASE WHEN per field and row
    # in Python, the largest cost of this flush in the issue 18 profile.
    rows_delete(PluginData, pending.deletes)
    if pending.creates:
        rows_insert(PluginData, ("session", "plugin_id", "namespace", "key", "value", "version", "created_at", "updated_at"),
                    [(ctx.session.pk, row.plugin_id, row.namespace, row.key, row.value, row.version, row.created_at,
                      row.updated_at) for row in pending.creates.values()])
        cache = getattr(ctx, _CACHE_ATTR, None)
        if cache is not None:
            for full in pending.creates:
                cache.pop(full, None)  # no id came back: a later write in this commit reads the row
    rows_update(PluginData, ("value", "version", "updated_at"),
                [(row.value, row.version, row.updated_at, row.pk) for row in pending.updates.values()])


def _remember(ctx: CommitContext, full: Key, row: PluginData | None) -> None:
    cache = getattr(ctx, _CACHE_ATTR, None)
    if cache is None:
        cache = {}
        setattr(ctx, _CACHE_ATTR, cache)
    cache[full] = row


def _write(ctx: CommitContext, plugin_id: str, namespace: str, key: str, value: Any) -> dict[str, Any]:
    full = (plugin_id, namespace, key)
    row = plugin_data_rows_get(ctx, plugin_id, [(namespace, key)])[full]
    pending = _pending(ctx)
    now = timezone.now()
    if row is None:
        row = PluginData(session=ctx.session, plugin_id=plugin_id, namespace=namespace, key=key, value=value,
                         created_at=now, updated_at=now)
        pending.creates[full] = row
    else:
        row.value = value
        row.version += 1
        row.updated_at = now
        if full not in pending.creates:
            pending.updates[full] = row
    _remember(ctx, full, row)
    return {"namespace": namespace, "key": key, "op": "set", "version": row.version}


def _delete(ctx: CommitContext, plugin_id: str, namespace: str, key: str) -> dict[str, Any]:
    full = (plugin_id, namespace, key)
    row = plugin_data_rows_get(ctx, plugin_id, [(namespace, key)])[full]
    if row is not None:
        pending = _pending(ctx)
        if pending.creates.pop(full, None) is None:
            pending.updates.pop(full, None)
            pending.deletes.append(row.pk)
    _remember(ctx, full, None)
    return {"namespace": namespace, "key": key, "op": "delete"}


def _changed(ctx: CommitContext, plugin_id: str, changes: list[dict[str, Any]]) -> None:
    if changes:
        ctx.event(PLUGIN_DATA_CHANGED, TOPIC_PLUGIN_DATA, {"pluginId": plugin_id, "changes": changes})


def apply_plugin_data(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    plugin_id = _check(proposal.plugin_id, p["namespace"], p["value"], has_value=True)
    _changed(ctx, plugin_id, [_write(ctx, plugin_id, p["namespace"], p["key"], p["value"])])


def apply_plugin_data_batch(ctx: CommitContext, proposal: Proposal) -> None:
    entries = proposal.payload["entries"]
    plugin_id = proposal.plugin_id or ""
    for entry in entries:
        plugin_id = _check(proposal.plugin_id, entry["namespace"], entry.get("value"), has_value=not entry.get("delete"))
    plugin_data_rows_get(ctx, plugin_id, [(e["namespace"], e["key"]) for e in entries])  # one read for the rest
    # Entries apply in order (a key written more than once ends as its last entry says); the
    # rows reach the database with the commit's other changes (plugin_data_flush).
    changes = []
    for entry in entries:
        if entry.get("delete"):
            changes.append(_delete(ctx, plugin_id, entry["namespace"], entry["key"]))
        else:
            changes.append(_write(ctx, plugin_id, entry["namespace"], entry["key"], entry.get("value")))
    _changed(ctx, plugin_id, changes)


def apply_plugin_data_delete(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    plugin_id = _check(proposal.plugin_id, p["namespace"])
    _changed(ctx, plugin_id, [_delete(ctx, plugin_id, p["namespace"], p["key"])])


def apply_plugin_data_update(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    plugin_id = _check(proposal.plugin_id, p["namespace"])
    row = plugin_data_rows_get(ctx, plugin_id, [(p["namespace"], p["key"])])[(plugin_id, p["namespace"], p["key"])]
    try:
        exists, value = apply_data_ops(row is not None, row.value if row else None, p["ops"])
    except DataOpError as exc:
        raise ProposalRejected("conflict", f"plugin.data.update {p['namespace']}/{p['key']}: {exc}") from None
    if exists:
        _check(plugin_id, p["namespace"], value, has_value=True)
        change = _write(ctx, plugin_id, p["namespace"], p["key"], value)
    else:
        change = _delete(ctx, plugin_id, p["namespace"], p["key"])
    _changed(ctx, plugin_id, [change])
