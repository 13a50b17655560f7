"""Old upstream manifest layout (pluginType / runtimeType / top-level trigger, nested
runtimes/<rid>/PLUGIN.md) read through a documented translation.

The translation runs before schema validation: it maps the old keys onto the current layout
(plugins_app/schemas/plugin.json, runtime.json) and records a `legacy-layout` warning, so the
declarative parts of old packages are still listed. Old keys that have no counterpart are
dropped with an `info`; keys neither layout knows are `unknown-field` warnings (see
`legacy_unknown_keys`).
"""

from __future__ import annotations

from typing import Any

from plugins_app.manifest_types import VISIBILITIES
from plugins_app.validation import CODE_LEGACY_LAYOUT, Issue, info, schema_document, warning

# Old upstream layout keys (pluginType/runtimeType era) and where they go.
LEGACY_KEYS = {
    "name", "pluginType", "runtimeType", "resultFormat", "handler", "priority", "stage", "timeoutMs",
    "outputKind", "capabilities", "trigger", "ui", "userSettings", "model", "execution", "maxSteps",
    "maxRetries", "callTimeoutMs", "firstTokenTimeoutMs", "requireToolUse", "completeAfterTools",
    "output", "tools", "input",
}


def legacy_translate(meta: dict[str, Any], rel: str, issues: list[Issue]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Translate an old upstream manifest into (package fields, runtime fields or None).

    Appends the `legacy-layout` warning (and an info per dropped field) to `issues`. Values are
    moved, not checked: a wrongly typed one is reported by the schema validation of the result.
    """
    issues.append(warning(CODE_LEGACY_LAYOUT, "old manifest layout (pluginType/runtimeType); read through the legacy translation", rel))
    pkg: dict[str, Any] = {}
    for key in ("displayName", "description", "tags", "version", "author", "license", "homepage",
                "provides", "requires", "optional", "conflicts", "contracts", "entry", "contributes", "id", "kind"):
        if key in meta:
            pkg[key] = meta[key]
    if "id" not in pkg and isinstance(meta.get("name"), str):
        pkg["id"] = meta["name"]
    if "kind" not in pkg:
        pkg["kind"] = meta.get("pluginType", "plugin")
    # A contributes that is not an object stays as written, for the schema to report.
    if isinstance(pkg.get("contributes"), dict) or not pkg.get("contributes"):
        contributes = dict(pkg.get("contributes") or {})
        if "userSettings" in meta:
            contributes.setdefault("settings", meta["userSettings"])
        if isinstance(meta.get("ui"), dict):
            contributes.setdefault("ui", meta["ui"])
        tools_plugin = (meta.get("tools") or {}).get("plugin") if isinstance(meta.get("tools"), dict) else None
        if tools_plugin and isinstance(tools_plugin, list | str):
            contributes.setdefault("tools", list(tools_plugin))
        if contributes:
            pkg["contributes"] = contributes
    tools = meta.get("tools") if isinstance(meta.get("tools"), dict) else {}
    for dropped in ("capabilities", "priority", "resultFormat"):
        if dropped in meta:
            issues.append(info(CODE_LEGACY_LAYOUT, "legacy field ignored", rel, dropped))

    is_agent = meta.get("runtimeType") == "agent" or (meta.get("runtimeType") is None and ("model" in meta or tools))
    if meta.get("runtimeType") is None and not is_agent:
        return pkg, None
    runtime: dict[str, Any] = {"type": "agent" if is_agent else meta.get("runtimeType")}
    schedule: dict[str, Any] = {}
    if "stage" in meta:
        schedule["stage"] = meta["stage"]
    if isinstance(meta.get("trigger"), dict):
        schedule["trigger"] = meta["trigger"]
    if meta.get("execution") == "background":
        schedule["background"] = True
    if schedule:
        runtime["schedule"] = schedule
    io: dict[str, Any] = {}
    if meta.get("outputKind") in VISIBILITIES:
        io["visibility"] = meta["outputKind"]
    if isinstance(meta.get("output"), dict):
        io["output"] = meta["output"]
    inject = (meta.get("input") or {}).get("inject") if isinstance(meta.get("input"), dict) else None
    if isinstance(inject, list):
        io["selfData"] = [
            {k: v for k, v in item.items() if k in ("namespace", "as", "format", "maxEntries")}
            for item in inject
            if isinstance(item, dict) and item.get("kind") == "plugin-data"
        ]
    if io:
        runtime["io"] = io
    if is_agent:
        agent: dict[str, Any] = {}
        if "model" in meta:
            agent["model"] = meta["model"]
        if tools:
            agent["tools"] = {k: v for k, v in tools.items() if k in ("builtin", "plugin")}
        loop = {k: meta[k] for k in ("maxSteps", "maxRetries", "callTimeoutMs", "firstTokenTimeoutMs", "timeoutMs") if k in meta}
        if loop:
            agent["loop"] = loop
        completion: dict[str, Any] = {}
        if meta.get("requireToolUse"):
            completion["require"] = "tool-use"
        if meta.get("completeAfterTools"):
            completion["afterTools"] = meta["completeAfterTools"]
        if completion:
            agent["completion"] = completion
        runtime["agent"] = agent
    else:
        function: dict[str, Any] = {"handler": meta.get("handler", "")}
        if "timeoutMs" in meta:
            function["timeoutMs"] = meta["timeoutMs"]
        runtime["function"] = function
    return pkg, runtime


def is_legacy(meta: dict[str, Any]) -> bool:
    """Whether a manifest uses the old layout (pluginType / runtimeType, or `name` without id and kind)."""
    return any(key in meta for key in ("pluginType", "runtimeType")) or ("name" in meta and "id" not in meta and "kind" not in meta)


def legacy_unknown_keys(meta: dict[str, Any]) -> list[str]:
    """Top-level keys of an old-layout manifest that neither layout declares (sorted)."""
    known = LEGACY_KEYS | set(schema_document("plugin.json")["properties"])
    return sorted((key for key in meta if key not in known), key=str)
