"""plugin.data / plugin.data.batch / plugin.data.delete / plugin.data.update (PluginData rows,
``plugin-data.changed``). Rows are keyed by the proposal's source plugin; namespaces starting
with ``_`` are reserved for the framework and values are at most 256 KiB of JSON."""

from __future__ import annotations

import json
from typing import Any

from plugins_app.models import PLUGIN_DATA_VALUE_MAX_BYTES, PluginData
from turns.engine.appliers import CommitContext, ProposalRejected
from turns.engine.tools.dataops import DataOpError, apply_data_ops
from turns.engine.tools.proposals import Proposal

PLUGIN_DATA_CHANGED = "plugin-data.changed"
TOPIC_PLUGIN_DATA = "plugin-data"


def _check(plugin_id: str | None, namespace: str, value: Any = None, *, has_value: bool = False) -> str:
    if not plugin_id:
        raise ProposalRejected("proposal-invalid", "plugin data proposals need a source plugin")
    if namespace.startswith("_"):
        raise ProposalRejected("reserved-namespace", f"namespace {namespace!r} is reserved for the framework")
    if has_value and len(json.dumps(value, ensure_ascii=False).encode("utf-8")) > PLUGIN_DATA_VALUE_MAX_BYTES:
        raise ProposalRejected("too-large", f"value of {namespace} is larger than {PLUGIN_DATA_VALUE_MAX_BYTES} bytes")
    return plugin_id


def _write(ctx: CommitContext, plugin_id: str, namespace: str, key: str, value: Any) -> dict[str, Any]:
    row = PluginData.objects.filter(session=ctx.session, plugin_id=plugin_id, namespace=namespace, key=key).first()
    if row is None:
        row = PluginData.objects.create(session=ctx.session, plugin_id=plugin_id, namespace=namespace, key=key, value=value)
    else:
        row.value = value
        row.version += 1
        row.save(update_fields=["value", "version", "updated_at"])
    return {"namespace": namespace, "key": key, "op": "set", "version": row.version}


def _delete(ctx: CommitContext, plugin_id: str, namespace: str, key: str) -> dict[str, Any]:
    PluginData.objects.filter(session=ctx.session, plugin_id=plugin_id, namespace=namespace, key=key).delete()
    return {"namespace": namespace, "key": key, "op": "delete"}


def _changed(ctx: CommitContext, plugin_id: str, changes: list[dict[str, Any]]) -> None:
    if changes:
        ctx.event(PLUGIN_DATA_CHANGED, TOPIC_PLUGIN_DATA, {"pluginId": plugin_id, "changes": changes})


def apply_plugin_data(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    plugin_id = _check(proposal.plugin_id, p["namespace"], p["value"], has_value=True)
    _changed(ctx, plugin_id, [_write(ctx, plugin_id, p["namespace"], p["key"], p["value"])])


def apply_plugin_data_batch(ctx: CommitContext, proposal: Proposal) -> None:
    changes = []
    plugin_id = proposal.plugin_id or ""
    for entry in proposal.payload["entries"]:
        plugin_id = _check(proposal.plugin_id, entry["namespace"], entry.get("value"), has_value=not entry.get("delete"))
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
    row = PluginData.objects.filter(session=ctx.session, plugin_id=plugin_id, namespace=p["namespace"], key=p["key"]).first()
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
