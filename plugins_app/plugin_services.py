"""Read models of the plugin registry for the plugin/framework/install endpoints (spec 004 插件管理).

Pure functions over a PluginRegistry; the endpoints pass `plugins_app.registry.plugin_registry()`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from covel.errors import ApiError
from plugins_app import manifests as mf
from plugins_app.discovery import DiscoveredPlugin, SOURCE_COMMUNITY
from plugins_app.hooks import HOOKS_RUN
from plugins_app.registry import HOST_ERROR, PluginRegistry, plugin_record_build
from plugins_app.validation import (
    CODE_IDENTITY_INVALID, CODE_MANIFEST_MISSING, PackageValidationReport, error, package_root_find, report_build,
    zip_extract_safe,
)

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
                # Only the hook events something runs (plugins_app.hooks); manifests may declare the others.
                "hookEvents": list(HOOKS_RUN),
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


def package_validate_upload(kind: str, data: bytes, *, marker: str,
                            validate_dir: Callable[[Path], PackageValidationReport]) -> PackageValidationReport:
    """Validate an uploaded .zip package of ``kind`` ("plugin" | "world") whose root holds ``marker``.
    The archive is fully checked (zip-slip, sizes) in a temporary folder before ``validate_dir`` reads it."""
    with tempfile.TemporaryDirectory(prefix="covel-validate-") as tmp:
        issues = zip_extract_safe(data, Path(tmp) / "pkg")
        if issues:
            return report_build(kind=kind, package_id=None, issues=issues)  # type: ignore[arg-type]
        root = package_root_find(Path(tmp) / "pkg", marker)
        if root is None:
            return report_build(kind=kind, package_id=None,  # type: ignore[arg-type]
                                issues=[error(CODE_MANIFEST_MISSING, f"{marker} not found at the archive root or in its single top folder", marker)])
        return validate_dir(root)


def package_validate_source(kind: str, source: Any, *, installed_root: Callable[[str], Path | None],
                            validate_dir: Callable[..., PackageValidationReport],
                            allowed_roots: list[Path]) -> PackageValidationReport:
    """Validate `{kind: "installed", id}` (``installed_root(id)`` finds its folder) or `{kind: "path", path}`
    (inside ``allowed_roots``). Raises 400 invalid_request, 404 package_not_found, 403 path-outside-roots."""
    if not isinstance(source, dict) or source.get("kind") not in ("installed", "path"):
        raise ApiError(400, "invalid_request", "source must be {kind: installed, id} or {kind: path, path}")
    if source["kind"] == "installed":
        package_id = source.get("id")
        if not isinstance(package_id, str) or not package_id:
            raise ApiError(400, "invalid_request", "source.id is required")
        root = installed_root(package_id)
        if root is None:
            noun = "Plugin not installed" if kind == "plugin" else "World package not found"
            raise ApiError(404, "package_not_found", f"{noun}: {package_id}")
        return validate_dir(root, package_id=package_id)
    raw = source.get("path")
    if not isinstance(raw, str) or not raw:
        raise ApiError(400, "invalid_request", "source.path is required")
    path = Path(raw).resolve()
    if not any(path == r.resolve() or r.resolve() in path.parents for r in allowed_roots):
        raise ApiError(403, "path-outside-roots", "The directory is outside the allowed package roots")
    if not path.is_dir():
        raise ApiError(404, "package_not_found", "Package directory not found")
    return validate_dir(path)


def plugin_validate_upload(data: bytes) -> PackageValidationReport:
    """POST /api/install/validate/plugin with a .zip (spec 004 ZIP 激活前的校验)."""
    return package_validate_upload("plugin", data, marker=mf.PLUGIN_FILE, validate_dir=plugin_validate_dir)


def plugin_validate_source(source: Any, *, registry: PluginRegistry, allowed_roots: list[Path]) -> PackageValidationReport:
    """POST /api/install/validate/plugin with JSON {source}: an installed plugin id or a folder."""
    def installed_root(plugin_id: str) -> Path | None:
        record = registry.get(plugin_id)
        return record.manifest.root if record is not None else None

    return package_validate_source("plugin", source, installed_root=installed_root, validate_dir=plugin_validate_dir,
                                   allowed_roots=allowed_roots)
