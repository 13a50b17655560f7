"""Read models of the plugin registry for the plugin/framework/install endpoints (spec 004 插件管理).

Pure functions over a PluginRegistry; the endpoints pass `sessions.catalog.plugin_registry()`.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from covel.errors import ApiError
from plugins_app import manifests as mf
from plugins_app.discovery import DiscoveredPlugin, SOURCE_COMMUNITY
from plugins_app.registry import HOST_ERROR, PluginRegistry, plugin_record_build
from plugins_app.validation import (
    CODE_IDENTITY_INVALID, CODE_MANIFEST_MISSING, PackageValidationReport, error, package_root_find, report_build,
    zip_extract_safe,
)
from sessions import world_packages as wp

PACKS_CATALOG = Path(__file__).resolve().parent / "packs" / "builtin.yaml"

WORLD_FILES = [
    {"path": "world.yaml", "purpose": "World manifest: identity, locales, plugin selection, character schema."},
    {"path": "WORLD.md", "purpose": "World lore in the default locale; WORLD.<locale>.md for other locales."},
    {"path": "world.<locale>.yaml", "purpose": "Translated text of world.yaml; structure and ids come from world.yaml."},
    {"path": "data/world.data.yaml", "purpose": "World data descriptor: sources, their targets and import order."},
    {"path": "data/dimensions.yaml", "purpose": "Dimension definitions: name, schema, initialValue, updateRule."},
    {"path": "data/lorebook.yaml", "purpose": "Lorebook entries: id, content."},
    {"path": "characters/characters.json", "purpose": "Character records: id, name, type, description, fields."},
    {"path": "media/gallery.json", "purpose": "Gallery images shown before play."},
]


def capabilities() -> dict[str, Any]:
    """GET /api/framework/capabilities (spec 004): manifest enums, tools, proposals, world-data URIs."""
    return {
        "schemaVersion": 1,
        "framework": {
            "pluginManifest": {
                "triggerTypes": list(mf.TRIGGER_TYPES),
                "outputKinds": list(mf.OUTPUT_KINDS),
                "runtimeTypes": list(mf.RUNTIME_TYPES),
                "executionModes": list(mf.EXECUTION_MODES),
                "turnCompletionModes": list(mf.COMPLETION_MODES),
                "inputInjectKinds": list(mf.INPUT_INJECT_KINDS),
                "uiSlots": ["right", "message", "view", "segment"],
                "stages": list(mf.STAGES),
                "hookEvents": list(mf.HOOK_EVENTS),
                "builtinTools": list(mf.BUILTIN_TOOLS),
                "datasetTools": list(mf.DATASET_TOOLS),
            },
            "scheduling": {"effectsPolicy": "warn"},
            "pluginData": {
                "scope": "(sessionId, pluginId, namespace, key)",
                "reservedNamespaces": ["_runtime_jobs", "_logs"],
                "writePaths": [
                    "dataset-tool:<dataset>-upsert", "dataset-tool:<dataset>-update", "function-output:pluginData[]",
                    "function-ctx.pluginData.update", "local-tool:withPendingProposals(plugin.data.update)",
                    "plugin-rpc:context.store.setPluginData",
                    "management-api:PUT /api/sessions/:id/plugin-data/:pluginId/:namespace/:key",
                ],
            },
            "proposals": {"pluginDataTypes": ["plugin.data", "plugin.data.batch", "plugin.data.update"]},
            "worldData": {
                "effects": ["characters", "projections"],
                "targetUris": ["world:metadata.<path>", "contract:<contractId>", "contract:<contractId>+lorebook"],
                "schemaUris": ["covel://world/dimensions", "contract:<contractId>", "<local-json-schema-path>"],
                "schemas": {},
            },
        },
    }


def _text(value: Any, locale: str | None) -> Any:
    return mf.text_resolve(value, locale) if isinstance(value, dict) else value


def authoring(registry: PluginRegistry, *, locale: str | None = None) -> dict[str, Any]:
    """GET /api/framework/authoring: world files, kernel destinations, contracts from
    contributes.data.*.authoring of loaded plugins, the plugin catalogue and the packs."""
    contracts: list[dict[str, Any]] = []
    diagnostics: list[dict[str, Any]] = []
    plugins: list[dict[str, Any]] = []
    for record in registry.all():
        if record.host_state == HOST_ERROR:
            continue
        m = record.manifest
        plugins.append({"id": m.id, "displayName": _text(m.display_name, locale) or m.id,
                        "description": _text(m.description, locale), "tags": m.tags,
                        "provides": m.provided_contracts, "requires": m.requires,
                        "settings": [dict(s) for s in m.contributes.settings]})
        for namespace, decl in m.contributes.data.items():
            auth = decl.get("authoring")
            if not isinstance(auth, dict):
                continue
            accepts = [c for c in decl.get("accepts") or [] if isinstance(c, str)]
            contract = accepts[0] if accepts else f"{m.id}.{namespace}@1"
            example = auth.get("example")
            if isinstance(example, str):
                path = mf.package_path_resolve(m.root, example)
                try:
                    example = json.loads(path.read_text(encoding="utf-8")) if path else None
                except (OSError, ValueError):
                    diagnostics.append({"pluginId": m.id, "namespace": namespace, "message": "example is not readable JSON"})
                    continue
            entry: dict[str, Any] = {"contract": contract, "pluginId": m.id, "namespace": namespace,
                                     "title": _text(auth.get("title"), locale), "hint": _text(auth.get("hint"), locale),
                                     "schema": decl.get("schema"), "example": example}
            source = auth.get("source")
            if isinstance(source, dict):
                entry["source"] = {"id": namespace, "entry": {**source, "schema": f"contract:{contract}", "to": f"contract:{contract}"}}
            if auth.get("generate") in ("offer", "default"):
                entry["generate"] = auth["generate"]
            contracts.append(entry)
    packs, _issues = wp.packs_catalog_load(PACKS_CATALOG)
    out = {
        "files": WORLD_FILES,
        "destinations": [
            {"title": "Dimensions", "description": "Author-declared world dimensions with JSON Schemas and initial values.",
             "source": {"id": "dimensions", "entry": {"kind": "yaml", "path": "data/dimensions.yaml", "schema": "covel://world/dimensions", "to": "world:metadata.dimensions"}}},
            {"title": "Characters", "description": "Character records of the session's world model.",
             "source": {"id": "characters", "entry": {"kind": "json", "path": "characters/characters.json", "to": "characters", "key": "id"}}},
            {"title": "Lorebook", "description": "Lorebook entries retrieved into prompts.",
             "source": {"id": "lore", "entry": {"kind": "yaml", "path": "data/lorebook.yaml", "to": "lorebook", "key": "id"}}},
        ],
        "contracts": contracts,
        "plugins": plugins,
        "packs": [{**p.as_dict(), "label": _text(p.label, locale), "description": _text(p.description, locale)} for p in packs],
    }
    if diagnostics:
        out["diagnostics"] = diagnostics
    return out


def plugin_flows(registry: PluginRegistry) -> dict[str, Any]:
    """GET /api/plugin-flows: {plugins[], steps[]}; steps group usable runtimes by stage (setup →
    audit, then manual/event runtimes under stage null). Entries use `kind`, never pluginType."""
    plugins = []
    steps: dict[str | None, list[dict[str, Any]]] = {stage: [] for stage in mf.STAGES}
    steps[None] = []
    for record in registry.all():
        summary = record.summary()
        plugins.append({k: summary[k] for k in ("id", "displayName", "description", "kind", "source", "hostState", "tags",
                                                "provides", "requires", "runtimeCount")
                        if k in summary} | {k: summary[k] for k in ("error", "disabledRuntimes", "ignoredFields") if k in summary})
        if record.host_state == HOST_ERROR:
            continue
        for runtime in record.manifest.runtimes:
            item = runtime.summary()
            item.update({"pluginId": record.id, "kind": record.manifest.kind})
            steps[runtime.stage].append(item)
    return {"plugins": plugins,
            "steps": [{"stage": stage, "runtimes": runtimes} for stage, runtimes in steps.items() if runtimes]}


# ------------------------------------------------------------------------------- validation


def plugin_validate_dir(root: Path, *, package_id: str | None = None) -> PackageValidationReport:
    """Statically validate a plugin folder (manifests only; entry code is never executed)."""
    if not (root / mf.PLUGIN_FILE).is_file():
        return report_build(kind="plugin", package_id=package_id,
                            issues=[error(CODE_MANIFEST_MISSING, "PLUGIN.md is missing", mf.PLUGIN_FILE)])
    record = plugin_record_build(DiscoveredPlugin(id=package_id or root.name, root=root, source=SOURCE_COMMUNITY), load_entries=False)
    m = record.manifest
    if package_id is None:  # uploads: id from PLUGIN.md, else the folder name
        declared = m.raw.get("id") if isinstance(m.raw.get("id"), str) else None
        if declared or mf.PLUGIN_ID_RE.match(root.name):
            record = plugin_record_build(DiscoveredPlugin(id=declared or root.name, root=root, source=SOURCE_COMMUNITY), load_entries=False)
            m = record.manifest
    identity_ok = bool(mf.PLUGIN_ID_RE.match(m.id))
    issues = list(record.issues)
    if not identity_ok and not any(i.code == CODE_IDENTITY_INVALID for i in issues):
        issues.append(error(CODE_IDENTITY_INVALID, "cannot derive a plugin id", mf.PLUGIN_FILE, "id"))
    return report_build(kind="plugin", package_id=m.id if identity_ok else None, issues=issues,
                        extra_counts={"runtimes": len(m.runtimes), "tools": len(m.contributes.tools)})


def world_validate_dir(root: Path, *, package_id: str | None = None) -> PackageValidationReport:
    """Statically validate a world folder (report counts: characters, loreEntries, dimensions, locales)."""
    world = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=package_id)
    return wp.world_validation_report(world)


def validate_upload(kind: str, data: bytes) -> PackageValidationReport:
    """Validate an uploaded .zip package. The archive is fully checked (zip-slip) before any write."""
    with tempfile.TemporaryDirectory(prefix="covel-validate-") as tmp:
        issues = zip_extract_safe(data, Path(tmp) / "pkg")
        if issues:
            return report_build(kind=kind, package_id=None, issues=issues)  # type: ignore[arg-type]
        marker = mf.PLUGIN_FILE if kind == "plugin" else wp.WORLD_FILE
        root = package_root_find(Path(tmp) / "pkg", marker)
        if root is None:
            return report_build(kind=kind, package_id=None,  # type: ignore[arg-type]
                                issues=[error(CODE_MANIFEST_MISSING, f"{marker} not found at the archive root or in its single top folder", marker)])
        if kind == "plugin":
            return plugin_validate_dir(root)
        world = wp.world_package_load(root, source=wp.SOURCE_USER)
        return wp.world_validation_report(world)


def validate_source(kind: str, source: Any, *, registry: PluginRegistry, covel_home: Path, allowed_roots: list[Path]) -> PackageValidationReport:
    """Validate `{kind: "installed", id}` or `{kind: "path", path}`. Raises 400 invalid request,
    404 package not found, 403 path-outside-roots."""
    if not isinstance(source, dict) or source.get("kind") not in ("installed", "path"):
        raise ApiError(400, "invalid_request", "source must be {kind: installed, id} or {kind: path, path}")
    if source["kind"] == "installed":
        package_id = source.get("id")
        if not isinstance(package_id, str) or not package_id:
            raise ApiError(400, "invalid_request", "source.id is required")
        if kind == "plugin":
            record = registry.get(package_id)
            if record is None:
                raise ApiError(404, "package_not_found", f"Plugin not installed: {package_id}")
            return plugin_validate_dir(record.manifest.root, package_id=package_id)
        from sessions.world_selectors import builtin_worlds_dir

        for directory in (builtin_worlds_dir(), wp.user_worlds_dir(covel_home)):
            root = Path(directory) / package_id
            if root.is_dir():
                return world_validate_dir(root, package_id=package_id)
        raise ApiError(404, "package_not_found", f"World package not found: {package_id}")
    raw = source.get("path")
    if not isinstance(raw, str) or not raw:
        raise ApiError(400, "invalid_request", "source.path is required")
    path = Path(raw).resolve()
    if not any(path == r.resolve() or r.resolve() in path.parents for r in allowed_roots):
        raise ApiError(403, "path-outside-roots", "The directory is outside the allowed package roots")
    if not path.is_dir():
        raise ApiError(404, "package_not_found", "Package directory not found")
    return plugin_validate_dir(path) if kind == "plugin" else world_validate_dir(path)
