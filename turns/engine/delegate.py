"""delegate: run a sub-agent inside the calling runtime (spec 000 §子 agent（delegate）).

An agent that lists ``delegate`` in ``agent.tools.builtin`` gets it as one of its own tools (built
here per runtime, never in the registry; ``approvalStatus`` auto-allowed like a builtin). A call::

    {target: {contract} | {runtimeId}, brief: 1–20000 chars, data?: object ≤ 32 KB, maxSteps?}

resolves the target — ``{runtimeId}``: an agent runtime of the caller's own package (``"<id>"`` or
``"<pluginId>/<id>"``); ``{contract}``: the one active agent runtime whose ``io.output.contract`` is
that contract (none: ``not-found``, several: ``ambiguous``) — and runs it to completion in this
execution with its own model slot, its own prompt, its own step and time limits (``maxSteps`` may
only lower the provider's own), the brief (and data) as its user message and a tool whitelist cut
down to its read-only tools and service imports (write services only when the caller may stage
writes; never ``delegate``, ``suspend`` or deferred loading). Its trace events carry
``parentCallId`` (the delegate call's id); ``subagent.completed`` records stopReason and usage.

Writes: a sub-agent's staged writes (write services) come back as this call's proposals, so they
join the caller's commit unit and the envelope's ``staged`` counts only this delegation; a failed
sub-agent's writes are dropped. Concurrency: at most 8 sub-agents run at once per execution (all
runtimes of a stage share the count); a call beyond that gets ``unavailable`` at once.

Failures: every code except ``invalid-input`` is ``refused`` (not the caller's failed call, spec
000 §统一返回格式与错误码: "delegate 延续自己的规则：除 invalid-input 外都设置标志"). Character
targets (``character-actor@1``: ``character``/``instruction``) are not implemented: those
parameters are refused with ``invalid-input`` for other contracts, as the spec says.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.errors import AMBIGUOUS, INTERNAL, INVALID_INPUT, NOT_FOUND, TIMEOUT, UNAVAILABLE, ToolError
from turns.engine import trace as T
from turns.engine.tools.services import refused

NAME = "delegate"
#: Sub-agents one execution runs at the same time (spec: 一次执行最多同时运行 8 个子 agent).
MAX_CONCURRENT_SUBAGENTS = 8
MAX_DATA_BYTES = 32 * 1024
SUBAGENT_COMPLETED = "subagent.completed"
DELEGATE_ANNOTATIONS = {"readOnly": False, "stagesWrites": True, "idempotent": False, "concurrencySafe": False}

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["target", "brief"],
    "properties": {
        "target": {
            "type": "object",
            "description": "Who runs the task: {contract} (the provider of that contract) or {runtimeId} (a runtime of this package).",
            "properties": {"contract": {"type": "string", "minLength": 1}, "runtimeId": {"type": "string", "minLength": 1}},
            "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
        },
        "brief": {"type": "string", "minLength": 1, "maxLength": 20000, "description": "The task, in full."},
        "data": {"type": "object", "description": "Facts for the sub-agent (JSON object, at most 32 KB)."},
        "character": {"type": "string", "maxLength": 80},
        "instruction": {"type": "string", "maxLength": 2000},
        "maxSteps": {"type": "integer", "minimum": 1, "description": "Step limit; only lower than the sub-agent's own."},
    },
    "additionalProperties": False,
}

_slots_lock = threading.Lock()


def _slots(env: Any) -> threading.BoundedSemaphore:
    """The execution's sub-agent slots (one semaphore per ExecutionEnv)."""
    with _slots_lock:
        slots = env.__dict__.get("_subagent_slots")
        if slots is None:
            slots = threading.BoundedSemaphore(MAX_CONCURRENT_SUBAGENTS)
            env.__dict__["_subagent_slots"] = slots
        return slots


def resolve_target(env: Any, caller: Any, target: dict[str, Any]) -> Any:
    """The sub-agent's RuntimeManifest for ``target`` (see module docstring); raises ToolError."""
    agents = [r for r in env.runtimes() if r.agent is not None]
    if "runtimeId" in target:
        wanted = str(target["runtimeId"])
        full = wanted if "/" in wanted else f"{caller.plugin_id}/{wanted}"
        found = next((r for r in agents if r.id == full), None)
        if found is None or found.plugin_id != caller.plugin_id:
            raise refused(NOT_FOUND, f'No agent runtime "{wanted}" in this package to delegate to.')
        if found.id == caller.id:
            raise refused(UNAVAILABLE, "A runtime cannot delegate to itself.")
        return found
    contract = str(target["contract"])
    providers = [r for r in agents if r.output_contract == contract]
    if not providers:
        raise refused(NOT_FOUND, f"No active plugin provides a sub-agent for {contract}.")
    if len(providers) > 1:
        raise refused(AMBIGUOUS, f"More than one active plugin provides {contract}.")
    return providers[0]


def delegate_tool(env: Any, caller: Any, turn: Any, *, staged: Any, can_stage: bool, run: Any) -> Tool:
    """The caller's delegate tool. ``staged()``: the proposals the sub-agent's view sees (the
    caller's upstream and own staged writes); ``can_stage``: whether write services stay;
    ``run``: turns.engine.agent.agent_runtime_run (passed in: this module does not import the loop)."""
    agent_runtime_run = run

    def execute(args: dict[str, Any], ctx: Any) -> ToolResult:
        target = args["target"]
        if ("character" in args or "instruction" in args) and target.get("contract") != "character-actor@1":
            raise ToolError(INVALID_INPUT, "character and instruction are accepted only for character-actor@1 targets.")
        data = args.get("data")
        if data is not None and len(json.dumps(data, ensure_ascii=False).encode("utf-8")) > MAX_DATA_BYTES:
            raise ToolError(INVALID_INPUT, f"data is larger than {MAX_DATA_BYTES} bytes.")
        runtime = resolve_target(env, caller, target)
        own_steps = int((runtime.agent.loop or {}).get("maxSteps") or 0) or None
        max_steps = args.get("maxSteps")
        if max_steps is not None and own_steps is not None and max_steps >= own_steps:
            raise ToolError(INVALID_INPUT, f"maxSteps must be lower than the sub-agent's own limit ({own_steps}).")
        slots = _slots(env)
        if not slots.acquire(blocking=False):
            raise refused(UNAVAILABLE, f"{MAX_CONCURRENT_SUBAGENTS} sub-agents are already running in this execution; "
                                       "try again later or do it yourself.")
        started = time.monotonic()
        try:
            result = agent_runtime_run(
                env, runtime, turn, upstream=staged(), inputs={}, upstream_texts=[], run_id=str(uuid.uuid4()),
                subagent={"parentCallId": ctx.call_id, "parentRuntimeId": caller.id, "brief": args["brief"],
                          "data": data, "maxSteps": max_steps, "canStage": can_stage},
            )
        finally:
            slots.release()
        env.tracer.emit(SUBAGENT_COMPLETED, {
            "runtimeId": runtime.id, "pluginId": runtime.plugin_id, "parentCallId": ctx.call_id, "parentRuntimeId": caller.id,
            "status": result.status, "stopReason": (result.error or {}).get("code") or "completed",
            "usage": dict(result.usage), "durationMs": int((time.monotonic() - started) * 1000),
        }, turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
        if result.status != "success":
            code = (result.error or {}).get("code")
            message = (result.error or {}).get("message") or "the sub-agent failed"
            raise refused(TIMEOUT if code == "timeout" else INTERNAL, f"The sub-agent {runtime.id} failed: {message}"[:2000])
        output = result.output if result.output is not None else {"text": result.text or ""}
        return ToolResult(content=output, proposals=list(result.proposals), data=output)

    return tool(name=NAME, description=(
        "Hand one task to a sub-agent and get its output back: target {contract} (its provider) or {runtimeId} "
        "(a runtime of this package), with a complete brief."), parameters=PARAMETERS, execute=execute,
        annotations=DELEGATE_ANNOTATIONS)


def subagent_user_message(subagent: dict[str, Any], *, zh: bool) -> str:
    """The sub-agent's user message: the brief, then the data as JSON when given."""
    head = "[任务]" if zh else "[TASK]"
    text = f"{head}\n{subagent['brief']}"
    if subagent.get("data") is not None:
        text += ("\n\n[数据]\n" if zh else "\n\n[DATA]\n") + json.dumps(subagent["data"], ensure_ascii=False, indent=1)
    return text


def subagent_tool_names(offered: list[str], tools: dict[str, Any], registry: Any, plugin_id: str,
                        service_names: set[str], write_services: set[str], *, can_stage: bool) -> list[str]:
    """A sub-agent keeps its read-only tools and service imports (write services only when the caller
    may stage writes); never delegate, suspend or search-tools."""
    kept: list[str] = []
    for name in offered:
        if name in (NAME, "suspend", "search-tools"):
            continue
        if name in service_names:
            if name in write_services and not can_stage:
                continue
            kept.append(name)
            continue
        resolved = registry.resolve(name, plugin_id)
        found = resolved.tool if resolved is not None else tools.get(name)
        if found is not None and found.annotations.read_only:
            kept.append(name)
    return kept
