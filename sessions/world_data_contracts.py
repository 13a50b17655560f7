"""World data sources and their receivers: which ``contract:`` sources a world ships and which
plugins accept them (a plugin's ``contributes.data.<namespace>.accepts``). Shared by
sessions.world_data_import (creation, late receivers) and sessions.world_data_sync (ledger, sync)."""
from __future__ import annotations

from typing import Any

TARGET_CONTRACT_PREFIX = "contract:"
#: Rows of a ``visibility: hidden`` source go to ``_hidden.<namespace>`` (spec 004 §插件数据: never listed).
HIDDEN_NAMESPACE_PREFIX = "_hidden."
CODE_RECEIVER_MISSING = "receiver-missing"
CODE_DIMENSION_PROVIDER_MISSING = "dimension-provider-missing"


def _contract_sources(world) -> list[dict[str, Any]]:
    sources = ((world.metadata.get("worldData") or {}).get("sources")) or []
    return [s for s in sources if isinstance(s, dict) and isinstance(s.get("target"), str)
            and s["target"].startswith(TARGET_CONTRACT_PREFIX) and s.get("enabled", True)]


def _accepting_namespaces(record, contract: str) -> list[str]:
    data = (record.manifest.contributes.data or {}) if record is not None else {}
    return [ns for ns, decl in data.items() if isinstance(decl, dict) and contract in (decl.get("accepts") or [])]


def contract_is_received(record, contract: str) -> bool:
    """Whether a plugin takes world data of ``contract``: a data namespace accepting it, or a world
    projection reading it (sessions.world_data_projections)."""
    from sessions.world_data_projections import projections_of

    return bool(_accepting_namespaces(record, contract) or projections_of(record, contract))


def contract_sources_unreceived(metadata: dict[str, Any], registry, plugin_ids: list[str] | None) -> list[dict[str, Any]]:
    """The world's enabled ``contract:`` sources that none of ``plugin_ids`` (None: every installed,
    non-error plugin) accepts: ``[{sourceId, contract, code: "receiver-missing", message}]``
    (GET /api/worlds/:id/plugin-plan ``unmetRequirements``, session creation ``worldDataNotices``)."""
    if plugin_ids is None:
        plugin_ids = [r.id for r in registry.all() if getattr(r, "host_state", None) != "error"]
    sources = ((metadata.get("worldData") or {}).get("sources")) or []
    out = []
    for source in sources:
        if not (isinstance(source, dict) and isinstance(source.get("target"), str)
                and source["target"].startswith(TARGET_CONTRACT_PREFIX) and source.get("enabled", True)):
            continue
        contract = source["target"][len(TARGET_CONTRACT_PREFIX):].split("+", 1)[0]
        if not any(contract_is_received(registry.get(pid), contract) for pid in plugin_ids):
            out.append({"sourceId": source.get("id"), "contract": contract, "code": CODE_RECEIVER_MISSING,
                        "message": f"no plugin receives {contract}; source {source.get('id')} is not imported"})
    return out


def contract_source_rows(source: dict[str, Any], value: Any) -> list[tuple[str, Any]]:
    """The plugin-data rows ``[(key, record)]`` one ``contract:`` source's value becomes, in file
    order (spec 004 §世界数据: a record is addressed by the source's declared ``key``; issue 20).

    - a list and a declared ``key`` (e.g. ``key: id``): one row per object item, key =
      ``str(item[key])``; an item without that field (or repeating an earlier key, first wins)
      is kept under ``<sourceId>.<index>`` rather than dropped; a list holding no object with the
      field at all (strings, say) stays one row under the source id;
    - an object carrying the declared ``key`` field: one row under that field's value;
    - anything else: one row under the source id.

    Session creation, late receivers, preflight, sync-data and the provenance ledger all key rows
    with this one function, so a ledger row always names the row the importer wrote.
    """
    source_id = str(source.get("id"))
    key_field = source.get("key")
    if isinstance(value, list) and isinstance(key_field, str) and key_field:
        if not any(isinstance(item, dict) and item.get(key_field) not in (None, "") for item in value):
            return [(source_id, value)]
        rows: dict[str, Any] = {}
        for index, item in enumerate(value):
            key = str(item[key_field]) if isinstance(item, dict) and item.get(key_field) not in (None, "") else ""
            if not key or key in rows:
                key = f"{source_id}.{index}"
            rows[key] = item
        return list(rows.items())
    if isinstance(value, dict) and isinstance(key_field, str) and key_field and value.get(key_field) not in (None, ""):
        return [(str(value[key_field]), value)]
    return [(source_id, value)]


def world_dimensions_for(world, locale: str) -> dict[str, Any]:
    """The dimension definitions a session in ``locale`` imports: ``world.dimensions`` (the world
    record's, default locale) with each definition the package has not had edited in the app
    replaced by the package's ``locale`` version (the dimension overlay merged on the base, the
    opening scenario resolved — sessions.worldpkg.content). A definition edited through PATCH /
    dimension import (it no longer equals the package's default-locale one) is kept as edited.
    Shapes: {dimId: definition}. Used by session creation, late receivers and the ledger plan."""
    dims = world.dimensions
    if not dims or locale == getattr(world, "default_locale", locale):
        return dims
    localized = (world.content(locale) or {}).get("dimensions")
    package_default = ((getattr(world, "contents", None) or {}).get(world.default_locale) or {}).get("dimensions")
    if not isinstance(localized, dict) or not isinstance(package_default, dict) or localized is package_default:
        return dims
    out: dict[str, Any] = {}
    for dim_id, definition in dims.items():
        candidate = localized.get(dim_id)
        unedited = _same_definition(package_default.get(dim_id), definition)
        out[dim_id] = candidate if isinstance(candidate, dict) and unedited else definition
    return out


def _same_definition(package_def: Any, record_def: Any) -> bool:
    """Whether the record's definition is still the package's (the default-locale content may
    have the opening scenario resolved from a locale map; compare without it)."""
    def strip(d: Any) -> Any:
        if not isinstance(d, dict):
            return d
        initial = d.get("initialValue")
        if isinstance(initial, dict) and "openingScenario" in initial:
            return {**d, "initialValue": {k: v for k, v in initial.items() if k != "openingScenario"}}
        return d
    return strip(package_def) == strip(record_def)
