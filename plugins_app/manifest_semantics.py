"""Manifest rules JSON Schema cannot express: cross-field checks, tool and dataset references,
contract references and package paths (spec 000 数据集工具 / 导入的服务工具 / 挂起; spec 004 插件管理).

They run after schema validation on the same data and read only values of the right type, so a
wrongly typed field is reported once, by the schema.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from plugins_app.manifest_files import package_path_resolve
from plugins_app.toolkit.names import SEARCH_TOOLS
from plugins_app.trust import action_is_reserved
from plugins_app.manifest_types import (
    BUILTIN_TOOLS,
    CONTRACT_RE,
    DATASET_OPS,
    DATASET_TOOLS,
    DETACHABLE_STAGES,
    PLUGIN_FILE,
    TOOL_NAME_RE,
    Contributes,
    PluginManifest,
    RuntimeManifest,
    runtime_contract_refs,
)
from plugins_app.validation import (
    CODE_INVALID_FIELD,
    CODE_LEGACY_LAYOUT,
    CODE_MISSING_FIELD,
    CODE_PATH_OUTSIDE_PACKAGE,
    Issue,
    error,
    info,
    warning,
)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def runtime_semantics(meta: dict[str, Any], rel: str, prefix: str, issues: list[Issue]) -> None:
    """Cross-field runtime rules that a type check cannot express; appends to `issues`.

    meta: runtime frontmatter; rel: its file; prefix: "runtime." for the inline runtime of
    PLUGIN.md, "" for a RUNTIME.md. Codes: missing-field (stage of an auto trigger, topic of an
    event trigger, function.handler block, recordAs of a committed input), detached-stage,
    background-suspend (spec 000 挂起), tools-local (spec 000: 清单里没有 tools.local),
    dataset-reference (datasets on a function runtime), invalid-field, legacy-layout (warning).
    """
    schedule = meta.get("schedule") if isinstance(meta.get("schedule"), dict) else {}
    trig = schedule.get("trigger") if isinstance(schedule.get("trigger"), dict) else {}
    ttype = trig.get("type", "auto")
    stage = schedule.get("stage")
    p = f"{prefix}schedule"
    if ttype in ("auto", "scheduled") and stage is None and "schedule" in meta:
        issues.append(error(CODE_MISSING_FIELD, f"stage is required for trigger type {ttype}", rel, f"{p}.stage"))
    if ttype == "event" and not isinstance(trig.get("topic"), str):
        issues.append(error(CODE_MISSING_FIELD, "an event trigger needs a topic", rel, f"{p}.trigger.topic"))
    if ttype == "scheduled":
        issues.append(warning(CODE_LEGACY_LAYOUT, "trigger type 'scheduled' is legacy; use auto with every", rel, f"{p}.trigger.type"))
    completion = schedule.get("completion") if isinstance(schedule.get("completion"), dict) else {}
    is_detached = bool(schedule.get("detached")) or completion.get("mode") == "detached"
    if is_detached and stage not in DETACHABLE_STAGES:
        issues.append(error("detached-stage", "a detached runtime must run in stage post-turn or audit", rel, f"{p}.stage"))
    if "maxSettleWaitMs" in completion and "settle" not in completion:
        issues.append(error(CODE_INVALID_FIELD, "maxSettleWaitMs requires settle", rel, f"{p}.completion.maxSettleWaitMs"))
    is_background = schedule.get("background") is True or _dict(schedule.get("manual")).get("execution") == "background"
    if meta.get("type") == "function":
        if "agent" in meta:
            issues.append(error(CODE_INVALID_FIELD, "agent settings are not allowed on a function runtime", rel, f"{prefix}agent"))
        if "function" not in meta:
            issues.append(error(CODE_MISSING_FIELD, "a function runtime needs function.handler", rel, f"{prefix}function"))
        fn_tools = (meta.get("function") or {}).get("tools") if isinstance(meta.get("function"), dict) else None
        if isinstance(fn_tools, dict) and "datasets" in fn_tools:
            issues.append(error("dataset-reference", "function runtimes cannot select datasets; use ctx.pluginData", rel, f"{prefix}function.tools.datasets"))
    if meta.get("type") == "agent" and "function" in meta:
        issues.append(error(CODE_INVALID_FIELD, "function settings are not allowed on an agent runtime", rel, f"{prefix}function"))
    agent = meta.get("agent") if isinstance(meta.get("agent"), dict) else {}
    builtin = _list(_dict(agent.get("tools")).get("builtin"))
    if (is_background or is_detached) and "suspend" in builtin:
        issues.append(error("background-suspend", "background or detached runtimes cannot list suspend", rel, f"{prefix}agent.tools.builtin"))
    for tools_key in ("agent", "function"):
        block = meta.get(tools_key)
        if isinstance(block, dict) and isinstance(block.get("tools"), dict) and "local" in block["tools"]:
            issues.append(error("tools-local", "tools.local is not a manifest field; declare plugin tools in contributes.tools and list them in tools.plugin", rel, f"{prefix}{tools_key}.tools.local"))
    inputs = (meta.get("io") or {}).get("inputs") if isinstance(meta.get("io"), dict) else None
    if isinstance(inputs, dict):
        for name, binding in inputs.items():
            if not isinstance(binding, dict):
                continue
            source = binding.get("from") if isinstance(binding.get("from"), dict) else {}
            forms = [k for k in ("runtime", "contract", "kernel") if k in source]
            if len(forms) != 1:
                issues.append(error(CODE_INVALID_FIELD, "from needs exactly one of runtime, contract, kernel", rel, f"{prefix}io.inputs.{name}.from"))
            if binding.get("scope") == "committed":
                if "recordAs" not in binding:
                    issues.append(error(CODE_MISSING_FIELD, "scope committed needs recordAs", rel, f"{prefix}io.inputs.{name}.recordAs"))
                if "select" in binding:
                    issues.append(error(CODE_INVALID_FIELD, "select is not supported with scope committed", rel, f"{prefix}io.inputs.{name}.select"))
    output = (meta.get("io") or {}).get("output") if isinstance(meta.get("io"), dict) else None
    if isinstance(output, dict) and "recordAs" in output and "schema" not in output and "contract" not in output:
        issues.append(error(CODE_INVALID_FIELD, "output.recordAs requires schema", rel, f"{prefix}io.output.recordAs"))


def tool_references_check(manifest: PluginManifest, runtime: RuntimeManifest, rel: str, prefix: str, issues: list[Issue]) -> None:
    """agent.tools.* / function.tools.* references against contributes, datasets and services.

    Unknown builtin or undeclared plugin tools are warnings `tool-reference` (older upstream
    manifests rely on them; the engine just does not offer the tool). Duplicate or colliding
    service imports are `service-import` errors, undeclared or colliding datasets
    `dataset-reference` errors (spec 000 数据集工具, 导入的服务工具).
    """
    if runtime.agent is None and runtime.function is None:
        return
    tools = runtime.agent.tools if runtime.agent else runtime.function.tools  # type: ignore[union-attr]
    block = "agent" if runtime.agent else "function"
    contributed = set(manifest.contributes.tools)
    for index, name in enumerate(tools.builtin):
        if name == SEARCH_TOOLS:
            # Injected by the framework when tools.defer is declared; never listed by hand (spec 000 §search-tools).
            issues.append(error("tool-reference", "search-tools is injected by the framework when tools.defer is declared; "
                                "do not list it in tools.builtin", rel, f"{prefix}{block}.tools.builtin.{index}"))
        elif name not in BUILTIN_TOOLS:
            issues.append(warning("tool-reference", f"unknown builtin tool {name!r}", rel, f"{prefix}{block}.tools.builtin.{index}"))
    for index, name in enumerate(tools.plugin):
        if name not in contributed:
            issues.append(warning("tool-reference", f"tool {name!r} is not declared in contributes.tools", rel, f"{prefix}{block}.tools.plugin.{index}"))
    taken = set(BUILTIN_TOOLS) | set(tools.builtin) | set(tools.plugin) | contributed
    seen_services: set[str] = set()
    service_names: set[str] = set()
    for index, imp in enumerate(tools.services):
        field_path = f"{prefix}{block}.tools.services.{index}"
        if imp.contract in seen_services:
            issues.append(error("service-import", f"contract {imp.contract} is imported twice", rel, field_path))
        seen_services.add(imp.contract)
        if not TOOL_NAME_RE.match(imp.tool_name):
            issues.append(error("service-import", f"tool name {imp.tool_name!r} is invalid or longer than 64; set `as`", rel, field_path))
        if imp.tool_name in taken or imp.tool_name in service_names:
            issues.append(error("service-import", f"tool name {imp.tool_name!r} collides with another tool", rel, field_path))
        service_names.add(imp.tool_name)
    if isinstance(tools.defer, tuple):
        whitelisted = set(tools.builtin) | set(tools.plugin) | service_names | {
            f"{sel.dataset}-{tool}" for sel in tools.datasets
            for tool in (sel.tools or dataset_tools(manifest.contributes.datasets.get(sel.dataset) or {}))}
        if not tools.plugin_declared:
            whitelisted |= contributed
        for index, name in enumerate(tools.defer):
            if name == SEARCH_TOOLS:
                issues.append(error("tool-reference", "search-tools cannot be deferred: it is the tool that loads deferred tools",
                                    rel, f"{prefix}{block}.tools.defer.{index}"))
            elif name not in whitelisted:
                issues.append(warning("tool-reference", f"deferred tool {name!r} is not in this runtime's tool whitelist",
                                      rel, f"{prefix}{block}.tools.defer.{index}"))
    if runtime.agent is not None:
        for name in _list(runtime.agent.completion.get("afterTools")):
            if isinstance(name, str) and name in service_names:
                issues.append(error("service-import", f"imported service tool {name!r} cannot complete a runtime", rel, f"{prefix}agent.completion.afterTools"))
    seen_datasets: set[str] = set()
    for index, sel in enumerate(tools.datasets):
        field_path = f"{prefix}{block}.tools.datasets.{index}"
        declared = manifest.contributes.datasets.get(sel.dataset)
        if sel.dataset in seen_datasets:
            issues.append(error("dataset-reference", f"dataset {sel.dataset!r} is listed twice", rel, field_path))
            continue
        seen_datasets.add(sel.dataset)
        if declared is None:
            issues.append(error("dataset-reference", f"dataset {sel.dataset!r} is not declared in contributes.datasets", rel, field_path))
            continue
        offered = dataset_tools(declared)
        for j, tool in enumerate(sel.tools or ()):
            if tool not in offered:
                issues.append(error("dataset-reference", f"dataset {sel.dataset!r} does not provide {tool!r}", rel, f"{field_path}.tools.{j}"))
        for tool in sel.tools or offered:
            generated = f"{sel.dataset}-{tool}"
            if len(generated) > 64:
                issues.append(error("dataset-reference", f"generated tool name {generated!r} exceeds 64 characters", rel, field_path))
            elif generated in taken or generated in service_names:
                issues.append(error("dataset-reference", f"generated tool name {generated!r} collides with another tool", rel, field_path))


def dataset_tools(declaration: dict[str, Any]) -> tuple[str, ...]:
    """Tools a dataset provides: `tools` as declared, else get+list, upsert if ops has set, update if
    ops has anything else (spec 000 数据集工具). ops defaults to ["set"]."""
    declared = declaration.get("tools")
    if isinstance(declared, list):
        return tuple(t for t in DATASET_TOOLS if t in declared)
    ops = declaration.get("ops") if isinstance(declaration.get("ops"), list) else ["set"]
    out = ["get", "list"]
    if "set" in ops:
        out.append("upsert")
    if any(op != "set" for op in ops):
        out.append("update")
    return tuple(out)


def contributes_semantics(contributes: Contributes, issues: list[Issue]) -> None:
    """Rules over contributes: duplicate declarations, tool names (and no framework tool
    shadowed), versioned service ids, command actions and arguments, dataset names/ops/tools,
    reserved `_` data namespaces. Issues name PLUGIN.md."""
    rel = PLUGIN_FILE
    for key, names in (("tools", contributes.tools), ("actions", contributes.actions), ("forms", contributes.forms),
                       ("services", contributes.services), ("wires", contributes.wires)):
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                issues.append(error("duplicate-declaration", f"{name!r} is declared twice", rel, f"contributes.{key}.{index}"))
            seen.add(name)
    for index, name in enumerate(contributes.tools):
        if not TOOL_NAME_RE.match(name):
            issues.append(error(CODE_INVALID_FIELD, f"invalid tool name {name!r}", rel, f"contributes.tools.{index}"))
        elif name in BUILTIN_TOOLS:
            issues.append(error("duplicate-declaration", f"tool {name!r} shadows a framework tool", rel, f"contributes.tools.{index}"))
    for index, name in enumerate(contributes.actions):
        # Framework approval keys are not action names (spec 000: 保留前缀规则在声明、注册和请求处都校验).
        if action_is_reserved(name):
            issues.append(error(CODE_INVALID_FIELD, f"action {name!r} uses a reserved framework prefix", rel, f"contributes.actions.{index}"))
    for index, contract in enumerate(contributes.services):
        if not CONTRACT_RE.match(contract):
            issues.append(error(CODE_INVALID_FIELD, f"service {contract!r} must be a versioned contract id (name@N)", rel, f"contributes.services.{index}"))
    for index, command in enumerate(contributes.commands):
        if isinstance(command.get("action"), str) and command["action"] not in contributes.actions:
            issues.append(error("command-action", f"command action {command['action']!r} is not listed in contributes.actions", rel, f"contributes.commands.{index}.action"))
        args = _list(command.get("arguments"))
        names = [a.get("name") for a in args if isinstance(a, dict) and isinstance(a.get("name"), Hashable)]
        if len(names) != len(set(names)):
            issues.append(error(CODE_INVALID_FIELD, "argument names must be unique", rel, f"contributes.commands.{index}.arguments"))
        for j, arg in enumerate(args[:-1]):
            if isinstance(arg, dict) and arg.get("variadic"):
                issues.append(error(CODE_INVALID_FIELD, "only the last argument can be variadic", rel, f"contributes.commands.{index}.arguments.{j}.variadic"))
    seen_topics: set[str] = set()
    for index, event in enumerate(contributes.events):
        topic = event.get("topic")
        if not isinstance(topic, Hashable):
            continue  # reported by the schema
        if topic in seen_topics:
            issues.append(error("duplicate-declaration", f"event topic {topic!r} is declared twice", rel, f"contributes.events.{index}.topic"))
        seen_topics.add(topic)
    for name, dataset in contributes.datasets.items():
        if not (isinstance(name, str) and re.match(r"^[a-z][a-z0-9-]*$", name)):
            issues.append(error(CODE_INVALID_FIELD, "dataset names start with a lowercase letter (letters, digits, hyphens)", rel, f"contributes.datasets.{name}"))
        for j, op in enumerate(_list(dataset.get("ops"))):
            if op not in DATASET_OPS:
                issues.append(error(CODE_INVALID_FIELD, f"unknown dataset op {op!r}", rel, f"contributes.datasets.{name}.ops.{j}"))
        for j, tool in enumerate(_list(dataset.get("tools"))):
            if tool not in DATASET_TOOLS:
                issues.append(error(CODE_INVALID_FIELD, f"unknown dataset tool {tool!r}", rel, f"contributes.datasets.{name}.tools.{j}"))
    for name in contributes.data:
        if isinstance(name, str) and name.startswith("_"):
            issues.append(error(CODE_INVALID_FIELD, "namespaces starting with _ are reserved for the framework", rel, f"contributes.data.{name}"))
    seen_kinds: set[str] = set()
    for index, kind in enumerate(contributes.action_kinds):
        name = kind.get("name")
        if not isinstance(name, Hashable):
            continue  # reported by the schema
        if name in seen_kinds:
            issues.append(error("duplicate-declaration", f"action kind {name!r} is declared twice", rel, f"contributes.actionKinds.{index}.name"))
        seen_kinds.add(name)


def runtime_paths_check(root: Path, runtime: RuntimeManifest, rel: str, prefix: str, issues: list[Issue]) -> None:
    """function.handler and guard must stay inside the package (path-outside-package)."""
    if runtime.function is not None and runtime.function.handler:
        handler = runtime.function.handler.split(":", 1)[0]
        if package_path_resolve(root, handler, base_dir=runtime.directory) is None:
            issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "handler path leaves the package", rel, f"{prefix}function.handler"))
    if runtime.guard and package_path_resolve(root, runtime.guard, base_dir=runtime.directory) is None:
        issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "guard path leaves the package", rel, f"{prefix}guard"))


def contract_references_check(manifest: PluginManifest, issues: list[Issue]) -> None:
    """An output contract missing from `provides` is a warning; a contract read but not listed
    in requires/optional/provides is an info (`contract-reference`)."""
    provided = {p["contract"] for p in manifest.provides}
    known = provided | set(manifest.requires) | set(manifest.optional) | set(manifest.conflicts)
    for contract in manifest.contributes.data.values():
        known.update(c for c in _list(contract.get("accepts")) if isinstance(c, str))
    for runtime in manifest.runtimes:
        out = runtime.output_contract
        if out and out not in provided:
            issues.append(warning("contract-reference", f"output contract {out} is not listed in provides", runtime.source_path,
                                  ("runtime." if runtime.source_path == PLUGIN_FILE else "") + "io.output.contract"))
        for ref in runtime_contract_refs(runtime):
            if ref not in known:
                issues.append(info("contract-reference", f"contract {ref} is not listed in requires or optional", runtime.source_path))
