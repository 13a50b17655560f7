"""Plugin manifests: parse and validate PLUGIN.md / RUNTIME.md into dataclasses.

Pure Python (no Django). Entry point: `plugin_manifest_load(root, expected_id=None)`.

Package layout (spec 004 "插件管理"; upstream docs/reference/schema/plugin-manifest.md):

    <plugin-id>/PLUGIN.md                 YAML frontmatter (package manifest) + instructions body
    <plugin-id>/runtimes/<rid>/RUNTIME.md one more runtime each (frontmatter + prompt body)
    <plugin-id>/server/entry.py           optional Python entry, named by `entry:` (see discovery)

Runtime ids: the inline `runtime:` of PLUGIN.md has id `<plugin-id>`; `runtimes/<rid>/RUNTIME.md`
has id `<plugin-id>/<rid>`. Both layouts in one package are allowed only when ids do not collide.

The frontmatter format is the published JSON Schema: plugins_app/schemas/plugin.json (PLUGIN.md,
its inline `runtime` refers to runtime.json) and runtime.json (RUNTIME.md), served at
GET /api/framework/schemas/{name}. Validation (each finding an `Issue` with file and field):
- schema violations, mapped by plugins_app.validation.schema_issues: unknown fields → warning
  `unknown-field` (PluginSummary.ignoredFields, never fatal); wrong types / enum values →
  error `invalid-field`; missing required fields → error `missing-field`;
- rules the schema cannot express (plugins_app.manifest_semantics): `agent.tools.local` → error
  `tools-local` (spec 000: "清单里没有 tools.local，写了它的清单加载失败"); a background/detached
  runtime listing `suspend` → error `background-suspend` (spec 000 "挂起");
  `schedule.completion.mode: detached` / `schedule.detached` outside post-turn/audit → error;
  dataset / service tool references (spec 000 "数据集工具", "导入的服务工具") → error
  `dataset-reference`, `service-import`; references to undeclared plugin tools / contracts →
  warning or info (older upstream manifests rely on them; the engine simply will not offer an
  undeclared tool);
- duplicate runtime ids → error `duplicate-runtime`; id problems → `identity-invalid`, `id-mismatch`.
Errors in PLUGIN.md make the whole package fail; errors confined to one RUNTIME.md disable that
runtime only (`disabled_runtimes`, spec 004 PluginSummary.disabledRuntimes).

Older upstream manifests (`pluginType` / `runtimeType` / top-level `trigger`, nested
`runtimes/<rid>/PLUGIN.md`) are read through a documented translation (plugins_app.manifest_legacy)
with a `legacy-layout` warning, so their declarative parts are still listed.

The model (constants, dataclasses) lives in plugins_app.manifest_types and the readers in
manifest_files / manifest_build; every public name stays importable from this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plugins_app.manifest_build import contributes_build, entry_language, runtime_build, service_tool_name
from plugins_app.manifest_files import event_schema_load, frontmatter_read, package_path_resolve, package_relpath, runtime_files
from plugins_app.manifest_legacy import LEGACY_KEYS, is_legacy, legacy_translate, legacy_unknown_keys
from plugins_app.manifest_semantics import (
    contract_references_check,
    contributes_semantics,
    dataset_tools,
    runtime_paths_check,
    runtime_semantics,
    tool_references_check,
)
from plugins_app.manifest_types import (
    ACTION_KIND_TEXT,
    BUILTIN_TOOLS,
    COMPLETION_MODES,
    COMPLETION_REQUIRE,
    CONTRACT_RE,
    DATASET_OPS,
    DATASET_TOOLS,
    DETACHABLE_STAGES,
    EXECUTION_MODES,
    HOOK_ENFORCE,
    HOOK_EVENTS,
    INPUT_INJECT_KINDS,
    JAVASCRIPT_SUFFIXES,
    LEGACY_TRIGGER_TYPES,
    OUTPUT_KINDS,
    PLUGIN_FILE,
    PLUGIN_ID_RE,
    PLUGIN_KINDS,
    PYTHON_SUFFIXES,
    RUNTIME_FILE,
    RUNTIME_TYPES,
    RUNTIMES_DIR,
    SELF_DATA_FORMATS,
    STAGES,
    TOOL_NAME_RE,
    TRIGGER_TYPES,
    UI_SLOTS,
    VISIBILITIES,
    AgentConfig,
    Contributes,
    DatasetSelection,
    FunctionConfig,
    PluginManifest,
    RuntimeManifest,
    ServiceImport,
    ToolSelection,
    Trigger,
)
from plugins_app.validation import (
    CODE_ID_MISMATCH,
    CODE_IDENTITY_INVALID,
    CODE_INVALID_FIELD,
    CODE_FILE_INVALID,
    CODE_MANIFEST_INVALID,
    CODE_MANIFEST_MISSING,
    CODE_PATH_OUTSIDE_PACKAGE,
    CODE_UNKNOWN_FIELD,
    Issue,
    error,
    has_errors,
    schema_issues,
    warning,
)

__all__ = [
    "ACTION_KIND_TEXT", "BUILTIN_TOOLS", "COMPLETION_MODES", "COMPLETION_REQUIRE", "CONTRACT_RE", "DATASET_OPS",
    "DATASET_TOOLS", "DETACHABLE_STAGES", "EXECUTION_MODES", "HOOK_ENFORCE", "HOOK_EVENTS", "INPUT_INJECT_KINDS",
    "JAVASCRIPT_SUFFIXES", "LEGACY_KEYS", "LEGACY_TRIGGER_TYPES", "OUTPUT_KINDS", "PLUGIN_FILE", "PLUGIN_ID_RE",
    "PLUGIN_KINDS", "PLUGIN_SCHEMA", "PYTHON_SUFFIXES", "RUNTIME_FILE", "RUNTIME_SCHEMA", "RUNTIME_TYPES",
    "RUNTIMES_DIR", "SELF_DATA_FORMATS", "STAGES", "TOOL_NAME_RE", "TRIGGER_TYPES", "UI_SLOTS", "VISIBILITIES",
    "AgentConfig", "Contributes", "DatasetSelection", "FunctionConfig", "PluginManifest", "RuntimeManifest",
    "ServiceImport", "ToolSelection", "Trigger", "dataset_tools", "frontmatter_read", "package_path_resolve",
    "package_relpath", "plugin_manifest_load", "runtime_handler_language", "service_tool_name", "text_languages",
    "text_resolve",
]

PLUGIN_SCHEMA = "plugin.json"  # PLUGIN.md frontmatter (plugins_app/schemas/)
RUNTIME_SCHEMA = "runtime.json"  # RUNTIME.md frontmatter


def plugin_manifest_load(root: Path, *, expected_id: str | None = None) -> PluginManifest:
    """Parse and validate the plugin package at `root`. Never raises for bad content.

    expected_id: the id the host assigns (discovery: folder name). When PLUGIN.md declares a
    different `id`, an error `id-mismatch` is recorded (spec 004: hostState "error", nothing
    loaded). Without expected_id, the id is PLUGIN.md's `id`, else the folder name.
    Returns a PluginManifest whose `issues` list every finding (codes in the module docstring);
    `has_errors` tells whether the package as a whole is unusable. The entry module is NOT
    imported here (see registry).
    """
    root = Path(root)
    issues: list[Issue] = []
    folder_id = root.name
    plugin_md = root / PLUGIN_FILE
    if not plugin_md.is_file():
        manifest = PluginManifest(id=expected_id or folder_id, root=root)
        manifest.issues.append(error(CODE_MANIFEST_MISSING, "PLUGIN.md is missing", PLUGIN_FILE))
        return manifest
    meta, body, read_issues = frontmatter_read(plugin_md, PLUGIN_FILE)
    issues.extend(read_issues)
    if meta is None:
        return PluginManifest(id=expected_id or folder_id, root=root, issues=issues)

    legacy = is_legacy(meta)
    inline_runtime: dict[str, Any] | None
    if legacy:
        pkg_meta, inline_runtime = legacy_translate(meta, PLUGIN_FILE, issues)
        for key in legacy_unknown_keys(meta):
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", PLUGIN_FILE, str(key)))
        translated = dict(pkg_meta)
        if inline_runtime is not None:
            translated["runtime"] = inline_runtime
        issues.extend(schema_issues(translated, PLUGIN_SCHEMA, file=PLUGIN_FILE))
    else:
        pkg_meta = meta
        inline_runtime = meta.get("runtime") if isinstance(meta.get("runtime"), dict) else None
        issues.extend(schema_issues(meta, PLUGIN_SCHEMA, file=PLUGIN_FILE))

    plugin_id = _plugin_id(pkg_meta, expected_id or None, folder_id, issues)
    manifest = _package_build(root, plugin_id, pkg_meta, meta, body, legacy, issues)

    # Runtimes: inline first, then runtimes/<rid>/ in folder order.
    seen_ids: dict[str, str] = {}
    if inline_runtime is not None:
        runtime_issues: list[Issue] = []
        runtime_semantics(inline_runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        runtime = runtime_build(inline_runtime, body, plugin_id=plugin_id, local_id=plugin_id, runtime_id=plugin_id,
                                source_path=PLUGIN_FILE, directory="")
        runtime_paths_check(root, runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        tool_references_check(manifest, runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        issues.extend(runtime_issues)
        manifest.runtimes.append(runtime)
        seen_ids[plugin_id.lower()] = PLUGIN_FILE

    for local_id, path, is_legacy_file in runtime_files(root):
        rel = package_relpath(root, path)
        runtime_id = f"{plugin_id}/{local_id}"
        key = runtime_id.lower()
        if key in seen_ids:
            issues.append(error("duplicate-runtime", f"runtime {runtime_id!r} is already defined by {seen_ids[key]}", rel))
            continue
        seen_ids[key] = rel
        _runtime_file_load(manifest, path, rel, local_id, is_legacy_file, issues)

    contract_references_check(manifest, issues)
    manifest.issues = issues
    return manifest


def _plugin_id(pkg_meta: dict[str, Any], expected_id: str | None, folder_id: str, issues: list[Issue]) -> str:
    """The package id (host-assigned, else declared, else folder) and its identity issues."""
    declared_id = pkg_meta.get("id")
    if declared_id is not None and not isinstance(declared_id, str):
        declared_id = None
    plugin_id = expected_id or declared_id or folder_id
    if not PLUGIN_ID_RE.match(plugin_id):
        issues.append(error(CODE_IDENTITY_INVALID, f"plugin id {plugin_id!r} must be lowercase letters, digits and hyphens", PLUGIN_FILE, "id"))
    if declared_id is not None and declared_id != plugin_id:
        issues.append(error(CODE_ID_MISMATCH, f"PLUGIN.md declares id {declared_id!r} but the package folder is {plugin_id!r}", PLUGIN_FILE, "id"))
    return plugin_id


def _package_build(root: Path, plugin_id: str, pkg_meta: dict[str, Any], meta: dict[str, Any], body: str,
                   legacy: bool, issues: list[Issue]) -> PluginManifest:
    """The PluginManifest of the package fields (no runtimes yet), with the package-level rules:
    role: tags, contract schema files, contributes semantics, the entry path."""
    tags = pkg_meta.get("tags") if isinstance(pkg_meta.get("tags"), list) else []
    for index, tag in enumerate(tags):
        if isinstance(tag, str) and tag.startswith("role:") and not legacy:
            issues.append(warning(CODE_INVALID_FIELD, "role: tags are ignored; declare contracts instead", PLUGIN_FILE, f"tags.{index}"))

    provides: list[dict[str, Any]] = []
    for item in pkg_meta.get("provides") if isinstance(pkg_meta.get("provides"), list) else []:
        if isinstance(item, str):
            provides.append({"contract": item, "default": False})
        elif isinstance(item, dict) and isinstance(item.get("contract"), str):
            provides.append({"contract": item["contract"], "default": item.get("default") is True})
    raw_contracts = pkg_meta.get("contracts")
    contracts = {k: dict(v) for k, v in raw_contracts.items() if isinstance(v, dict)} if isinstance(raw_contracts, dict) else {}
    for cid, decl in contracts.items():
        schema_file = decl.get("schema")
        if isinstance(schema_file, str):
            resolved = package_path_resolve(root, schema_file)
            if resolved is None:
                issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "schema path leaves the package", PLUGIN_FILE, f"contracts.{cid}.schema"))
            elif not resolved.is_file():
                issues.append(warning("schema-missing", f"schema file {schema_file} not found", PLUGIN_FILE, f"contracts.{cid}.schema"))

    contributes = contributes_build(pkg_meta.get("contributes"))
    contributes_semantics(contributes, issues)
    for index, event in enumerate(contributes.events):
        if isinstance(event, dict) and isinstance(event.get("schema"), (str, dict)):  # a wrong type: the schema reports it
            _, problem = event_schema_load(root, event)
            if problem is not None:  # an unusable payload schema would let any payload through
                where = f"contributes.events.{index}.schema"
                # A missing file is not reported here (packages ship without optional files); the
                # prompts' event directory marks that topic "(schema unavailable)".
                if "not found" not in problem:
                    code = (CODE_PATH_OUTSIDE_PACKAGE if "leaves" in problem
                            else CODE_FILE_INVALID if "not JSON" in problem else CODE_INVALID_FIELD)
                    issues.append(error(code, problem, PLUGIN_FILE, where))

    entry = pkg_meta.get("entry") if isinstance(pkg_meta.get("entry"), str) else None
    if entry is not None:
        resolved = package_path_resolve(root, entry.split(":", 1)[0])
        if resolved is None:
            issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "entry path leaves the package", PLUGIN_FILE, "entry"))
        elif entry_language(entry) == "python" and not resolved.is_file():
            issues.append(error("entry-missing", f"entry module {entry} not found", PLUGIN_FILE, "entry"))

    def str_list(key: str) -> list[str]:
        value = pkg_meta.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    version = pkg_meta.get("version")
    return PluginManifest(
        id=plugin_id,
        root=root,
        kind=pkg_meta.get("kind") if pkg_meta.get("kind") in PLUGIN_KINDS else "plugin",
        version=str(version) if version is not None else None,
        display_name=pkg_meta.get("displayName"),
        description=pkg_meta.get("description"),
        tags=str_list("tags"),
        author=pkg_meta.get("author") if isinstance(pkg_meta.get("author"), dict) else None,
        license=pkg_meta.get("license") if isinstance(pkg_meta.get("license"), str) else None,
        homepage=pkg_meta.get("homepage") if isinstance(pkg_meta.get("homepage"), str) else None,
        provides=provides,
        requires=str_list("requires"),
        optional=str_list("optional"),
        conflicts=str_list("conflicts"),
        contracts=contracts,
        entry=entry,
        entry_language=entry_language(entry),
        contributes=contributes,
        body=body,
        is_legacy_layout=legacy,
        raw=meta,
    )


def _runtime_file_load(manifest: PluginManifest, path: Path, rel: str, local_id: str, is_legacy_file: bool,
                       issues: list[Issue]) -> None:
    """Read runtimes/<local_id>/RUNTIME.md (or a legacy PLUGIN.md there) into `manifest`: a
    runtime, or a disabled_runtimes entry when its own file has errors."""
    root, plugin_id = manifest.root, manifest.id
    runtime_issues: list[Issue] = []
    rmeta, rbody, read_issues = frontmatter_read(path, rel)
    runtime_issues.extend(read_issues)
    if rmeta is not None and (is_legacy_file or is_legacy(rmeta)):
        _pkg, translated = legacy_translate(rmeta, rel, runtime_issues)
        for key_name in legacy_unknown_keys(rmeta):
            runtime_issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", rel, str(key_name)))
        if translated is None:
            runtime_issues.append(error(CODE_MANIFEST_INVALID, "legacy runtime manifest declares no runtimeType", rel))
            rmeta = None
        else:
            # Old packages declare a runtime's tools in the runtime file only: they count as contributed.
            legacy_tools = _dict(rmeta.get("tools")).get("plugin")
            for tool in legacy_tools if isinstance(legacy_tools, list | str) else []:
                if isinstance(tool, str) and tool not in manifest.contributes.tools:
                    manifest.contributes.tools.append(tool)
            rmeta = translated
    if rmeta is not None:
        if "id" in rmeta and not is_legacy_file:
            runtime_issues.append(warning(CODE_UNKNOWN_FIELD, "runtime id comes from the folder name", rel, "id"))
            rmeta = {k: v for k, v in rmeta.items() if k != "id"}
        runtime_issues.extend(schema_issues(rmeta, RUNTIME_SCHEMA, file=rel))
        runtime_semantics(rmeta, rel, "", runtime_issues)
    if rmeta is None or has_errors(runtime_issues):
        issues.extend(runtime_issues)
        message = next((i.message for i in runtime_issues if i.is_error), "runtime manifest is invalid")
        disabled: dict[str, Any] = {"sourcePath": rel, "message": f"<plugin>/{rel}: {message}"}
        out_contract = _dict(_dict(_dict(rmeta).get("io")).get("output")).get("contract")
        if isinstance(out_contract, str):
            disabled["outputContract"] = out_contract
        manifest.disabled_runtimes.append(disabled)
        return
    runtime = runtime_build(rmeta, rbody, plugin_id=plugin_id, local_id=local_id, runtime_id=f"{plugin_id}/{local_id}",
                            source_path=rel, directory=f"{RUNTIMES_DIR}/{local_id}")
    runtime_paths_check(root, runtime, rel, "", runtime_issues)
    tool_references_check(manifest, runtime, rel, "", runtime_issues)
    issues.extend(runtime_issues)
    if has_errors(runtime_issues):
        message = next(i.message for i in runtime_issues if i.is_error)
        disabled = {"sourcePath": rel, "message": f"<plugin>/{rel}: {message}"}
        if runtime.output_contract:
            disabled["outputContract"] = runtime.output_contract
        manifest.disabled_runtimes.append(disabled)
        return
    manifest.runtimes.append(runtime)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def runtime_handler_language(runtime: RuntimeManifest) -> str | None:
    """"python" / "javascript" / "unknown" for a function runtime's handler, None for agents."""
    if runtime.function is None:
        return None
    return entry_language(runtime.function.handler) if runtime.function.handler else "unknown"


def text_resolve(value: Any, locale: str | None = None) -> str | None:
    """Pick a display string from a plain string or a locale map (exact, language, en, first)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or not value:
        return None
    if locale:
        if isinstance(value.get(locale), str):
            return value[locale]
        language = locale.split("-", 1)[0]
        for key, text in value.items():
            if isinstance(text, str) and key.split("-", 1)[0] == language:
                return text
    for key in ("en", "en-US"):
        if isinstance(value.get(key), str):
            return value[key]
    first = next(iter(value.values()))
    return first if isinstance(first, str) else None


def text_languages(*values: Any) -> list[str]:
    """Language tags present in locale maps (always includes "en")."""
    out = {"en"}
    for value in values:
        if isinstance(value, dict):
            out.update(k.split("-", 1)[0] for k in value if isinstance(k, str))
    return sorted(out)
