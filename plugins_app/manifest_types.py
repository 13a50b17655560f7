"""Plugin manifest model: the constants and dataclasses other code consumes (pure Python).

The manifest format itself is the published JSON Schema (plugins_app/schemas/plugin.json and
runtime.json, served at GET /api/framework/schemas/{name}); the enum tuples here are the ones the
schemas list (tests/plugins_app/test_schemas.py keeps them equal). plugins_app.manifests
re-exports every name, so import from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins_app.toolkit.names import FRAMEWORK_TOOL_ORDER
from plugins_app.validation import CODE_UNKNOWN_FIELD, Issue

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

# Framework tools (spec 000 概览, source builtin/注入): the toolkit's one reserved-name table.
# Dataset and service tools may not shadow them.
BUILTIN_TOOLS = FRAMEWORK_TOOL_ORDER

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
        contract = self.output.get("contract")
        return contract if isinstance(contract, str) else None  # a wrong type is reported, not used

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
    #: Per-process memo of package files read after the load (prompt files, output schemas:
    #: ``package_text_memo``). It lives and dies with this manifest: an install, update or dev
    #: reload builds a new manifest, so the files are read again then and only then.
    file_memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def package_text_memo(self, key: Any, read: Any) -> Any:
        """``read()`` once per ``key`` for this manifest, then the remembered value (a str, None,
        or another immutable value: callers must not change it). ``read`` may raise (OSError ...):
        nothing is remembered then."""
        try:
            return self.file_memo[key]
        except KeyError:
            value = self.file_memo[key] = read()
            return value

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
            for ref in runtime_contract_refs(runtime):
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


def runtime_contract_refs(runtime: RuntimeManifest) -> list[str]:
    """Contract ids a runtime reads: io.inputs.*.from.contract, needs[].contract, after[].contract."""
    refs: list[str] = []
    for binding in runtime.inputs.values():
        source = binding.get("from") if isinstance(binding, dict) else None
        if isinstance(source, dict) and isinstance(source.get("contract"), str):
            refs.append(source["contract"])
    for item in [*runtime.needs, *runtime.after]:
        if isinstance(item.get("contract"), str):
            refs.append(item["contract"])
    return refs
