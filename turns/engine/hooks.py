"""Hooks inside a turn (plugins_app.hooks has the contract and the answers' shapes).

Trace events (spec 004 trace table): ``hook.fired`` ``{event, pluginId, action, runtimeId?, tool?,
error?}`` and ``hook.aborted`` ``{event, pluginId, reason, runtimeId?, tool?}`` are forwarded to the
action stream; ``hook.rewrote`` ``{event, pluginId, runtimeId?, before, after}`` is stored only. A
community plugin's hooks run only while its server-code grant holds in the session
(``env.code_denial``); otherwise they are skipped, as if they answered continue (spec 004: 没有批准的会话
... hook 也会被跳过（返回 continue）). Every handler gets a private JSON copy of its payload plus the
common fields ``{event, sessionId, turnId, locale, activePluginIds, settings}`` (``settings``: the
handler's own plugin's resolved user settings) and, for runtime events, ``runtimeId`` /
``runtimePluginId`` (the runtime the event is about, not the handler's plugin). Handlers of one
event run one after another; a ``replace`` reaches the next handler.

- ``turn_start(env, turn)``: notifies; answers do not change the turn.
- ``pre_schedule(env, turn, runtimes) -> runtimes``: payload ``{triggered: [{name, pluginId, stage,
  type, trigger}]}``; ``replace.triggered`` (names or ``{name}`` objects) narrows / reorders the
  selection; unknown names are ignored, nothing is added; abort means no change.
- ``pre_runtime(env, runtime, turn, inputs) -> reason | None``: payload ``{manifest, input}``; a guard:
  abort (or a handler that raises) skips the runtime with that reason.
- ``post_context_assembly(env, runtime, turn, messages, ...) -> messages``: payload ``{systemPrompt,
  messages, outputKind, promptTemplate, inputSlots, characters}`` (``messages`` without the system
  message); ``replace.systemPrompt`` / ``replace.messages``. The framework's completion contract
  (the system prompt's ``[COMPLETION]`` section) is put back at the end of a replaced system prompt.
- ``pre_llm_call(env, runtime, turn, request, model) -> (request, model)``: payload ``{messages,
  model, tools, stream}``; ``replace.messages`` / ``replace.model`` / ``replace.tools`` change that
  call only (the runtime's own transcript is not changed).
- ``post_runtime(env, runtime, turn, result) -> result``: payload ``{result}`` (the runtime result
  summary with ``output`` / ``text`` / ``usage`` ``{input, output}`` tokens of its model calls); ``replace.result`` may set ``status`` (success | failed |
  skipped), ``output``, ``error``, ``text``; the ids stay. A result turned away from success keeps
  none of its proposals.
- ``pre_tool_use(env, runtime, turn, name, arguments) -> PreToolDecision``: each hook sees the call
  as the previous one left it; a rewrite (``{action: rewrite, tool?, input?}`` or ``replace.toolCall
  {name?, arguments?}``) changes the tool name and/or arguments (the agent loop writes the
  rewritten call into the model history and runs that); an abort refuses the call (its tool result
  is ``refused`` with the hook's reason, it is not run, and in an agent loop it does not count as a
  failed call).
- ``post_tool_use(env, runtime, turn, name, arguments, outcome) -> reason | None``: an abort stops
  the calls still queued in the same model reply; they end ``cancelled``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace as dataclass_replace
from typing import Any, Callable

from covel.jsoncopy import json_copy
from plugins_app.hooks import (
    ACTION_ABORT, ACTION_REWRITE, POST_CONTEXT_ASSEMBLY, POST_RUNTIME, POST_TOOL_USE, PRE_LLM_CALL, PRE_RUNTIME,
    PRE_SCHEDULE, PRE_TOOL_USE, TURN_START, HookAnswer, hook_call, hooks_registered,
)

__all__ = ["HOOK_ABORTED", "HOOK_FIRED", "HOOK_REWROTE", "POST_TOOL_USE", "PRE_TOOL_USE", "PreToolDecision", "has_hooks",
           "post_context_assembly", "post_runtime", "post_tool_use", "pre_llm_call", "pre_runtime", "pre_schedule",
           "pre_tool_use", "turn_start"]

HOOK_FIRED = "hook.fired"
HOOK_ABORTED = "hook.aborted"
HOOK_REWROTE = "hook.rewrote"


@dataclass
class PreToolDecision:
    """The call to run: ``name`` / ``arguments`` (rewritten or as given); ``refused``: the reason
    when a hook refused it (then it must not run); ``rewritten``: a hook changed it."""

    name: str
    arguments: Any
    refused: str | None = None
    rewritten: bool = False


def _registrations(env, event: str) -> list:
    registrations = hooks_registered(env.plugin_registry, [p.id for p in env.plugins], event)
    return [r for r in registrations if env.code_denial(r.plugin_id, None) is None]


def has_hooks(env, event: str) -> bool:
    """Whether any hook of an enabled (and, if community, granted) plugin answers ``event``."""
    return bool(_registrations(env, event))


def _trace(env, turn, type: str, payload: dict[str, Any], *, forward: bool, plugin_id: str, runtime_id: str | None) -> None:
    env.tracer.emit(type, payload, turn_id=turn.turn_id, plugin_id=plugin_id, runtime_id=runtime_id or "", forward=forward)


def _fired(env, turn, event: str, answer: HookAnswer, runtime_id: str | None, tool: str | None) -> None:
    payload: dict[str, Any] = {"event": event, "pluginId": answer.plugin_id, "action": answer.action}
    if runtime_id:
        payload["runtimeId"] = runtime_id
    if tool:
        payload["tool"] = tool
    if answer.error:
        payload["error"] = answer.error
    _trace(env, turn, HOOK_FIRED, payload, forward=True, plugin_id=answer.plugin_id, runtime_id=runtime_id)
    if answer.action == ACTION_ABORT:
        aborted = {k: v for k, v in payload.items() if k not in ("action", "error")}
        _trace(env, turn, HOOK_ABORTED, {**aborted, "reason": answer.reason}, forward=True, plugin_id=answer.plugin_id,
               runtime_id=runtime_id)


def _payload(env, turn, event: str, registration, runtime=None, **fields: Any) -> dict[str, Any]:
    """The common fields plus a private copy of the event's own fields (module docstring)."""
    out: dict[str, Any] = {"event": event, "sessionId": env.snapshot.session_id, "turnId": turn.turn_id,
                           "locale": env.snapshot.locale, "activePluginIds": [p.id for p in env.plugins],
                           "settings": json_copy(env.user_settings.get(registration.plugin_id, {}))}
    if runtime is not None:
        out.update({"runtimeId": runtime.id, "runtimePluginId": runtime.plugin_id})
    out.update(json_copy(fields))
    return out


def _rewrote(env, turn, event: str, answer: HookAnswer, runtime, before: Any, after: Any) -> None:
    payload: dict[str, Any] = {"event": event, "pluginId": answer.plugin_id, "before": before, "after": after}
    if runtime is not None:
        payload["runtimeId"] = runtime.id
    _trace(env, turn, HOOK_REWROTE, payload, forward=False, plugin_id=answer.plugin_id,
           runtime_id=runtime.id if runtime is not None else None)


def _manifest_brief(runtime) -> dict[str, Any]:
    return {"name": runtime.id, "pluginId": runtime.plugin_id, "stage": runtime.stage, "type": runtime.runtime_type,
            "trigger": {"type": runtime.trigger.type, **({"topic": runtime.trigger.topic} if runtime.trigger.topic else {})}}


def turn_start(env, turn) -> None:
    """Run the TurnStart hooks of the turn's plugins (notification only)."""
    for registration in _registrations(env, TURN_START):
        answer = hook_call(registration, {"event": TURN_START, "sessionId": env.snapshot.session_id, "turnId": turn.turn_id,
                                          "origin": turn.origin, "kind": turn.kind, "logicalTurn": turn.logical_turn,
                                          "playerMessage": turn.player_message})
        _fired(env, turn, TURN_START, answer, None, None)


def arguments_value(raw: Any) -> Any:
    """Tool call arguments as a JSON value (a model's JSON text is parsed; unreadable text stays text)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw if raw is not None else {}


def pre_tool_use(env, runtime, turn, name: str, arguments: Any) -> PreToolDecision:
    """Run the PreToolUse hooks on one call (see the module docstring)."""
    registrations = _registrations(env, PRE_TOOL_USE)
    decision = PreToolDecision(name=name, arguments=arguments)
    for registration in registrations:
        before = {"tool": decision.name, "input": arguments_value(decision.arguments)}
        answer = hook_call(registration, {"event": PRE_TOOL_USE, "sessionId": env.snapshot.session_id, "turnId": turn.turn_id,
                                          "runtimeId": runtime.id, "runtimePluginId": runtime.plugin_id, **before})
        _fired(env, turn, PRE_TOOL_USE, answer, runtime.id, decision.name)
        if answer.action == ACTION_ABORT:
            decision.refused = answer.reason or f"a {PRE_TOOL_USE} hook of {answer.plugin_id} refused the call"
            return decision
        tool, new_input = answer.tool, answer.input
        call = (answer.replace or {}).get("toolCall")
        if isinstance(call, dict):  # the documented replace form: {toolCall: {name?, arguments?}}
            tool = call.get("name") if isinstance(call.get("name"), str) and call.get("name") else tool
            arguments = arguments_value(call.get("arguments")) if "arguments" in call else None
            new_input = arguments if isinstance(arguments, dict) else new_input
        if (answer.action == ACTION_REWRITE or call is not None) and (tool or new_input is not None):
            decision.name = tool or decision.name
            if new_input is not None:
                decision.arguments = json.dumps(new_input, ensure_ascii=False)
            decision.rewritten = True
            after = {"tool": decision.name, "input": arguments_value(decision.arguments)}
            _trace(env, turn, HOOK_REWROTE, {"event": PRE_TOOL_USE, "pluginId": answer.plugin_id, "runtimeId": runtime.id,
                                             "before": before, "after": after},
                   forward=False, plugin_id=answer.plugin_id, runtime_id=runtime.id)
    return decision


def post_tool_use(env, runtime, turn, name: str, arguments: Any, outcome) -> str | None:
    """Run the PostToolUse hooks after one call; the stop reason when one aborted, else None."""
    for registration in _registrations(env, POST_TOOL_USE):
        answer = hook_call(registration, {"event": POST_TOOL_USE, "sessionId": env.snapshot.session_id, "turnId": turn.turn_id,
                                          "runtimeId": runtime.id, "runtimePluginId": runtime.plugin_id, "tool": name,
                                          "input": arguments_value(arguments), "status": outcome.status,
                                          "output": outcome.envelope})
        _fired(env, turn, POST_TOOL_USE, answer, runtime.id, name)
        if answer.action == ACTION_ABORT:
            return answer.reason or f"a {POST_TOOL_USE} hook of {answer.plugin_id} stopped the remaining calls"
    return None


# --- turn and runtime events -------------------------------------------------------------------


def pre_schedule(env, turn, runtimes: list) -> list:
    """Run the PreSchedule hooks over the runtimes selected to run (see the module docstring);
    returns the runtimes to schedule, in the order the hooks left them."""
    current = list(runtimes)
    for registration in _registrations(env, PRE_SCHEDULE):
        before = [r.id for r in current]
        answer = hook_call(registration, _payload(env, turn, PRE_SCHEDULE, registration,
                                                  triggered=[_manifest_brief(r) for r in current]))
        _fired(env, turn, PRE_SCHEDULE, answer, None, None)
        triggered = (answer.replace or {}).get("triggered") if answer.action != ACTION_ABORT and not answer.error else None
        if not isinstance(triggered, list):
            continue
        by_id = {r.id: r for r in current}
        names = [item.get("name") if isinstance(item, dict) else item for item in triggered]
        current = [by_id[n] for n in dict.fromkeys(n for n in names if isinstance(n, str) and n in by_id)]
        after = [r.id for r in current]
        if after != before:
            _rewrote(env, turn, PRE_SCHEDULE, answer, None, before, after)
    return current


def pre_runtime(env, runtime, turn, inputs: dict[str, Any]) -> str | None:
    """Run the PreRuntime guard hooks of one runtime; the skip reason when one aborted (or raised), else None."""
    for registration in _registrations(env, PRE_RUNTIME):
        answer = hook_call(registration, _payload(env, turn, PRE_RUNTIME, registration, runtime,
                                                  manifest=_manifest_brief(runtime),
                                                  input={"playerMessage": turn.player_message, "kind": turn.kind,
                                                         "origin": turn.origin, "logicalTurn": turn.logical_turn,
                                                         "inputs": inputs}))
        if answer.error:  # a broken policy must not let the guarded runtime through
            answer = HookAnswer(plugin_id=answer.plugin_id, action=ACTION_ABORT, error=answer.error,
                                reason=f"the {PRE_RUNTIME} hook of {answer.plugin_id} failed")
        _fired(env, turn, PRE_RUNTIME, answer, runtime.id, None)
        if answer.action == ACTION_ABORT:
            return answer.reason or f"a {PRE_RUNTIME} hook of {answer.plugin_id} skipped the runtime"
    return None


COMPLETION_SECTION = "[COMPLETION]\n"


def post_context_assembly(env, runtime, turn, messages: list[dict[str, Any]], *, inputs: dict[str, Any], view,
                          is_story: bool, template: Callable[[], str]) -> list[dict[str, Any]]:
    """Run the PostContextAssembly hooks of an agent runtime over its assembled ``messages``
    (system message first); returns the messages its first model call starts from.
    template: reads the runtime's prompt body (called only when a hook listens)."""
    registrations = _registrations(env, POST_CONTEXT_ASSEMBLY)
    if not registrations:
        return messages
    system = messages[0]["content"] if messages and messages[0].get("role") == "system" else ""
    rest = messages[1:] if system else list(messages)
    contract = system[system.rfind(COMPLETION_SECTION):] if COMPLETION_SECTION in system else ""
    template_text = template()
    characters = [{"id": c.id, "name": c.name, "type": c.type, "description": getattr(c, "description", "")}
                  for c in view.characters()]
    kind = runtime.visibility if runtime.visibility in ("story", "plugin", "system") else ("story" if is_story else "plugin")
    for registration in registrations:
        answer = hook_call(registration, _payload(env, turn, POST_CONTEXT_ASSEMBLY, registration, runtime, systemPrompt=system,
                                                  messages=rest, outputKind=kind, promptTemplate=template_text,
                                                  inputSlots=inputs, characters=characters))
        _fired(env, turn, POST_CONTEXT_ASSEMBLY, answer, runtime.id, None)
        replace = answer.replace if answer.action != ACTION_ABORT and not answer.error else None
        if not replace:
            continue
        before = {"systemPrompt": system, "messageCount": len(rest)}
        if isinstance(replace.get("systemPrompt"), str):
            system = replace["systemPrompt"]
            if contract and contract not in system:
                system = f"{system.rstrip()}\n\n{contract}"
        if isinstance(replace.get("messages"), list) and all(_is_message(m) for m in replace["messages"]):
            rest = json_copy(replace["messages"])
        _rewrote(env, turn, POST_CONTEXT_ASSEMBLY, answer, runtime, before, {"systemPrompt": system, "messageCount": len(rest)})
    return [{"role": "system", "content": system}, *rest] if system else rest


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in ("user", "assistant", "system", "tool")


def pre_llm_call(env, runtime, turn, request, model: str | None):
    """Run the PreLLMCall hooks before one model call; returns (the request to send, the model id).
    ``request`` is a ``ModelRequest``; a rewrite returns a changed copy, the caller's transcript stays."""
    registrations = _registrations(env, PRE_LLM_CALL)
    if not registrations:
        return request, model
    messages, tools, current = request.messages, request.tools, model
    for registration in registrations:
        answer = hook_call(registration, _payload(env, turn, PRE_LLM_CALL, registration, runtime, messages=messages,
                                                  model=current or "", tools=tools, stream=True))
        _fired(env, turn, PRE_LLM_CALL, answer, runtime.id, None)
        replace = answer.replace if answer.action != ACTION_ABORT and not answer.error else None
        if not replace:
            continue
        before = {"model": current or "", "messageCount": len(messages), "tools": [t.get("name") for t in tools]}
        if isinstance(replace.get("messages"), list) and all(_is_message(m) for m in replace["messages"]):
            messages = json_copy(replace["messages"])
        if isinstance(replace.get("model"), str) and replace["model"]:
            current = replace["model"]
        if isinstance(replace.get("tools"), list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                                          for t in replace["tools"]):
            tools = json_copy(replace["tools"])
        _rewrote(env, turn, PRE_LLM_CALL, answer, runtime, before,
                 {"model": current or "", "messageCount": len(messages), "tools": [t.get("name") for t in tools]})
    return dataclass_replace(request, messages=messages, tools=tools), current


_RESULT_STATUSES = ("success", "failed", "skipped")


def post_runtime(env, runtime, turn, result):
    """Run the PostRuntime hooks after one runtime finished; returns the (possibly rewritten) result."""
    registrations = _registrations(env, POST_RUNTIME)
    for registration in registrations:
        view = {**result.summary(), "output": result.output, "text": result.text, "usage": dict(result.usage)}
        answer = hook_call(registration, _payload(env, turn, POST_RUNTIME, registration, runtime, result=view))
        _fired(env, turn, POST_RUNTIME, answer, runtime.id, None)
        new = (answer.replace or {}).get("result") if answer.action != ACTION_ABORT and not answer.error else None
        if not isinstance(new, dict):
            continue
        before = {"status": result.status, "output": json_copy(result.output)}
        status = new.get("status")
        if status in _RESULT_STATUSES and status != result.status:
            if result.status == "success":
                result.proposals, result.pending_inputs = [], []
            result.status = status
            if status == "skipped" and not result.skip_reason:
                result.skip_reason = f"hook:{answer.plugin_id}"
        if "output" in new:
            result.output = json_copy(new["output"])
        if "error" in new and (new["error"] is None or isinstance(new["error"], dict)):
            result.error = json_copy(new["error"])
        if isinstance(new.get("text"), str) and result.is_story:
            result.text = new["text"]
        _rewrote(env, turn, POST_RUNTIME, answer, runtime, before, {"status": result.status, "output": json_copy(result.output)})
    return result
