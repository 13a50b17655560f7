"""Plugin manifests: parse and validate PLUGIN.md / RUNTIME.md into dataclasses.

Pure Python (no Django). Entry point: `plugin_manifest_load(root, expected_id=None)`.

Package layout (spec 004 "插件管理"; upstream docs/reference/schema/plugin-manifest.md):

    <plugin-id>/PLUGIN.md                 YAML frontmatter (package manifest) + instructions body
    <plugin-id>/runtimes/<rid>/RUNTIME.md one more runtime each (frontmatter + prompt body)
    <plugin-id>/server/entry.py           optional Python entry, named by `entry:` (see discovery)

Runtime ids: the inline `runtime:` of PLUGIN.md has id `<plugin-id>`; `runtimes/<rid>/RUNTIME.md`
has id `<plugin-id>/<rid>`. Both layouts in one package are allowed only when ids do not collide.

Validation rules (each produces an `Issue` with file and field):
- unknown fields → warning `unknown-field` (reported in PluginSummary.ignoredFields, never fatal);
- wrong types / enum values / missing required fields → error `invalid-field` / `missing-field`;
- `agent.tools.local` → error `tools-local` (spec 000: "清单里没有 tools.local，写了它的清单加载失败");
- a background/detached runtime listing `suspend` → error `background-suspend` (spec 000 "挂起");
- `schedule.completion.mode: detached` / `schedule.detached` outside post-turn/audit → error;
- duplicate runtime ids → error `duplicate-runtime`;
- dataset / service tool references (spec 000 "数据集工具", "导入的服务工具") → error `dataset-reference`,
  `service-import`;
- references to undeclared plugin tools / contracts / commands → warning (older upstream manifests
  rely on them; the engine simply will not offer an undeclared tool).
Errors in PLUGIN.md make the whole package fail; errors confined to one RUNTIME.md disable that
runtime only (`disabled_runtimes`, spec 004 PluginSummary.disabledRuntimes).

Older upstream manifests (`pluginType` / `runtimeType` / top-level `trigger`, nested
`runtimes/<rid>/PLUGIN.md`) are read through a documented translation with a `legacy-layout`
warning, so their declarative parts are still listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import yaml

from covel.jsonbody import unstorable_json_problem
from covel.yamlio import frontmatter_parse
from plugins_app.validation import (
    CODE_FILE_INVALID,
    CODE_ID_MISMATCH,
    CODE_IDENTITY_INVALID,
    CODE_INVALID_FIELD,
    CODE_LEGACY_LAYOUT,
    CODE_MANIFEST_INVALID,
    CODE_MANIFEST_MISSING,
    CODE_MISSING_FIELD,
    CODE_PATH_OUTSIDE_PACKAGE,
    CODE_UNKNOWN_FIELD,
    Issue,
    error,
    has_errors,
    info,
    warning,
)

PLUGIN_FILE = "PLUGIN.md"
RUNTIME_FILE = "RUNTIME.md"
RUNTIMES_DIR = "runtimes"

PLUGIN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
CONTRACT_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*@[0-9]+$")

# Manifest enums (also served by GET /api/framework/capabilities).
PLUGIN_KINDS = ("core", "plugin")
RUNTIME_TYPES = ("agent", "function")
TRIGGER_TYPES = ("auto", "manual", "event")
LEGACY_TRIGGER_TYPES = ("scheduled",)  # upstream docs: runs every `interval` turns
STAGES = ("setup", "pre-turn", "narrative", "post-turn", "audit")
DETACHABLE_STAGES = ("post-turn", "audit")
VISIBILITIES = ("story", "plugin", "system")
OUTPUT_KINDS = ("story", "system")
EXECUTION_MODES = ("sync", "background")
COMPLETION_MODES = ("await", "detached")
COMPLETION_REQUIRE = ("explicit", "tool-use")
INPUT_INJECT_KINDS = ("runtime", "plugin-data", "runtime-export", "kernel")
UI_SLOTS = ("right", "message", "view", "segment", "left")
HOOK_EVENTS = (
    "SessionStart", "TurnStart", "PreCompaction", "PostCompaction", "PreSchedule", "PreRuntime",
    "PostContextAssembly", "PreLLMCall", "PostLLMResponse", "PostRuntime", "PreToolUse",
    "PostToolUse", "PreStateCommit", "PostStateCommit", "TurnStop", "SessionEnd",
)
HOOK_ENFORCE = ("pre", "normal", "post")
DATASET_TOOLS = ("get", "list", "upsert", "update")
DATASET_OPS = ("set", "merge", "delete", "increment", "append", "remove", "insert", "replace", "unset")
ACTION_KIND_TEXT = ("required", "optional", "none")
SELF_DATA_FORMATS = ("summary", "full", "ids-only")

# Framework tools (spec 000 概览, source builtin/注入). Dataset and service tools may not shadow them.
BUILTIN_TOOLS = (
    "create-form", "create-choices", "create-notification", "render-ui", "sync-characters",
    "list-characters", "get-character", "world-dimension-get", "world-dimension-list",
    "emit-event", "suspend", "runtime-done", "delegate", "memory-search", "search-tools",
)

PYTHON_SUFFIXES = (".py",)
JAVASCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts")


# --------------------------------------------------------------------------------------------
# Dataclasses other engineers consume
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trigger:
    """schedule.trigger: type auto|manual|event (|scheduled, legacy: every `interval` turns)."""

    type: str
    topic: str | None = None
    interval: int | None = None
    max_trigger_count: int | None = None
    cooldown_turns: int | None = None
    start_turn: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for key, value in (
            ("topic", self.topic), ("every", self.interval), ("maxTriggerCount", self.max_trigger_count),
            ("cooldownTurns", self.cooldown_turns), ("startTurn", self.start_turn),
        ):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class DatasetSelection:
    """One agent.tools.datasets item: dataset name and the tools picked (None = all it provides)."""

    dataset: str
    tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ServiceImport:
    """One agent.tools.services item: imported contract and the generated tool name."""

    contract: str
    tool_name: str


@dataclass(frozen=True)
class ToolSelection:
    """agent.tools / function.tools: builtin + plugin names, dataset and service imports, defer."""

    builtin: tuple[str, ...] = ()
    plugin: tuple[str, ...] = ()
    datasets: tuple[DatasetSelection, ...] = ()
    services: tuple[ServiceImport, ...] = ()
    defer: bool | tuple[str, ...] = False
    plugin_declared: bool = False  # False → a single-runtime package gets every contributed tool


@dataclass(frozen=True)
class AgentConfig:
    """agent: model slot, tool whitelist, loop limits (ms), completion rule, llm options."""

    model: str | None = None
    tools: ToolSelection = ToolSelection()
    loop: dict[str, Any] = field(default_factory=dict)  # maxSteps, timeoutMs, callTimeoutMs, ...
    completion: dict[str, Any] = field(default_factory=dict)  # {require?, afterTools?}
    llm: dict[str, Any] = field(default_factory=dict)
    history_max_turns: int | None = None
    advertise_events: bool = False


@dataclass(frozen=True)
class FunctionConfig:
    """function: handler path relative to the runtime directory ("./handler.py[:func]")."""

    handler: str
    model: str | None = None
    timeout_ms: int | None = None
    tools: ToolSelection = ToolSelection()


@dataclass
class RuntimeManifest:
    """One runtime of a plugin (inline `runtime:` or runtimes/<rid>/RUNTIME.md).

    id: "<pluginId>" for the inline runtime, "<pluginId>/<rid>" otherwise.
    stage: None only for manual/event runtimes without a stage. is_background: runs as a durable
    job when activated manually/by event (schedule.background / schedule.manual.execution).
    is_detached: the turn does not wait for it (schedule.detached / completion.mode detached).
    prompt: the markdown body (agent system prompt). source_path: package-relative manifest path.
    """

    id: str
    plugin_id: str
    local_id: str
    runtime_type: str
    source_path: str
    directory: str  # package-relative directory handler/ui paths resolve against ("" = root)
    description: Any = None
    stage: str | None = None
    trigger: Trigger = Trigger("auto")
    is_background: bool = False
    is_detached: bool = False
    is_subagent_only: bool = False
    completion: dict[str, Any] = field(default_factory=dict)  # schedule.completion as written
    needs: list[dict[str, Any]] = field(default_factory=list)
    after: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    self_data: list[dict[str, Any]] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)
    visibility: str = "plugin"
    is_concealed: bool = False
    agent: AgentConfig | None = None
    function: FunctionConfig | None = None
    guard: str | None = None
    effects: dict[str, Any] = field(default_factory=dict)
    permissions: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def output_contract(self) -> str | None:
        return self.output.get("contract")

    @property
    def turn_completion(self) -> str:
        return "detached" if self.is_detached else "await"

    def summary(self) -> dict[str, Any]:
        """Runtime summary as listed in PluginSummary.runtimes (spec 004 GET /api/plugins)."""
        out: dict[str, Any] = {
            "id": self.id,
            "runtimeType": self.runtime_type,
            "trigger": self.trigger.as_dict(),
            "execution": "background" if self.is_background else "sync",
            "turnCompletion": self.turn_completion,
            "outputKind": self.visibility,
            "stage": self.stage,
            "docPath": self.source_path,
        }
        if self.description is not None:
            out["description"] = self.description
        if self.output_contract:
            out["outputContract"] = self.output_contract
        if self.is_subagent_only:
            out["subagentOnly"] = True
        return out

    def detail(self) -> dict[str, Any]:
        """Full runtime development contract for PluginDetail.runtimes[]."""
        out = self.summary()
        out.update({
            "needs": self.needs,
            "after": self.after,
            "inputs": self.inputs,
            "selfData": self.self_data,
            "output": self.output,
            "concealed": self.is_concealed,
            "effects": self.effects,
            "completion": self.completion,
        })
        if self.agent is not None:
            tools = self.agent.tools
            out["agent"] = {
                "model": self.agent.model,
                "tools": {
                    "builtin": list(tools.builtin),
                    "plugin": list(tools.plugin),
                    "datasets": [{"dataset": d.dataset, "tools": list(d.tools) if d.tools else None} for d in tools.datasets],
                    "services": [{"contract": s.contract, "as": s.tool_name} for s in tools.services],
                    "defer": list(tools.defer) if isinstance(tools.defer, tuple) else tools.defer,
                },
                "loop": self.agent.loop,
                "completion": self.agent.completion,
            }
        if self.function is not None:
            out["function"] = {"handler": self.function.handler, "timeoutMs": self.function.timeout_ms}
        return out


@dataclass
class Contributes:
    """contributes.*: package-level declarations. Every entry registration needs one here."""

    tools: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    extensions: list[dict[str, Any]] = field(default_factory=list)
    hooks: list[dict[str, Any]] = field(default_factory=list)
    wires: list[str] = field(default_factory=list)
    forms: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    settings: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    ui: dict[str, list[str]] = field(default_factory=dict)
    world_projections: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompt: list[dict[str, Any]] = field(default_factory=list)
    action_kinds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def event_topics(self) -> list[str]:
        return [e["topic"] for e in self.events if isinstance(e, dict) and isinstance(e.get("topic"), str)]


@dataclass
class PluginManifest:
    """A parsed plugin package. `issues` holds every diagnostic (file-relative paths).

    entry: package-relative entry path or None; entry_language: "python" | "javascript" |
    "unknown" | None. runtimes: the usable runtimes; disabled_runtimes: [{sourcePath, message,
    outputContract?}] for runtimes dropped because their RUNTIME.md had errors.
    """

    id: str
    root: Path
    kind: str = "plugin"
    version: str | None = None
    display_name: Any = None
    description: Any = None
    tags: list[str] = field(default_factory=list)
    author: dict[str, Any] | None = None
    license: str | None = None
    homepage: str | None = None
    provides: list[dict[str, Any]] = field(default_factory=list)  # [{contract, default}]
    requires: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    entry: str | None = None
    entry_language: str | None = None
    contributes: Contributes = field(default_factory=Contributes)
    runtimes: list[RuntimeManifest] = field(default_factory=list)
    disabled_runtimes: list[dict[str, Any]] = field(default_factory=list)
    body: str = ""
    is_legacy_layout: bool = False
    issues: list[Issue] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        """True when the package itself cannot load (errors outside disabled runtimes)."""
        disabled_files = {d["sourcePath"] for d in self.disabled_runtimes}
        return any(i.is_error and i.file not in disabled_files for i in self.issues)

    @property
    def runtime_ids(self) -> list[str]:
        return [r.id for r in self.runtimes]

    @property
    def provided_contracts(self) -> list[str]:
        """provides[] plus every runtime's io.output.contract (spec 004 PluginSummary.provides)."""
        out = [p["contract"] for p in self.provides]
        for runtime in self.runtimes:
            if runtime.output_contract and runtime.output_contract not in out:
                out.append(runtime.output_contract)
        return out

    @property
    def optional_contracts(self) -> list[str]:
        """optional[] plus contracts runtimes reference that are not in requires (spec 004)."""
        out = list(self.optional)
        for runtime in self.runtimes:
            for ref in _runtime_contract_refs(runtime):
                if ref not in self.requires and ref not in out and ref not in self.provided_contracts:
                    out.append(ref)
        return out

    @property
    def ignored_fields(self) -> list[dict[str, str]]:
        """[{sourcePath, field, message}] for unknown fields (PluginSummary.ignoredFields)."""
        return [
            {"sourcePath": i.file or PLUGIN_FILE, "field": i.field or "", "message": i.message}
            for i in self.issues
            if i.code == CODE_UNKNOWN_FIELD
        ]

    @property
    def all_tools(self) -> list[str]:
        return list(self.contributes.tools)


def _runtime_contract_refs(runtime: RuntimeManifest) -> list[str]:
    refs: list[str] = []
    for binding in runtime.inputs.values():
        source = binding.get("from") if isinstance(binding, dict) else None
        if isinstance(source, dict) and isinstance(source.get("contract"), str):
            refs.append(source["contract"])
    for item in [*runtime.needs, *runtime.after]:
        if isinstance(item.get("contract"), str):
            refs.append(item["contract"])
    return refs


# --------------------------------------------------------------------------------------------
# A small declarative field checker: unknown keys → warnings, wrong types → errors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class F:
    """Field spec. kind: str|text|bool|int|num|any|list_str|dict|list|map|enum|str_or_dict|bool_or_list."""

    kind: str
    children: dict[str, "F"] | None = None  # dict fields / list item fields / map value fields
    required: bool = False
    choices: tuple[Any, ...] | None = None


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "text":
        return isinstance(value, str) or (
            isinstance(value, dict) and bool(value) and all(isinstance(v, str) for v in value.values())
        )
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "list_str":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind in ("dict", "map"):
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list)
    if kind == "str_or_dict":
        return isinstance(value, (str, dict))
    if kind == "bool_or_list":
        return isinstance(value, bool) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "bool_or_dict":
        return isinstance(value, (bool, dict))
    return True


def _check(value: Any, spec: F, path: str, file: str, issues: list[Issue]) -> None:
    if spec.choices is not None:
        if value not in spec.choices:
            issues.append(error(CODE_INVALID_FIELD, f"must be one of {', '.join(map(str, spec.choices))}; got {value!r}", file, path))
        return
    if not _type_ok(spec.kind, value):
        issues.append(error(CODE_INVALID_FIELD, f"expected {spec.kind.replace('_', ' ')}, got {type(value).__name__}", file, path))
        return
    if spec.children is None:
        return
    if spec.kind == "dict":
        _check_object(value, spec.children, path, file, issues)
    elif spec.kind == "map":
        for key, item in value.items():
            item_path = f"{path}.{key}"
            if not isinstance(item, dict):
                issues.append(error(CODE_INVALID_FIELD, "expected an object", file, item_path))
                continue
            _check_object(item, spec.children, item_path, file, issues)
    elif spec.kind in ("list", "str_or_dict"):
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            item_path = f"{path}.{index}" if isinstance(value, list) else path
            if isinstance(item, dict):
                _check_object(item, spec.children, item_path, file, issues)
            elif not (isinstance(item, str) and "__str__" in spec.children):
                issues.append(error(CODE_INVALID_FIELD, "expected an object", file, item_path))


def _check_object(obj: dict[str, Any], fields: dict[str, F], path: str, file: str, issues: list[Issue]) -> None:
    for key, value in obj.items():
        key_path = f"{path}.{key}" if path else str(key)
        spec = fields.get(key)
        if spec is None:
            if key == "__str__":
                continue
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", file, key_path))
            continue
        _check(value, spec, key_path, file, issues)
    for key, spec in fields.items():
        if spec.required and key not in obj:
            issues.append(error(CODE_MISSING_FIELD, "required field is missing", file, f"{path}.{key}" if path else key))


TEXT = F("text")
STR = F("str")
INT = F("int")
BOOL = F("bool")
LIST_STR = F("list_str")
ANY = F("any")
STR_OK = {"__str__": ANY}  # marks list items that may be plain strings

AUTHOR = F("dict", {
    "name": F("str", required=True), "url": STR, "about": TEXT,
    "links": F("list", {"label": F("text", required=True), "url": F("str", required=True)}),
})
CONTRACT_REF = F("list", {**STR_OK, "contract": F("str", required=True), "default": BOOL})
RUNTIME_REF = F("list", {**STR_OK, "runtime": STR, "contract": STR, "cardinality": F("any", choices=("one", "all")),
                         "scope": F("any", choices=("turn", "session"))})
TOOLS = F("dict", {
    "builtin": LIST_STR,
    "plugin": LIST_STR,
    "datasets": F("list", {**STR_OK, "dataset": F("str", required=True), "tools": LIST_STR}),
    "services": F("list", {**STR_OK, "contract": F("str", required=True), "as": STR}),
    "defer": F("bool_or_list"),
    "local": ANY,  # reported as an error by _check_tools (spec 000)
})
COMPLETION_AGENT = F("dict", {"require": F("any", choices=COMPLETION_REQUIRE), "afterTools": LIST_STR})
RUNTIME_FIELDS: dict[str, F] = {
    "type": F("any", required=True, choices=RUNTIME_TYPES),
    "description": TEXT,
    "schedule": F("dict", {
        "stage": F("any", choices=STAGES),
        "trigger": F("dict", {
            "type": F("any", required=True, choices=TRIGGER_TYPES + LEGACY_TRIGGER_TYPES),
            "interval": INT, "every": INT, "topic": STR, "maxTriggerCount": INT,
            "cooldownTurns": INT, "startTurn": INT,
        }),
        "needs": RUNTIME_REF,
        "after": RUNTIME_REF,
        "completion": F("dict", {
            "mode": F("any", choices=COMPLETION_MODES),
            "settle": F("any", choices=("before-next-execution",)),
            "maxSettleWaitMs": INT, "maxQueueMs": INT, "maxExecutionMs": INT,
            "overlap": F("any", choices=("serial",)), "stalePolicy": F("any", choices=("reject",)),
        }),
        "manual": F("dict", {"execution": F("any", required=True, choices=EXECUTION_MODES)}),
        "background": BOOL,
        "detached": F("bool_or_dict"),
        "subagentOnly": BOOL,
    }),
    "io": F("dict", {
        "inputs": F("map", {
            "from": F("dict", {"runtime": STR, "contract": STR, "kernel": STR,
                               "cardinality": F("any", choices=("one", "all"))}, required=True),
            "scope": F("any", choices=("turn", "committed")),
            "select": STR, "required": BOOL, "accepts": STR, "recordAs": STR,
        }),
        "selfData": F("list", {
            "namespace": F("str", required=True), "as": F("str", required=True),
            "format": F("any", choices=SELF_DATA_FORMATS), "maxEntries": INT,
        }),
        "payloadSchema": STR,
        "output": F("dict", {"contract": STR, "schema": STR, "recordAs": STR}),
        "visibility": F("any", choices=VISIBILITIES),
        "concealed": BOOL,
    }),
    "agent": F("dict", {
        "model": STR,
        "llm": F("dict", {"reasoningEffort": F("any", choices=("disabled",)), "toolChoice": F("str_or_dict", {**STR_OK, "name": F("str", required=True)})}),
        "history": F("dict", {"maxTurns": F("int", required=True)}),
        "tools": TOOLS,
        "advertiseEvents": BOOL,
        "loop": F("dict", {
            "maxSteps": INT, "timeoutMs": INT, "callTimeoutMs": INT, "firstTokenTimeoutMs": INT,
            "idleTimeoutMs": INT, "maxRetries": INT, "loopDetection": INT, "maxRecursionDepth": INT,
            "completion": COMPLETION_AGENT,
        }),
        "completion": COMPLETION_AGENT,
        "finishWith": STR,
    }),
    "function": F("dict", {"handler": F("str", required=True), "model": STR, "timeoutMs": INT, "tools": TOOLS}),
    "guard": STR,
    "effects": F("dict", {"reads": LIST_STR, "writes": LIST_STR, "parallelSafe": BOOL}),
    "permissions": F("dict", {"http": F("list", {"origin": F("str", required=True), "methods": LIST_STR})}),
}
SETTING = F("list", {
    "key": F("str", required=True), "type": STR, "default": ANY, "label": TEXT, "description": TEXT,
    "options": F("list", {"value": ANY, "label": TEXT}), "min": F("num"), "max": F("num"), "step": F("num"),
    "scope": STR, "placeholder": TEXT,
})
CONTRIBUTES = F("dict", {
    "tools": LIST_STR,
    "actions": LIST_STR,
    "commands": F("list", {
        "name": F("str", required=True), "aliases": LIST_STR, "description": F("text", required=True),
        "arguments": F("list", {
            "name": F("str", required=True), "type": F("any", choices=("string", "integer", "number", "boolean")),
            "description": TEXT, "required": BOOL, "variadic": BOOL, "choices": LIST_STR,
        }),
        "action": F("str", required=True),
        "context": LIST_STR,
    }),
    "services": LIST_STR,
    "extensions": F("list", {"point": F("str", required=True), "id": F("str", required=True), "order": INT,
                             "slot": STR, "watch": LIST_STR, "preview": LIST_STR}),
    "hooks": F("list", {"event": F("any", required=True, choices=HOOK_EVENTS), "enforce": F("any", choices=HOOK_ENFORCE)}),
    "wires": LIST_STR,
    "forms": LIST_STR,
    "events": F("list", {"topic": F("str", required=True), "schema": STR, "description": TEXT}),
    "settings": SETTING,
    "data": F("map", {"schema": STR, "version": ANY, "description": TEXT, "accepts": LIST_STR,
                      "authoring": F("dict", None), "ops": LIST_STR, "key": STR, "visibility": STR}),
    "datasets": F("map", {"schema": F("str_or_dict", None, required=True), "key": STR, "ops": LIST_STR,
                          "tools": LIST_STR, "description": TEXT}),
    "ui": F("dict", {slot: LIST_STR for slot in UI_SLOTS}),
    "worldProjections": F("map", {"from": ANY, "handler": STR, "outputs": F("dict", None)}),
    "prompt": F("list", {"id": F("str", required=True), "content": F("str", required=True), "position": STR,
                         "role": STR, "order": INT}),
    "actionKinds": F("list", {
        "name": F("str", required=True), "text": F("any", choices=ACTION_KIND_TEXT), "actor": BOOL,
        "fieldsSchema": F("dict", None), "display": F("dict", None), "description": TEXT,
    }),
})
PLUGIN_FIELDS: dict[str, F] = {
    "id": STR,
    "kind": F("any", required=True, choices=PLUGIN_KINDS),
    "version": F("any"),
    "covel": STR,
    "displayName": TEXT,
    "description": F("text", required=True),
    "tags": LIST_STR,
    "author": AUTHOR,
    "license": STR,
    "homepage": STR,
    "provides": CONTRACT_REF,
    "requires": LIST_STR,
    "optional": LIST_STR,
    "conflicts": LIST_STR,
    "contracts": F("map", {"schema": F("str", required=True)}),
    "entry": STR,
    "contributes": CONTRIBUTES,
    "runtime": F("dict", RUNTIME_FIELDS),
}

# Old upstream layout keys (pluginType/runtimeType era) and where they go.
LEGACY_KEYS = {
    "name", "pluginType", "runtimeType", "resultFormat", "handler", "priority", "stage", "timeoutMs",
    "outputKind", "capabilities", "trigger", "ui", "userSettings", "model", "execution", "maxSteps",
    "maxRetries", "callTimeoutMs", "firstTokenTimeoutMs", "requireToolUse", "completeAfterTools",
    "output", "tools", "input",
}


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------


def frontmatter_read(path: Path, rel: str) -> tuple[dict[str, Any] | None, str, list[Issue]]:
    """Read a markdown file with YAML frontmatter.

    Returns (metadata or None on failure, body, issues). Uses `frontmatter.parse` (not `load`)
    because manifests may legitimately contain a `handler` key, which `Post` would reject.
    YAML 1.2 booleans: `off`/`on`/`yes`/`no` stay strings (see covel.yamlio).
    Frontmatter no store could hold (NUL, unpaired surrogates, non-finite numbers, nesting past
    covel.jsonbody.JSON_MAX_DEPTH or too deep for the parser) is `manifest-invalid`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, "", [error(CODE_FILE_INVALID, f"cannot read file: {exc.__class__.__name__}", rel)]
    if not text.lstrip("\ufeff").startswith("---"):
        return None, text, [error(CODE_MANIFEST_INVALID, "missing YAML frontmatter (--- ... ---)", rel)]
    try:
        metadata, body = frontmatter_parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, "", [error(CODE_MANIFEST_INVALID, f"invalid YAML frontmatter{where}", rel)]
    except RecursionError:
        return None, "", [error(CODE_MANIFEST_INVALID, "YAML frontmatter is nested too deeply", rel)]
    problem = unstorable_json_problem(metadata)
    if problem is not None:
        return None, "", [error(CODE_MANIFEST_INVALID, f"frontmatter value at {'/'.join(problem[1]) or '(root)'} cannot be "
                                "stored (NUL, unpaired surrogate, non-finite number or nesting too deep)", rel)]
    if not isinstance(metadata, dict) or not metadata:
        return None, body, [error(CODE_MANIFEST_INVALID, "frontmatter must be a YAML mapping", rel)]
    return dict(metadata), body.strip(), []


def package_path_resolve(root: Path, declared: str, *, base_dir: str = "") -> Path | None:
    """Resolve a package-relative path ("./x", "x") against root/base_dir; None if it escapes root."""
    if not isinstance(declared, str) or not declared or declared.startswith("/") or "\\" in declared:
        return None
    candidate = (root / base_dir / declared).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


def package_relpath(root: Path, path: Path) -> str:
    return PurePosixPath(path.resolve().relative_to(root.resolve())).as_posix()


# --------------------------------------------------------------------------------------------
# Legacy layout translation
# --------------------------------------------------------------------------------------------


def _legacy_translate(meta: dict[str, Any], rel: str, issues: list[Issue]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Translate an old upstream manifest into (package fields, runtime fields or None)."""
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
    contributes = dict(pkg.get("contributes") or {})
    if "userSettings" in meta:
        contributes.setdefault("settings", meta["userSettings"])
    if isinstance(meta.get("ui"), dict):
        contributes.setdefault("ui", meta["ui"])
    tools = meta.get("tools") if isinstance(meta.get("tools"), dict) else {}
    if tools.get("plugin"):
        contributes.setdefault("tools", list(tools["plugin"]))
    if contributes:
        pkg["contributes"] = contributes
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


def _is_legacy(meta: dict[str, Any]) -> bool:
    return any(key in meta for key in ("pluginType", "runtimeType")) or ("name" in meta and "id" not in meta and "kind" not in meta)


# --------------------------------------------------------------------------------------------
# Runtime parsing
# --------------------------------------------------------------------------------------------


def _ints(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tool_selection(raw: Any, *, plugin_declared_default: bool = False) -> ToolSelection:
    if not isinstance(raw, dict):
        return ToolSelection()
    datasets: list[DatasetSelection] = []
    for item in raw.get("datasets") or []:
        if isinstance(item, str):
            datasets.append(DatasetSelection(item))
        elif isinstance(item, dict) and isinstance(item.get("dataset"), str):
            picked = item.get("tools")
            datasets.append(DatasetSelection(item["dataset"], tuple(picked) if isinstance(picked, list) else None))
    services: list[ServiceImport] = []
    for item in raw.get("services") or []:
        contract = item if isinstance(item, str) else item.get("contract") if isinstance(item, dict) else None
        if not isinstance(contract, str):
            continue
        alias = item.get("as") if isinstance(item, dict) else None
        services.append(ServiceImport(contract, alias if isinstance(alias, str) else service_tool_name(contract)))
    defer = raw.get("defer", False)
    return ToolSelection(
        builtin=tuple(v for v in raw.get("builtin") or [] if isinstance(v, str)),
        plugin=tuple(v for v in raw.get("plugin") or [] if isinstance(v, str)),
        datasets=tuple(datasets),
        services=tuple(services),
        defer=tuple(defer) if isinstance(defer, list) else bool(defer),
        plugin_declared="plugin" in raw,
    )


def service_tool_name(contract: str) -> str:
    """Default tool name of an imported service: drop the version, '.' → '-' (spec 000)."""
    return contract.split("@", 1)[0].replace(".", "-")


def _runtime_build(
    meta: dict[str, Any], body: str, *, plugin_id: str, local_id: str, runtime_id: str,
    source_path: str, directory: str,
) -> RuntimeManifest:
    schedule = meta.get("schedule") if isinstance(meta.get("schedule"), dict) else {}
    trig = schedule.get("trigger") if isinstance(schedule.get("trigger"), dict) else {}
    trigger = Trigger(
        type=trig.get("type", "auto") if isinstance(trig.get("type"), str) else "auto",
        topic=trig.get("topic") if isinstance(trig.get("topic"), str) else None,
        interval=_ints(trig, "interval") or _ints(trig, "every"),
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
        loop = dict(raw_agent.get("loop") or {}) if isinstance(raw_agent.get("loop"), dict) else {}
        loop_completion = loop.pop("completion", None)
        agent_completion = raw_agent.get("completion") if isinstance(raw_agent.get("completion"), dict) else loop_completion
        history = raw_agent.get("history") if isinstance(raw_agent.get("history"), dict) else {}
        agent = AgentConfig(
            model=raw_agent.get("model") if isinstance(raw_agent.get("model"), str) else None,
            tools=_tool_selection(raw_agent.get("tools")),
            loop=loop,
            completion=dict(agent_completion or {}),
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
            tools=_tool_selection(raw_fn.get("tools")),
        )

    def refs(key: str) -> list[dict[str, Any]]:
        out = []
        for item in schedule.get(key) or []:
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


def _runtime_semantics(meta: dict[str, Any], rel: str, prefix: str, issues: list[Issue]) -> None:
    """Cross-field runtime rules that a type check cannot express."""
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
    is_background = schedule.get("background") is True or (schedule.get("manual") or {}).get("execution") == "background"
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
    builtin = ((agent.get("tools") or {}).get("builtin") or []) if isinstance(agent.get("tools"), dict) else []
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


def _check_tool_references(manifest: PluginManifest, runtime: RuntimeManifest, rel: str, prefix: str, issues: list[Issue]) -> None:
    """agent.tools.* references against contributes, datasets and services (spec 000)."""
    if runtime.agent is None and runtime.function is None:
        return
    tools = runtime.agent.tools if runtime.agent else runtime.function.tools  # type: ignore[union-attr]
    block = "agent" if runtime.agent else "function"
    contributed = set(manifest.contributes.tools)
    for index, name in enumerate(tools.builtin):
        if name not in BUILTIN_TOOLS:
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
    if runtime.agent is not None:
        for name in runtime.agent.completion.get("afterTools") or []:
            if name in service_names:
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


# --------------------------------------------------------------------------------------------
# Package parsing
# --------------------------------------------------------------------------------------------


def _contributes_build(raw: Any) -> Contributes:
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


def _contributes_semantics(contributes: Contributes, issues: list[Issue]) -> None:
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
    for index, contract in enumerate(contributes.services):
        if not CONTRACT_RE.match(contract):
            issues.append(error(CODE_INVALID_FIELD, f"service {contract!r} must be a versioned contract id (name@N)", rel, f"contributes.services.{index}"))
    for index, command in enumerate(contributes.commands):
        if isinstance(command.get("action"), str) and command["action"] not in contributes.actions:
            issues.append(error("command-action", f"command action {command['action']!r} is not listed in contributes.actions", rel, f"contributes.commands.{index}.action"))
        args = command.get("arguments") if isinstance(command.get("arguments"), list) else []
        names = [a.get("name") for a in args if isinstance(a, dict)]
        if len(names) != len(set(names)):
            issues.append(error(CODE_INVALID_FIELD, "argument names must be unique", rel, f"contributes.commands.{index}.arguments"))
        for j, arg in enumerate(args[:-1]):
            if isinstance(arg, dict) and arg.get("variadic"):
                issues.append(error(CODE_INVALID_FIELD, "only the last argument can be variadic", rel, f"contributes.commands.{index}.arguments.{j}.variadic"))
    seen_topics: set[str] = set()
    for index, event in enumerate(contributes.events):
        topic = event.get("topic")
        if topic in seen_topics:
            issues.append(error("duplicate-declaration", f"event topic {topic!r} is declared twice", rel, f"contributes.events.{index}.topic"))
        seen_topics.add(topic)
    for name, dataset in contributes.datasets.items():
        if not re.match(r"^[a-z][a-z0-9-]*$", name):
            issues.append(error(CODE_INVALID_FIELD, "dataset names start with a lowercase letter (letters, digits, hyphens)", rel, f"contributes.datasets.{name}"))
        for j, op in enumerate(dataset.get("ops") or []):
            if op not in DATASET_OPS:
                issues.append(error(CODE_INVALID_FIELD, f"unknown dataset op {op!r}", rel, f"contributes.datasets.{name}.ops.{j}"))
        for j, tool in enumerate(dataset.get("tools") or []):
            if tool not in DATASET_TOOLS:
                issues.append(error(CODE_INVALID_FIELD, f"unknown dataset tool {tool!r}", rel, f"contributes.datasets.{name}.tools.{j}"))
    for name in contributes.data:
        if name.startswith("_"):
            issues.append(error(CODE_INVALID_FIELD, "namespaces starting with _ are reserved for the framework", rel, f"contributes.data.{name}"))
    seen_kinds: set[str] = set()
    for index, kind in enumerate(contributes.action_kinds):
        name = kind.get("name")
        if name in seen_kinds:
            issues.append(error("duplicate-declaration", f"action kind {name!r} is declared twice", rel, f"contributes.actionKinds.{index}.name"))
        seen_kinds.add(name)


def _entry_language(entry: str | None) -> str | None:
    if entry is None:
        return None
    base = entry.split(":", 1)[0]
    if base.endswith(PYTHON_SUFFIXES):
        return "python"
    if base.endswith(JAVASCRIPT_SUFFIXES):
        return "javascript"
    return "unknown"


def _runtime_files(root: Path) -> list[tuple[str, Path, bool]]:
    """[(local_id, path, is_legacy_plugin_md)] under runtimes/, sorted by local id."""
    runtimes_dir = root / RUNTIMES_DIR
    out: list[tuple[str, Path, bool]] = []
    if not runtimes_dir.is_dir():
        return out
    for child in sorted(runtimes_dir.iterdir(), key=lambda p: p.name):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if (child / RUNTIME_FILE).is_file():
            out.append((child.name, child / RUNTIME_FILE, False))
        if (child / PLUGIN_FILE).is_file():
            out.append((child.name, child / PLUGIN_FILE, True))
    return out


def plugin_manifest_load(root: Path, *, expected_id: str | None = None) -> PluginManifest:
    """Parse and validate the plugin package at `root`. Never raises for bad content.

    expected_id: the id the host assigns (discovery: folder name). When PLUGIN.md declares a
    different `id`, an error `id-mismatch` is recorded (spec 004: hostState "error", nothing
    loaded). Without expected_id, the id is PLUGIN.md's `id`, else the folder name.
    Returns a PluginManifest whose `issues` list every finding; `has_errors` tells whether the
    package as a whole is unusable. The entry module is NOT imported here (see registry).
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
        manifest = PluginManifest(id=expected_id or folder_id, root=root, issues=issues)
        return manifest

    legacy = _is_legacy(meta)
    inline_runtime: dict[str, Any] | None
    if legacy:
        pkg_meta, inline_runtime = _legacy_translate(meta, PLUGIN_FILE, issues)
        unknown = set(meta) - LEGACY_KEYS - set(PLUGIN_FIELDS)
        for key in sorted(unknown):
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", PLUGIN_FILE, key))
        pkg_check = dict(pkg_meta)
        if inline_runtime is not None:
            pkg_check["runtime"] = inline_runtime
        _check_object(pkg_check, PLUGIN_FIELDS, "", PLUGIN_FILE, issues)
    else:
        pkg_meta = meta
        inline_runtime = meta.get("runtime") if isinstance(meta.get("runtime"), dict) else None
        _check_object(meta, PLUGIN_FIELDS, "", PLUGIN_FILE, issues)

    declared_id = pkg_meta.get("id")
    if declared_id is not None and not isinstance(declared_id, str):
        declared_id = None
    plugin_id = expected_id or declared_id or folder_id
    if not PLUGIN_ID_RE.match(plugin_id):
        issues.append(error(CODE_IDENTITY_INVALID, f"plugin id {plugin_id!r} must be lowercase letters, digits and hyphens", PLUGIN_FILE, "id"))
    if declared_id is not None and declared_id != plugin_id:
        issues.append(error(CODE_ID_MISMATCH, f"PLUGIN.md declares id {declared_id!r} but the package folder is {plugin_id!r}", PLUGIN_FILE, "id"))
    for index, tag in enumerate(pkg_meta.get("tags") or []):
        if isinstance(tag, str) and tag.startswith("role:") and not legacy:
            issues.append(warning(CODE_INVALID_FIELD, "role: tags are ignored; declare contracts instead", PLUGIN_FILE, f"tags.{index}"))

    provides: list[dict[str, Any]] = []
    for item in pkg_meta.get("provides") or []:
        if isinstance(item, str):
            provides.append({"contract": item, "default": False})
        elif isinstance(item, dict) and isinstance(item.get("contract"), str):
            provides.append({"contract": item["contract"], "default": item.get("default") is True})
    contracts = {k: dict(v) for k, v in (pkg_meta.get("contracts") or {}).items() if isinstance(v, dict)} if isinstance(pkg_meta.get("contracts"), dict) else {}
    for cid, decl in contracts.items():
        schema_path = decl.get("schema")
        if isinstance(schema_path, str):
            resolved = package_path_resolve(root, schema_path)
            if resolved is None:
                issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "schema path leaves the package", PLUGIN_FILE, f"contracts.{cid}.schema"))
            elif not resolved.is_file():
                issues.append(warning("schema-missing", f"schema file {schema_path} not found", PLUGIN_FILE, f"contracts.{cid}.schema"))

    contributes = _contributes_build(pkg_meta.get("contributes"))
    _contributes_semantics(contributes, issues)

    entry = pkg_meta.get("entry") if isinstance(pkg_meta.get("entry"), str) else None
    if entry is not None:
        resolved = package_path_resolve(root, entry.split(":", 1)[0])
        if resolved is None:
            issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "entry path leaves the package", PLUGIN_FILE, "entry"))
        elif _entry_language(entry) == "python" and not resolved.is_file():
            issues.append(error("entry-missing", f"entry module {entry} not found", PLUGIN_FILE, "entry"))

    def str_list(key: str) -> list[str]:
        value = pkg_meta.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    version = pkg_meta.get("version")
    manifest = PluginManifest(
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
        entry_language=_entry_language(entry),
        contributes=contributes,
        body=body,
        is_legacy_layout=legacy,
        raw=meta,
    )

    # Runtimes: inline first, then runtimes/<rid>/ in folder order.
    seen_ids: dict[str, str] = {}
    if inline_runtime is not None:
        runtime_issues: list[Issue] = []
        _runtime_semantics(inline_runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        runtime = _runtime_build(inline_runtime, body, plugin_id=plugin_id, local_id=plugin_id, runtime_id=plugin_id,
                                 source_path=PLUGIN_FILE, directory="")
        _check_runtime_paths(root, runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        _check_tool_references(manifest, runtime, PLUGIN_FILE, "runtime.", runtime_issues)
        issues.extend(runtime_issues)
        manifest.runtimes.append(runtime)
        seen_ids[plugin_id.lower()] = PLUGIN_FILE

    for local_id, path, is_legacy_file in _runtime_files(root):
        rel = package_relpath(root, path)
        runtime_id = f"{plugin_id}/{local_id}"
        runtime_issues = []
        key = runtime_id.lower()
        if key in seen_ids:
            issues.append(error("duplicate-runtime", f"runtime {runtime_id!r} is already defined by {seen_ids[key]}", rel))
            continue
        seen_ids[key] = rel
        rmeta, rbody, read_issues = frontmatter_read(path, rel)
        runtime_issues.extend(read_issues)
        if rmeta is not None:
            if is_legacy_file or _is_legacy(rmeta):
                _pkg, translated = _legacy_translate(rmeta, rel, runtime_issues)
                for key_name in sorted(set(rmeta) - LEGACY_KEYS - set(PLUGIN_FIELDS)):
                    runtime_issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", rel, key_name))
                if translated is None:
                    runtime_issues.append(error(CODE_MANIFEST_INVALID, "legacy runtime manifest declares no runtimeType", rel))
                    rmeta = None
                else:
                    for tool in ((rmeta.get("tools") or {}).get("plugin") or []) if isinstance(rmeta.get("tools"), dict) else []:
                        if tool not in manifest.contributes.tools:
                            manifest.contributes.tools.append(tool)
                    rmeta = translated
            if rmeta is not None:
                if "id" in rmeta and not is_legacy_file:
                    runtime_issues.append(warning(CODE_UNKNOWN_FIELD, "runtime id comes from the folder name", rel, "id"))
                    rmeta = {k: v for k, v in rmeta.items() if k != "id"}
                _check_object(rmeta, RUNTIME_FIELDS, "", rel, runtime_issues)
                _runtime_semantics(rmeta, rel, "", runtime_issues)
        if rmeta is None or has_errors(runtime_issues):
            issues.extend(runtime_issues)
            message = next((i.message for i in runtime_issues if i.is_error), "runtime manifest is invalid")
            disabled: dict[str, Any] = {"sourcePath": rel, "message": f"<plugin>/{rel}: {message}"}
            out_contract = ((rmeta or {}).get("io") or {}).get("output", {}).get("contract") if isinstance((rmeta or {}).get("io"), dict) else None
            if isinstance(out_contract, str):
                disabled["outputContract"] = out_contract
            manifest.disabled_runtimes.append(disabled)
            continue
        runtime = _runtime_build(rmeta, rbody, plugin_id=plugin_id, local_id=local_id, runtime_id=runtime_id,
                                 source_path=rel, directory=f"{RUNTIMES_DIR}/{local_id}")
        _check_runtime_paths(root, runtime, rel, "", runtime_issues)
        _check_tool_references(manifest, runtime, rel, "", runtime_issues)
        issues.extend(runtime_issues)
        if has_errors(runtime_issues):
            message = next(i.message for i in runtime_issues if i.is_error)
            disabled = {"sourcePath": rel, "message": f"<plugin>/{rel}: {message}"}
            if runtime.output_contract:
                disabled["outputContract"] = runtime.output_contract
            manifest.disabled_runtimes.append(disabled)
            continue
        manifest.runtimes.append(runtime)

    _check_contract_references(manifest, issues)
    manifest.issues = issues
    return manifest


def _check_runtime_paths(root: Path, runtime: RuntimeManifest, rel: str, prefix: str, issues: list[Issue]) -> None:
    if runtime.function is not None and runtime.function.handler:
        handler = runtime.function.handler.split(":", 1)[0]
        if package_path_resolve(root, handler, base_dir=runtime.directory) is None:
            issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "handler path leaves the package", rel, f"{prefix}function.handler"))
    if runtime.guard and package_path_resolve(root, runtime.guard, base_dir=runtime.directory) is None:
        issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "guard path leaves the package", rel, f"{prefix}guard"))


def _check_contract_references(manifest: PluginManifest, issues: list[Issue]) -> None:
    provided = {p["contract"] for p in manifest.provides}
    known = provided | set(manifest.requires) | set(manifest.optional) | set(manifest.conflicts)
    for contract in manifest.contributes.data.values():
        known.update(c for c in contract.get("accepts") or [] if isinstance(c, str))
    for runtime in manifest.runtimes:
        out = runtime.output_contract
        if out and out not in provided:
            issues.append(warning("contract-reference", f"output contract {out} is not listed in provides", runtime.source_path,
                                  ("runtime." if runtime.source_path == PLUGIN_FILE else "") + "io.output.contract"))
        for ref in _runtime_contract_refs(runtime):
            if ref not in known:
                issues.append(info("contract-reference", f"contract {ref} is not listed in requires or optional", runtime.source_path))


def runtime_handler_language(runtime: RuntimeManifest) -> str | None:
    """"python" / "javascript" / "unknown" for a function runtime's handler, None for agents."""
    if runtime.function is None:
        return None
    return _entry_language(runtime.function.handler) if runtime.function.handler else "unknown"


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


