"""World data for the plugins that receive it (spec 004 POST /api/sessions "世界数据契约没有接收插件…",
PUT /api/sessions/:id/plugins/:pluginId "开局后加入的接收插件").

A world data source whose target is ``contract:<c>`` is delivered to every enabled plugin that declares
a ``contributes.data`` namespace accepting ``<c>``: the rows of
``sessions.world_data_contracts.contract_source_rows`` (a list with a declared ``key``: one row per
item keyed by that field; otherwise one row, keyed by the record's ``key`` field, else the source id). At creation every receiver gets it; a plugin
that joins the enabled set later gets it once, the first time it is enabled
(``metadata.worldDataReceivers`` remembers who received). A row that already holds another value
(the game or the player changed it) is kept and counted as a conflict; an equal one is left as it is.
The world's dimensions are imported when the first ``world.dimensions@1`` provider of the session
joins. Sources no enabled plugin receives are reported as ``notices``. Callers hold the session row
lock and run these inside their transaction; no events are written here (kernel writes, like the
creation's imports).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sessions.world_data_contracts import (
    CODE_DIMENSION_PROVIDER_MISSING,
    CODE_RECEIVER_MISSING,
    HIDDEN_NAMESPACE_PREFIX,
    TARGET_CONTRACT_PREFIX,
    _accepting_namespaces,
    _contract_sources,
    contract_is_received,
    contract_source_rows,
    contract_sources_unreceived,
    world_dimensions_for,
)
from sessions.world_data_projections import world_projection_rows_write, world_projections_run
from sessions.world_data_sync import ledger_record_creation

RECEIVERS_KEY = "worldDataReceivers"


@dataclass
class WorldDataImport:
    """What one delivery did: ``receivers`` (plugins that got data for the first time), ``imported``
    (rows written), ``conflicts`` (rows kept because they hold another value), ``notices``
    (``{level, sourceId?, code?, message}``: world data no enabled plugin receives)."""

    receivers: list[str] = field(default_factory=list)
    imported: int = 0
    conflicts: int = 0
    notices: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"receivers": list(self.receivers), "imported": self.imported, "conflicts": self.conflicts,
                "notices": [dict(n) for n in self.notices]}


def contract_data_deliver(session, world, content: dict[str, Any], registry, plugin_ids: list[str]) -> WorldDataImport:
    """Deliver the world's contract sources (``content["data"]``: sourceId → value) to the receivers
    among ``plugin_ids`` (module docstring). Records the receivers in ``session.metadata``
    (the caller saves it). Returns the counts; ``notices`` are left to ``world_data_notices``."""
    from plugins_app.models import PluginData

    result = WorldDataImport()
    data = content.get("data") or {}
    for source in _contract_sources(world):
        value = data.get(source.get("id"))
        if value is None:
            continue
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):].split("+", 1)[0]  # "…@1+lorebook" too
        rows = contract_source_rows(source, value)  # one row per keyed record (issue 20)
        hidden = source.get("visibility") == "hidden"  # kept in the receiver's _hidden.<ns> bucket
        for plugin_id in plugin_ids:
            for namespace in _accepting_namespaces(registry.get(plugin_id), contract):
                namespace = f"{HIDDEN_NAMESPACE_PREFIX}{namespace}" if hidden else namespace
                if plugin_id not in result.receivers:
                    result.receivers.append(plugin_id)
                existing = {r.key: r.value for r in PluginData.objects.filter(
                    session=session, plugin_id=plugin_id, namespace=namespace, key__in=[k for k, _ in rows])}
                fresh = [PluginData(session=session, plugin_id=plugin_id, namespace=namespace, key=key, value=record)
                         for key, record in rows if key not in existing]
                PluginData.objects.bulk_create(fresh)
                result.imported += len(fresh)
                # changed in the game since: kept as it is
                result.conflicts += sum(1 for key, record in rows if key in existing and existing[key] != record)
    # The plugins' world projections over the same sources, independent of the receivers (spec 004).
    projected = world_projections_run(_contract_sources(world), data, registry, plugin_ids)
    written, kept = world_projection_rows_write(session, projected)
    result.imported += written
    result.conflicts += kept
    for plugin_id, _namespace in projected.rows:
        if plugin_id not in result.receivers:
            result.receivers.append(plugin_id)
    if result.receivers:
        meta = dict(session.metadata or {})
        meta[RECEIVERS_KEY] = list(dict.fromkeys([*(meta.get(RECEIVERS_KEY) or []), *result.receivers]))
        session.metadata = meta
    # The provenance ledger: what the importer wrote is importer-managed (sessions.world_data_sync).
    ledger_record_creation(session, world, plugin_ids, registry, projected)
    # Data none of these plugins receives is reported, never dropped quietly (issue 21).
    result.notices = [{"level": "warning", **{k: v for k, v in n.items() if k != "contract"}}
                      for n in contract_sources_unreceived(world.metadata, registry, plugin_ids)] + projected.notices
    return result


def world_data_notices(world, registry, runnable: list[str], *, has_dimension_provider: bool) -> list[dict[str, Any]]:
    """Warnings for the world data the ``runnable`` plugins do not receive: contract sources without
    a receiver, and world dimensions without a ``world.dimensions@1`` provider."""
    notices: list[dict[str, Any]] = []
    for source in _contract_sources(world):
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):].split("+", 1)[0]
        if not any(contract_is_received(registry.get(pid), contract) for pid in runnable):
            notices.append({"level": "warning", "sourceId": source.get("id"), "code": CODE_RECEIVER_MISSING,
                            "message": f"no enabled plugin receives {contract}; source {source.get('id')} was not imported"})
    if world.dimensions and not has_dimension_provider:
        notices.append({"level": "warning", "code": CODE_DIMENSION_PROVIDER_MISSING, "sourceId": "dimensions",
                        "message": "no enabled plugin provides world.dimensions@1; dimensions were not imported"})
    return notices


def world_data_late_import(session, registry, *, joined: list[str], runnable: list[str]) -> WorldDataImport | None:
    """PUT /api/sessions/:id/plugins/:pluginId: import the world data once for the plugins that
    ``joined`` the enabled set (those never given it before), and the world's dimensions when the
    first dimension provider joined (``metadata.dimensionProviderPluginId`` is then bound to it).
    Returns None when the session has no world (or it cannot be resolved) or nothing joined."""
    from sessions.catalog import world_resolve
    from sessions.models import DimensionValue
    from sessions.plugin_selection import dimension_providers

    if not session.world_id or not joined:
        return None
    world = world_resolve(session.world_id)
    if world is None:
        return None
    content = world.content(session.locale)
    received = set((session.metadata or {}).get(RECEIVERS_KEY) or [])
    result = contract_data_deliver(session, world, content, registry, [p for p in joined if p not in received])
    result.notices = []
    meta = dict(session.metadata or {})
    providers = dimension_providers(registry, joined)
    if world.dimensions and providers and not meta.get("dimensionProviderPluginId"):
        meta["dimensionProviderPluginId"] = providers[0]
        session.metadata = meta
        existing = set(DimensionValue.objects.filter(session=session).values_list("dimension_id", flat=True))
        rows = [DimensionValue(session=session, dimension_id=dim_id, definition=definition,
                               value=definition.get("initialValue"), version=1)
                for dim_id, definition in world_dimensions_for(world, session.locale).items()
                if isinstance(definition, dict) and dim_id not in existing]
        DimensionValue.objects.bulk_create(rows)
        ledger_record_creation(session, world, [providers[0]], registry)
        result.imported += len(rows)
        if providers[0] not in result.receivers:
            result.receivers.append(providers[0])
    bound = (session.metadata or {}).get("dimensionProviderPluginId")
    result.notices = world_data_notices(world, registry, runnable, has_dimension_provider=bool(bound and bound in runnable))
    return result
