"""Reads of plugin data (spec 004 §插件数据). Every list applies the same visibility rule.

Namespaces starting with ``_`` belong to the kernel: ``_hidden.<ns>`` (hidden world data) and the
kernel's bookkeeping (``_dimensions``, ``_runtime_jobs`` ...) never appear in a list, in /state or
in discovery, and a single read of them answers 404.
"""
from __future__ import annotations

from covel.jsonbody import json_type_name
from typing import Any

from plugins_app.models import PluginData

RESERVED_PREFIX = "_"


def is_visible_namespace(namespace: str) -> bool:
    """False for every kernel-reserved namespace (``_`` prefix, including ``_hidden.*``)."""
    return not namespace.startswith(RESERVED_PREFIX)


def _iso(value) -> str | None:
    from covel.times import iso

    return iso(value)


def plugin_data_out(row: PluginData, *, with_plugin: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": row.namespace, "key": row.key, "value": row.value, "updatedAt": _iso(row.updated_at)}
    if with_plugin:
        out = {"pluginId": row.plugin_id, **out}
    return out


def plugin_data_visible(session, *, plugin_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Visible rows of the session (optionally only these plugins), each with ``pluginId``."""
    qs = PluginData.objects.filter(session=session).order_by("plugin_id", "namespace", "key")
    if plugin_ids is not None:
        qs = qs.filter(plugin_id__in=plugin_ids)
    return [plugin_data_out(r, with_plugin=True) for r in qs if is_visible_namespace(r.namespace)]


def plugin_data_list(session, plugin_id: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Visible rows of one plugin (and namespace), ordered by namespace then key."""
    qs = PluginData.objects.filter(session=session, plugin_id=plugin_id)
    if namespace is not None:
        if not is_visible_namespace(namespace):
            return []
        qs = qs.filter(namespace=namespace)
    return [plugin_data_out(r) for r in qs.order_by("namespace", "key") if is_visible_namespace(r.namespace)]


def plugin_data_get(session, plugin_id: str, namespace: str, key: str) -> PluginData | None:
    """One visible row, or None (reserved namespaces read as absent)."""
    if not is_visible_namespace(namespace):
        return None
    return PluginData.objects.filter(session=session, plugin_id=plugin_id, namespace=namespace, key=key).first()




def plugin_data_index(session, plugin_id: str) -> dict[str, Any]:
    """``{sessionId, pluginId, namespaces: [{namespace, count, latestUpdatedAt, keys: [{key, createdAt,
    updatedAt, valueType}]}]}`` without values (spec 004 GET .../_index)."""
    namespaces: dict[str, dict[str, Any]] = {}
    for row in PluginData.objects.filter(session=session, plugin_id=plugin_id).order_by("namespace", "key"):
        if not is_visible_namespace(row.namespace):
            continue
        group = namespaces.setdefault(row.namespace, {"namespace": row.namespace, "count": 0, "latestUpdatedAt": None, "keys": []})
        group["count"] += 1
        updated = _iso(row.updated_at)
        if group["latestUpdatedAt"] is None or updated > group["latestUpdatedAt"]:
            group["latestUpdatedAt"] = updated
        group["keys"].append({"key": row.key, "createdAt": _iso(row.created_at), "updatedAt": updated,
                              "valueType": json_type_name(row.value)})
    return {"sessionId": session.id, "pluginId": plugin_id, "namespaces": list(namespaces.values())}
