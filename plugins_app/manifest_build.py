"""Building the manifest dataclasses from validated frontmatter (pure Python).

The builders run after schema validation and never raise: a value of the wrong type (already
reported as an issue) is skipped, so a package with errors still yields a best-effort summary.
"""

from __future__ import annotations

from typing import Any

from plugins_app.manifest_types import (
    JAVASCRIPT_SUFFIXES,
    PYTHON_SUFFIXES,
    RUNTIME_TYPES,
    STAGES,
    VISIBILITIES,
    AgentConfig,
    Contributes,
    DatasetSelection,
    FunctionConfig,
    RuntimeManifest,
    ServiceImport,
    ToolSelection,
    Trigger,
)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ints(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tool_selection(raw: Any) -> ToolSelection:
    """agent.tools / function.tools → ToolSelection (services get their default tool name)."""
    if not isinstance(raw, dict):
        return ToolSelection()
    datasets: list[DatasetSelection] = []
    for item in _list(raw.get("datasets")):
        if isinstance(item, str):
            datasets.append(DatasetSelection(item))
        elif isinstance(item, dict) and isinstance(item.get("dataset"), str):
            picked = item.get("tools")
            datasets.append(DatasetSelection(item["dataset"], tuple(picked) if isinstance(picked, list) else None))
    services: list[ServiceImport] = []
    for item in _list(raw.get("services")):
        contract = item if isinstance(item, str) else item.get("contract") if isinstance(item, dict) else None
        if not isinstance(contract, str):
            continue
        alias = item.get("as") if isinstance(item, dict) else None
        services.append(ServiceImport(contract, alias if isinstance(alias, str) else service_tool_name(contract)))
    defer = raw.get("defer", False)
    return ToolSelection(
        builtin=tuple(v for v in _list(raw.get("builtin")) if isinstance(v, str)),
        plugin=tuple(v for v in _list(raw.get("plugin")) if isinstance(v, str)),
        datasets=tuple(datasets),
        services=tuple(services),
        defer=tuple(defer) if isinstance(defer, list) else bool(defer),
        plugin_declared="plugin" in raw,
    )


def service_tool_name(contract: str) -> str:
    """Default tool name of an imported service: drop the version, '.' → '-' (spec 000)."""
    return contract.split("@", 1)[0].replace(".", "-")


def runtime_build(
    meta: dict[str, Any], body: str, *, plugin_id: str, local_id: str, runtime_id: str,
    source_path: str, directory: str,
) -> RuntimeManifest:
    """One RuntimeManifest from runtime frontmatter (the inline `runtime:` or a RUNTIME.md).

    body: the markdown body (the agent's prompt); source_path: package-relative manifest file;
    directory: package-relative folder handler and guard paths resolve against ("" = root).
    `schedule.detached` (legacy) folds into `completion` with mode detached.
    """
    schedule = meta.get("schedule") if isinstance(meta.get("schedule"), dict) else {}
    trig = schedule.get("trigger") if isinstance(schedule.get("trigger"), dict) else {}
    trigger = Trigger(
        type=trig.get("type", "auto") if isinstance(trig.get("type"), str) else "auto",
        topic=trig.get("topic") if isinstance(trig.get("topic"), str) else None,
        interval=_ints(trig, "interval") or _ints(trig, "every") or _ints(schedule, "every"),
        max_trigger_count=_ints(trig, "maxTriggerCount"),
        cooldown_turns=_ints(trig, "cooldownTurns"),
        start_turn=_ints(trig, "startTurn"),
    )
    completion = schedule.get("completion") if isinstance(schedule.get("completion"), dict) else {}
    manual = schedule.get("manual") if isinstance(schedule.get("manual"), dict) else {}
    detached_raw = schedule.get("detached")
    is_detached = bool(detached_raw) or completion.get("mode") == "detached"
    if isinstance(detached_raw, dict):
        completion = {**completion, **detached_raw, "mode": "detached"}
    io = meta.get("io") if isinstance(meta.get("io"), dict) else {}
    agent = None
    function = None
    if meta.get("type") == "agent":
        raw_agent = meta.get("agent") if isinstance(meta.get("agent"), dict) else {}
        loop = dict(_dict(raw_agent.get("loop")))
        loop_completion = loop.pop("completion", None)
        agent_completion = raw_agent.get("completion") if isinstance(raw_agent.get("completion"), dict) else _dict(loop_completion)
        history = raw_agent.get("history") if isinstance(raw_agent.get("history"), dict) else {}
        agent = AgentConfig(
            model=raw_agent.get("model") if isinstance(raw_agent.get("model"), str) else None,
            tools=tool_selection(raw_agent.get("tools")),
            loop=loop,
            completion=dict(agent_completion),
            llm=dict(raw_agent.get("llm") or {}) if isinstance(raw_agent.get("llm"), dict) else {},
            history_max_turns=_ints(history, "maxTurns"),
            advertise_events=raw_agent.get("advertiseEvents") is True,
        )
    elif meta.get("type") == "function":
        raw_fn = meta.get("function") if isinstance(meta.get("function"), dict) else {}
        function = FunctionConfig(
            handler=raw_fn.get("handler", "") if isinstance(raw_fn.get("handler"), str) else "",
            model=raw_fn.get("model") if isinstance(raw_fn.get("model"), str) else None,
            timeout_ms=_ints(raw_fn, "timeoutMs"),
            tools=tool_selection(raw_fn.get("tools")),
        )

    def refs(key: str) -> list[dict[str, Any]]:
        out = []
        for item in _list(schedule.get(key)):
            if isinstance(item, str):
                out.append({"runtime": item})
            elif isinstance(item, dict):
                out.append(dict(item))
        return out

    return RuntimeManifest(
        id=runtime_id,
        plugin_id=plugin_id,
        local_id=local_id,
        runtime_type=meta.get("type") if meta.get("type") in RUNTIME_TYPES else "agent",
        source_path=source_path,
        directory=directory,
        description=meta.get("description"),
        stage=schedule.get("stage") if schedule.get("stage") in STAGES else None,
        trigger=trigger,
        is_background=schedule.get("background") is True or manual.get("execution") == "background",
        is_detached=is_detached,
        is_subagent_only=schedule.get("subagentOnly") is True,
        completion=dict(completion),
        needs=refs("needs"),
        after=refs("after"),
        inputs={k: dict(v) for k, v in (io.get("inputs") or {}).items() if isinstance(v, dict)} if isinstance(io.get("inputs"), dict) else {},
        self_data=[dict(v) for v in io.get("selfData") or [] if isinstance(v, dict)] if isinstance(io.get("selfData"), list) else [],
        output=dict(io.get("output") or {}) if isinstance(io.get("output"), dict) else {},
        visibility=io.get("visibility") if io.get("visibility") in VISIBILITIES else "plugin",
        is_concealed=io.get("concealed") is True,
        agent=agent,
        function=function,
        guard=meta.get("guard") if isinstance(meta.get("guard"), str) else None,
        effects=dict(meta.get("effects") or {}) if isinstance(meta.get("effects"), dict) else {},
        permissions=dict(meta.get("permissions") or {}) if isinstance(meta.get("permissions"), dict) else {},
        prompt=body,
        raw=meta,
    )


def contributes_build(raw: Any) -> Contributes:
    """contributes → Contributes, keeping the entries of the declared shape only."""
    if not isinstance(raw, dict):
        return Contributes()

    def lst(key: str, item_type: type) -> list:
        value = raw.get(key)
        return [v for v in value if isinstance(v, item_type)] if isinstance(value, list) else []

    def mp(key: str) -> dict:
        value = raw.get(key)
        return {k: v for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}

    ui_raw = raw.get("ui") if isinstance(raw.get("ui"), dict) else {}
    return Contributes(
        tools=lst("tools", str), actions=lst("actions", str), commands=lst("commands", dict),
        services=lst("services", str), extensions=lst("extensions", dict), hooks=lst("hooks", dict),
        wires=lst("wires", str), forms=lst("forms", str), events=lst("events", dict),
        settings=lst("settings", dict), data=mp("data"), datasets=mp("datasets"),
        ui={slot: [p for p in paths if isinstance(p, str)] for slot, paths in ui_raw.items() if isinstance(paths, list)},
        world_projections=mp("worldProjections"), prompt=lst("prompt", dict), action_kinds=lst("actionKinds", dict),
    )


def entry_language(entry: str | None) -> str | None:
    """"python" / "javascript" / "unknown" by the suffix of an entry or handler path (None for None)."""
    if entry is None:
        return None
    base = entry.split(":", 1)[0]
    if base.endswith(PYTHON_SUFFIXES):
        return "python"
    if base.endswith(JAVASCRIPT_SUFFIXES):
        return "javascript"
    return "unknown"
