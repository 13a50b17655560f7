"""Lifecycle hooks a plugin entry registers (``api.register_hook(event, handler, enforce=...)``):
which hooks answer an event, calling them, and reading their answers (pure Python, no Django).

The events that run (``HOOKS_RUN``) and what an answer may do (the payload fields each event gets
are in turns.engine.hooks / sessions.lifecycle):

- ``SessionStart`` (a session was created), ``SessionEnd`` (it is being deleted or ended; once per
  session): observe only.
- ``TurnStart`` (a turn begins): observe only.
- ``PreSchedule`` (the runtimes selected for the turn, before scheduling): ``replace.triggered``
  narrows or reorders them (entries matched by ``name`` = runtime id; nothing can be added).
- ``PreRuntime`` (before a runtime's guard, agent loop or handler): a **guard** — ``abort`` skips
  the runtime (status ``skipped``, the reason); a handler that raises counts as ``abort``.
- ``PostContextAssembly`` (an agent runtime's context, before its first model call):
  ``replace.systemPrompt`` / ``replace.messages``.
- ``PreLLMCall`` (before every model call of an agent runtime): ``replace.messages`` /
  ``replace.model`` / ``replace.tools`` change that call only.
- ``PostRuntime`` (a runtime finished, any status): ``replace.result`` (status, output, error, text).
- ``PreToolUse`` (before a tool call): may rewrite its tool/arguments — the rewrite is what the
  model history and the executor see — or refuse it.
- ``PostToolUse`` (after a call): may stop the calls still queued in the same batch (``cancelled``).

Other declared events (PreCompaction, PostLLMResponse, PreStateCommit, ...) are accepted by the
manifest loader but nothing runs them yet.

A handler is called ``handler(event)`` with a JSON dict ``{event, sessionId, pluginId, ...}`` and
answers None / ``{"action": "continue"}``, ``{"action": "continue", "replace": {...}}`` (a rewrite:
merged field by field over the payload, the next handler sees the merged payload; each event
honours only its own fields), ``{"action": "abort", "reason"}`` (a guard event stops its
operation; on PostToolUse it stops the queue; elsewhere it means "no change"), or
``{"action": "rewrite", "tool"?, "input"?}`` (PreToolUse's own form). A handler that raises is a
failed handler: ``error`` is set; on a guard event (``GUARD_EVENTS``) the caller treats it as abort,
elsewhere as continue. Order: enforce ``pre`` → ``normal`` → ``post``, then the order of the
plugins given. Who may run (community grants) is the caller's decision: it passes only the
plugins allowed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

SESSION_START, SESSION_END, TURN_START = "SessionStart", "SessionEnd", "TurnStart"
PRE_SCHEDULE, PRE_RUNTIME, POST_RUNTIME = "PreSchedule", "PreRuntime", "PostRuntime"
POST_CONTEXT_ASSEMBLY, PRE_LLM_CALL = "PostContextAssembly", "PreLLMCall"
PRE_TOOL_USE, POST_TOOL_USE = "PreToolUse", "PostToolUse"
HOOKS_RUN = (SESSION_START, TURN_START, PRE_SCHEDULE, PRE_RUNTIME, POST_CONTEXT_ASSEMBLY, PRE_LLM_CALL, POST_RUNTIME,
             PRE_TOOL_USE, POST_TOOL_USE, SESSION_END)
#: Events whose abort stops the operation and where a failed handler counts as abort.
GUARD_EVENTS = frozenset({PRE_RUNTIME})

ACTION_CONTINUE, ACTION_ABORT, ACTION_REWRITE = "continue", "abort", "rewrite"
_ENFORCE_ORDER = {"pre": 0, "normal": 1, "post": 2}


@dataclass
class HookAnswer:
    """One hook's answer. action: continue | abort | rewrite; error: the handler raised (text)."""

    plugin_id: str
    action: str = ACTION_CONTINUE
    reason: str = ""
    tool: str | None = None
    input: dict[str, Any] | None = None
    error: str | None = None
    #: ``replace`` of a continue answer (a rewrite of the event's payload fields), else None.
    replace: dict[str, Any] | None = None


def hooks_registered(registry, plugin_ids: list[str], event: str) -> list:
    """The ``Registration``s answering ``event`` among ``plugin_ids`` (loaded entries only), in run order."""
    found = []
    for position, plugin_id in enumerate(plugin_ids):
        record = registry.get(plugin_id)
        if record is None or record.is_code_pending or not record.is_loaded:
            continue
        for registration in record.registrations.hooks.get(event, []):
            found.append((_ENFORCE_ORDER.get(registration.options.get("enforce"), 1), position, registration))
    return [r for _, _, r in sorted(found, key=lambda item: (item[0], item[1]))]


def hook_call(registration, event: dict[str, Any]) -> HookAnswer:
    """Call one hook with ``{**event, pluginId}`` and read its answer (see the module docstring)."""
    try:
        value = registration.target({**event, "pluginId": registration.plugin_id})
    except Exception as exc:  # plugin code may raise anything; a broken hook does not stop the turn
        logger.warning("plugin %s: %s hook raised", registration.plugin_id, event.get("event"), exc_info=True)
        return HookAnswer(plugin_id=registration.plugin_id, error=f"{type(exc).__name__}: {exc}")
    return hook_answer_read(registration.plugin_id, value)


def hook_answer_read(plugin_id: str, value: Any) -> HookAnswer:
    """Read a handler's return value (see the module docstring); anything unreadable is continue."""
    if not isinstance(value, dict):
        return HookAnswer(plugin_id=plugin_id)
    action = value.get("action")
    if action == ACTION_ABORT:
        reason = value.get("reason")
        return HookAnswer(plugin_id=plugin_id, action=ACTION_ABORT, reason=reason if isinstance(reason, str) else "")
    if action == ACTION_REWRITE:
        tool = value.get("tool") if isinstance(value.get("tool"), str) and value.get("tool") else None
        new_input = value.get("input") if isinstance(value.get("input"), dict) else None
        replace = value.get("replace") if isinstance(value.get("replace"), dict) else None
        return HookAnswer(plugin_id=plugin_id, action=ACTION_REWRITE, tool=tool, input=new_input, replace=replace)
    replace = value.get("replace")
    return HookAnswer(plugin_id=plugin_id, replace=replace if isinstance(replace, dict) and replace else None)
