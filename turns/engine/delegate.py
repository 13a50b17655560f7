"""delegate and ctx.agents.run: run a sub-agent inside the calling runtime (spec 000 §子 agent
（delegate）, §角色委托与策略导入, §故事内的演员委托).

An agent that lists ``delegate`` in ``agent.tools.builtin`` (a function runtime: in
``function.tools.builtin``, for ``ctx.tools.call("delegate", ...)``) gets it as one of its own tools
(built per runtime, never in the registry; ``approvalStatus`` auto-allowed like a builtin). Function
runtimes also have ``ctx.agents.run(...)`` (turns.engine.function_ctx), the same run for code. A call::

    {target: {contract} | {runtimeId}, brief: 1–20000 chars, data?: object ≤ 32 KB,
     character?: ≤ 80 chars, instruction?: ≤ 2000 chars, maxSteps?}

resolves the target — ``{runtimeId}``: an agent runtime of the caller's own package (``"<id>"`` or
``"<pluginId>/<id>"``); ``{contract}``: the one active agent runtime whose ``io.output.contract`` is
that contract, in any package (none: ``not-found``, several: ``ambiguous``) — and runs it to
completion in this execution with its own model slot, its own prompt, its own step and time limits
(``maxSteps`` may only lower the provider's own), the brief (and data) as its user message and a tool
whitelist cut down to its read-only tools and service imports (write services only when the caller
may stage writes; never ``delegate``, ``suspend`` or deferred loading). Its trace events carry
``parentCallId``; ``subagent.completed`` records stopReason and usage.

Character agents: a target providing ``character-actor@1`` (by contract, or a same-package
``runtimeId`` whose output contract it is: no bypass) requires ``character`` (a name or alias the host
resolves privately: an id is not a name) and refuses ``data``; ``instruction`` is optional. Every other
target refuses ``character`` and ``instruction``. The character agent gets its profile, its
experienced history (turns.engine.cast) and the instruction with the brief, and answers
``{segments: [{type: dialogue|action, text}], intent?}`` without speakers (a JSON text answer is
read too). The caller's model gets ``{data: {character, segments, intent?}}``; the persisted tool
record, the trace and the action stream keep neither the instruction nor the intent, and the
character agent's own model traffic is not traced (``private``). With delegate in
``completion.afterTools`` the caller's output is the projection: ``{segments}`` for a character,
nothing for an ``io.concealed`` provider, else the output.

Writes: a sub-agent's staged writes (write services, also a provider plugin's own write service
when another package's sub-agent is the target) come back as this call's proposals, so they join the
caller's commit unit and the envelope's ``staged`` counts only this delegation; a failed sub-agent's
writes are dropped. Limits: at most 8 sub-agents run at once per execution (all runtimes of a stage
share the count) — a call beyond that gets ``unavailable`` at once; and at most
``maxSubagentCalls`` (session orchestration setting, default 16, 0–64) sub-agent runs per execution
in all — the next one gets ``unavailable``.

Failures: every code except ``invalid-input`` is ``refused`` (not the caller's failed call, spec
000 §统一返回格式与错误码: "delegate 延续自己的规则：除 invalid-input 外都设置标志").
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.errors import (
    AMBIGUOUS,
    CANCELLED,
    INTERNAL,
    INVALID_INPUT,
    NOT_FOUND,
    TIMEOUT,
    UNAVAILABLE,
    ToolError,
)
from turns.engine.cast import character_history, character_names, character_resolve
from turns.engine.tools.services import refused

NAME = "delegate"
CHARACTER_CONTRACT = "character-actor@1"
#: Sub-agents one execution runs at the same time (spec: 一次执行最多同时运行 8 个子 agent).
MAX_CONCURRENT_SUBAGENTS = 8
MAX_DATA_BYTES = 32 * 1024
SUBAGENT_COMPLETED = "subagent.completed"
SEGMENT_TYPES = ("dialogue", "action")
DELEGATE_ANNOTATIONS = {"readOnly": False, "stagesWrites": True, "idempotent": False, "concurrencySafe": False}
#: Trace payload fields a private (character / concealed) sub-agent's events do not keep.
PRIVATE_FIELDS = ("messages", "text", "input", "output", "prompt", "system")
PRIVATE_MARK = "(private)"

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
        "data": {"type": "object", "description": "Facts for the sub-agent (JSON object, at most 32 KB); not for character agents."},
        "character": {"type": "string", "minLength": 1, "maxLength": 80,
                      "description": "character-actor@1 targets only (required there): the character's name or alias."},
        "instruction": {"type": "string", "maxLength": 2000,
                        "description": "character-actor@1 targets only: how the character should act now."},
        "maxSteps": {"type": "integer", "minimum": 1, "description": "Step limit; only lower than the sub-agent's own."},
    },
    "additionalProperties": False,
}
_VALIDATOR = jsonschema.Draft202012Validator(PARAMETERS)

_state_lock = threading.Lock()


def _slots(env: Any) -> threading.BoundedSemaphore:
    """The execution's sub-agent slots (one semaphore per ExecutionEnv)."""
    with _state_lock:
        slots = env.__dict__.get("_subagent_slots")
        if slots is None:
            slots = threading.BoundedSemaphore(MAX_CONCURRENT_SUBAGENTS)
            env.__dict__["_subagent_slots"] = slots
        return slots


def _quota(env: Any) -> int:
    """``maxSubagentCalls`` of the session's orchestration settings (spec 004 §会话编排设置)."""
    from sessions.orchestration import orchestration_from_metadata

    return int(orchestration_from_metadata(env.snapshot.metadata)["maxSubagentCalls"])


def _take_call(env: Any) -> bool:
    """Count one more sub-agent run of this execution; False when ``maxSubagentCalls`` are used up."""
    limit = _quota(env)
    with _state_lock:
        used = int(env.__dict__.get("_subagent_calls") or 0)
        if used >= limit:
            return False
        env.__dict__["_subagent_calls"] = used + 1
        return True


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
    providers = [r for r in agents if r.output_contract == contract and r.id != caller.id]
    if not providers:
        raise refused(NOT_FOUND, f"No active plugin provides a sub-agent for {contract}.")
    if len(providers) > 1:
        raise refused(AMBIGUOUS, f"More than one active plugin provides {contract}.")
    return providers[0]


@dataclass
class SubagentOutcome:
    """One finished sub-agent run. output: its raw output (what code reads); data: the model's view;
    completion: the caller's output when delegate completes the caller (afterTools); proposals: its
    staged writes (join the caller's)."""

    runtime_id: str
    output: Any
    data: Any
    completion: Any
    proposals: list[Any] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


def request_check(args: dict[str, Any]) -> None:
    """Check a request against the delegate parameters (ctx.agents.run; the tool's own schema does
    it for models). Raises ToolError invalid-input naming the field."""
    error = next(iter(sorted(_VALIDATOR.iter_errors(args), key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(request)"
        raise ToolError(INVALID_INPUT, f"{where}: {error.message}"[:2000])


def _character_output(output: Any, text: str) -> dict[str, Any]:
    """``{segments, intent?}`` of a character agent's output (a JSON text answer is read too);
    speakers are dropped. Raises refused internal when there are no valid segments."""
    value = output
    if isinstance(value, dict) and "segments" not in value and isinstance(value.get("text"), str):
        text = value["text"]
        value = None
    if value is None and text.strip():
        try:
            value = json.loads(text.strip().removeprefix("```json").removeprefix("```").removesuffix("```"))
        except ValueError:
            value = None
    segments = value.get("segments") if isinstance(value, dict) else None
    clean = [{"type": s["type"], "text": s["text"]} for s in segments or []
             if isinstance(s, dict) and s.get("type") in SEGMENT_TYPES and isinstance(s.get("text"), str) and s["text"].strip()]
    if not clean or len(clean) != len(segments or []):
        raise refused(INTERNAL, "The character agent did not answer with dialogue/action segments.",
                      hint="Try again with a shorter brief, or write the character yourself.")
    out: dict[str, Any] = {"segments": clean}
    if isinstance(value.get("intent"), str) and value["intent"].strip():
        out["intent"] = value["intent"]
    return out


def subagent_run(env: Any, caller: Any, turn: Any, args: dict[str, Any], *, parent_call_id: str,
                 staged: Callable[[], list[Any]], characters: Callable[[], list[Any]], can_stage: bool,
                 run: Callable[..., Any]) -> SubagentOutcome:
    """Run the sub-agent a delegate request names (module docstring) and return its outcome.

    ``staged()``: the proposals the sub-agent's view sees (the caller's upstream and own staged
    writes); ``characters()``: the caller's view of the cast (for name resolution);
    ``can_stage``: whether write services stay; ``run``: turns.engine.agent.agent_runtime_run
    (passed in: this module does not import the loop). Raises ToolError with the spec's codes
    (all but invalid-input marked refused)."""
    target = args["target"]
    data = args.get("data")
    if data is not None and len(json.dumps(data, ensure_ascii=False).encode("utf-8")) > MAX_DATA_BYTES:
        raise ToolError(INVALID_INPUT, f"data is larger than {MAX_DATA_BYTES} bytes.")
    runtime = resolve_target(env, caller, target)
    is_character = runtime.output_contract == CHARACTER_CONTRACT
    character = None
    if is_character:
        if data is not None:
            raise ToolError(INVALID_INPUT, "data is not accepted for character-actor@1 targets: the character agent "
                                           "gets its own profile and history.", hint="Put what matters in brief or instruction.")
        if not args.get("character"):
            raise ToolError(INVALID_INPUT, "character is required for character-actor@1 targets.",
                            hint="Name the character (its name or alias).")
        character = character_resolve(characters(), args["character"])
    elif "character" in args or "instruction" in args:
        raise ToolError(INVALID_INPUT, "character and instruction are accepted only for character-actor@1 targets.")
    own_steps = int((runtime.agent.loop or {}).get("maxSteps") or 0) or None
    max_steps = args.get("maxSteps")
    if max_steps is not None and own_steps is not None and max_steps >= own_steps:
        raise ToolError(INVALID_INPUT, f"maxSteps must be lower than the sub-agent's own limit ({own_steps}).")
    slots = _slots(env)
    if not slots.acquire(blocking=False):
        raise refused(UNAVAILABLE, f"{MAX_CONCURRENT_SUBAGENTS} sub-agents are already running in this execution; "
                                   "try again later or do it yourself.")
    try:
        if not _take_call(env):
            raise refused(UNAVAILABLE, f"This execution has used all {_quota(env)} of its sub-agent calls "
                                       "(the session's maxSubagentCalls); do it yourself.")
        private = is_character or runtime.is_concealed
        subagent: dict[str, Any] = {"parentCallId": parent_call_id, "parentRuntimeId": caller.id, "brief": args["brief"],
                                    "data": data, "maxSteps": max_steps, "canStage": can_stage, "private": private}
        if character is not None:
            subagent["character"] = {"profile": character.snapshot(), "history": character_history(env.snapshot, character),
                                     "instruction": args.get("instruction")}
        started = time.monotonic()
        result = run(env, runtime, turn, upstream=staged(), inputs={}, upstream_texts=[], run_id=str(uuid.uuid4()),
                     subagent=subagent)
    finally:
        slots.release()
    env.tracer.emit(SUBAGENT_COMPLETED, {
        "runtimeId": runtime.id, "pluginId": runtime.plugin_id, "parentCallId": parent_call_id, "parentRuntimeId": caller.id,
        "status": result.status, "stopReason": (result.error or {}).get("code") or "completed",
        "usage": dict(result.usage), "durationMs": int((time.monotonic() - started) * 1000),
    }, turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    if result.status != "success":
        code = (result.error or {}).get("code")
        message = (result.error or {}).get("message") or "the sub-agent failed"
        mapped = TIMEOUT if code == "timeout" else CANCELLED if code == "aborted" else INTERNAL
        raise refused(mapped, f"The sub-agent {runtime.id} failed: {message}"[:2000])
    output = result.output if result.output is not None else {"text": result.text or ""}
    if character is not None:
        output = _character_output(output, result.text or "")
        data_view = {"character": character.name, **output}
        completion = {"segments": output["segments"]}
    else:
        data_view = output
        completion = None if runtime.is_concealed else output
    return SubagentOutcome(runtime_id=runtime.id, output=output, data=data_view, completion=completion,
                           proposals=list(result.proposals), usage=dict(result.usage))


def delegate_tool(env: Any, caller: Any, turn: Any, *, staged: Any, characters: Any, can_stage: bool, run: Any) -> Tool:
    """The caller's delegate tool (see subagent_run for the arguments). A call that completes the
    caller (afterTools) leaves its projection for ``completion_output``."""

    def execute(args: dict[str, Any], ctx: Any) -> ToolResult:
        outcome = subagent_run(env, caller, turn, args, parent_call_id=ctx.call_id, staged=staged, characters=characters,
                               can_stage=can_stage, run=run)
        with _state_lock:
            env.__dict__.setdefault("_delegate_completions", {})[(caller.id, ctx.call_id)] = outcome.completion
        return ToolResult(content=outcome.output, proposals=outcome.proposals, data=outcome.data)

    return tool(name=NAME, description=(
        "Hand one task to a sub-agent and get its output back: target {contract} (its provider) or {runtimeId} "
        "(a runtime of this package), with a complete brief. For a character-actor@1 target name the character "
        "(character) and optionally say how to act (instruction); it answers with dialogue/action segments."),
        parameters=PARAMETERS, execute=execute, annotations=DELEGATE_ANNOTATIONS)


def completion_output(env: Any, caller_id: str, call_id: str, content: Any) -> Any:
    """The caller's output when a delegate call completes it (afterTools): the private projection
    (``{segments}`` for a character, None for a concealed provider), else ``content``."""
    with _state_lock:
        found = env.__dict__.get("_delegate_completions", {})
        return found.pop((caller_id, call_id)) if (caller_id, call_id) in found else content


def recorded_input(name: str, arguments: Any) -> Any:
    """A delegate call's arguments as the trace and tool records keep them: no instruction."""
    if name == NAME and isinstance(arguments, dict) and "instruction" in arguments:
        return {**arguments, "instruction": PRIVATE_MARK}
    return arguments


def recorded_envelope(name: str, envelope: Any) -> Any:
    """A delegate envelope as the trace and tool records keep it: a character's intent dropped."""
    data = envelope.get("data") if name == NAME and isinstance(envelope, dict) else None
    if isinstance(data, dict) and "intent" in data and "segments" in data:
        return {**envelope, "data": {k: v for k, v in data.items() if k != "intent"}}
    return envelope


def private_messages(messages: list[dict[str, Any]], private: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """A caller's model messages as its traces keep them: for each private delegate call (``{callId:
    (recorded arguments JSON, recorded result JSON)}``) the recorded forms replace the instruction
    and the intent the model itself reads."""
    if not private:
        return messages
    out = []
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in private:
            message = {**message, "content": private[message["tool_call_id"]][1]}
        elif message.get("role") == "assistant" and any(c.get("id") in private for c in message.get("tool_calls") or []):
            message = {**message, "tool_calls": [{**c, "arguments": private[c["id"]][0]} if c.get("id") in private else c
                                                 for c in message["tool_calls"]]}
        out.append(message)
    return out


def private_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A private sub-agent's trace payload without its model traffic and tool contents."""
    return {k: (PRIVATE_MARK if k in PRIVATE_FIELDS and v is not None else v) for k, v in payload.items()}


def _character_block(character: dict[str, Any], *, zh: bool) -> str:
    profile = character["profile"]
    names = ", ".join(n for n in profile.get("aliases") or [])
    lines = ["[角色]" if zh else "[CHARACTER]", f"{'名字' if zh else 'Name'}: {profile['name']}"]
    if names:
        lines.append(f"{'别名' if zh else 'Aliases'}: {names}")
    if profile.get("description"):
        lines.append(f"{'描述' if zh else 'Description'}: {profile['description']}")
    if profile.get("fields"):
        lines.append(f"{'属性' if zh else 'Fields'}: {json.dumps(profile['fields'], ensure_ascii=False)}")
    history = character.get("history") or []
    if history:
        lines += ["", "[亲历历史]" if zh else "[WHAT YOU WITNESSED]"]
        for row in history:
            who = ("玩家" if zh else "Player") if row["role"] == "user" else ("故事" if zh else "Story")
            lines.append(f"{who}: {row['text']}")
    if character.get("instruction"):
        lines += ["", "[指示]" if zh else "[INSTRUCTION]", str(character["instruction"])]
    return "\n".join(lines)


def subagent_user_message(subagent: dict[str, Any], *, zh: bool) -> str:
    """The sub-agent's user message: a character agent's profile, history and instruction, then the
    brief, then the data as JSON when given (a character agent: the answer format)."""
    head = "[任务]" if zh else "[TASK]"
    text = f"{head}\n{subagent['brief']}"
    if subagent.get("data") is not None:
        text += ("\n\n[数据]\n" if zh else "\n\n[DATA]\n") + json.dumps(subagent["data"], ensure_ascii=False, indent=1)
    character = subagent.get("character")
    if character is not None:
        answer = ('只用 JSON 回答：{"segments":[{"type":"dialogue"|"action","text":"…"}],"intent":"…(可选)"}，不写 speaker。'
                  if zh else 'Answer with JSON only: {"segments":[{"type":"dialogue"|"action","text":"..."}],'
                             '"intent":"... (optional)"}, without speakers.')
        text = f"{_character_block(character, zh=zh)}\n\n{text}\n\n{answer}"
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


__all__ = ["CHARACTER_CONTRACT", "MAX_CONCURRENT_SUBAGENTS", "NAME", "PARAMETERS", "SubagentOutcome", "character_names",
           "completion_output", "delegate_tool", "private_messages", "private_payload", "recorded_envelope", "recorded_input", "request_check",
           "resolve_target", "subagent_run", "subagent_tool_names", "subagent_user_message"]
