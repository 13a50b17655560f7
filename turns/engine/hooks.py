"""Hooks inside a turn: TurnStart, PreToolUse and PostToolUse (plugins_app.hooks has the contract).

Trace events (spec 004 trace table): ``hook.fired`` ``{event, pluginId, action, runtimeId?, tool?,
error?}`` and ``hook.aborted`` ``{event, pluginId, reason, runtimeId?, tool?}`` are forwarded to the
action stream; ``hook.rewrote`` ``{event, pluginId, runtimeId, before: {tool, input}, after: {tool,
input}}`` is stored only. A community plugin's hooks run only while its server-code grant holds in
the session (``env.code_denial``); otherwise they are skipped, as if they answered continue
(spec 004: 没有批准的会话 ... hook 也会被跳过（返回 continue）).

- ``turn_start(env, turn)``: notifies; answers do not change the turn.
- ``pre_tool_use(env, runtime, turn, name, arguments) -> PreToolDecision``: each hook sees the call
  as the previous one left it; a rewrite changes the tool name and/or arguments (the agent loop
  writes the rewritten call into the model history and runs that); an abort refuses the call (its
  tool result is ``refused`` with the hook's reason, it is not run, and in an agent loop it does
  not count as a failed call).
- ``post_tool_use(env, runtime, turn, name, arguments, outcome) -> reason | None``: an abort stops
  the calls still queued in the same model reply; they end ``cancelled``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from plugins_app.hooks import (
    ACTION_ABORT, ACTION_REWRITE, POST_TOOL_USE, PRE_TOOL_USE, TURN_START, HookAnswer, hook_call, hooks_registered,
)

__all__ = ["HOOK_ABORTED", "HOOK_FIRED", "HOOK_REWROTE", "POST_TOOL_USE", "PRE_TOOL_USE", "PreToolDecision", "has_hooks",
           "post_tool_use", "pre_tool_use", "turn_start"]

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
        if answer.action == ACTION_REWRITE and (answer.tool or answer.input is not None):
            decision.name = answer.tool or decision.name
            if answer.input is not None:
                decision.arguments = json.dumps(answer.input, ensure_ascii=False)
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
