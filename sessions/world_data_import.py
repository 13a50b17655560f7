"""World data for the plugins that receive it (spec 004 POST /api/sessions "世界数据契约没有接收插件…",
PUT /api/sessions/:id/plugins/:pluginId "开局后加入的接收插件").

A world data source whose target is ``contract:<c>`` is delivered to every enabled plugin that declares
a ``contributes.data`` namespace accepting ``<c>``: one plugin-data row, key = the record's ``key``
field (the source's ``key``), else the source id. At creation every receiver gets it; a plugin
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

RECEIVERS_KEY = "worldDataReceivers"
TARGET_CONTRACT_PREFIX = "contract:"
CODE_RECEIVER_MISSING = "receiver-missing"
CODE_DIMENSION_PROVIDER_MISSING = "dimension-provider-missing"


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


def _contract_sources(world) -> list[dict[str, Any]]:
    sources = ((world.metadata.get("worldData") or {}).get("sources")) or []
    return [s for s in sources if isinstance(s, dict) and isinstance(s.get("target"), str)
            and s["target"].startswith(TARGET_CONTRACT_PREFIX) and s.get("enabled", True)]


def _accepting_namespaces(record, contract: str) -> list[str]:
    data = (record.manifest.contributes.data or {}) if record is not None else {}
    return [ns for ns, decl in data.items() if isinstance(decl, dict) and contract in (decl.get("accepts") or [])]


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
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):]
        key_field = source.get("key")
        key = str(value.get(key_field)) if isinstance(value, dict) and key_field and value.get(key_field) else str(source.get("id"))
        for plugin_id in plugin_ids:
            for namespace in _accepting_namespaces(registry.get(plugin_id), contract):
                if plugin_id not in result.receivers:
                    result.receivers.append(plugin_id)
                row = PluginData.objects.filter(session=session, plugin_id=plugin_id, namespace=namespace, key=key).first()
                if row is None:
                    PluginData.objects.create(session=session, plugin_id=plugin_id, namespace=namespace, key=key, value=value)
                    result.imported += 1
                elif row.value != value:
                    result.conflicts += 1  # changed in the game since: kept as it is
    if result.receivers:
        meta = dict(session.metadata or {})
        meta[RECEIVERS_KEY] = list(dict.fromkeys([*(meta.get(RECEIVERS_KEY) or []), *result.receivers]))
        session.metadata = meta
    return result


def world_data_notices(world, registry, runnable: list[str], *, has_dimension_provider: bool) -> list[dict[str, Any]]:
    """Warnings for the world data the ``runnable`` plugins do not receive: contract sources without
    a receiver, and world dimensions without a ``world.dimensions@1`` provider."""
    notices: list[dict[str, Any]] = []
    for source in _contract_sources(world):
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):]
        if not any(_accepting_namespaces(registry.get(pid), contract) for pid in runnable):
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
    meta = dict(session.metadata or {})
    providers = dimension_providers(registry, joined)
    if world.dimensions and providers and not meta.get("dimensionProviderPluginId"):
        meta["dimensionProviderPluginId"] = providers[0]
        session.metadata = meta
        existing = set(DimensionValue.objects.filter(session=session).values_list("dimension_id", flat=True))
        rows = [DimensionValue(session=session, dimension_id=dim_id, definition=definition,
                               value=definition.get("initialValue"), version=1)
                for dim_id, definition in world.dimensions.items() if isinstance(definition, dict) and dim_id not in existing]
        DimensionValue.objects.bulk_create(rows)
        result.imported += len(rows)
        if providers[0] not in result.receivers:
            result.receivers.append(providers[0])
    bound = (session.metadata or {}).get("dimensionProviderPluginId")
    result.notices = world_data_notices(world, registry, runnable, has_dimension_provider=bool(bound and bound in runnable))
    return result
