"""Lifecycle hooks a plugin entry registers (``api.register_hook(event, handler, enforce=...)``):
which hooks answer an event, calling them, and reading their answers (pure Python, no Django).

The events that run (``HOOKS_RUN``): ``SessionStart`` (a session was created), ``SessionEnd``
(it is being deleted or ended; once per session), ``TurnStart`` (a turn begins), ``PreToolUse``
(before a tool call: may rewrite its tool/arguments — the rewrite is what the model history and
the executor see — or refuse it), ``PostToolUse`` (after a call: may stop the calls still queued
in the same batch, which end ``cancelled``). Other declared events are accepted by the manifest
loader but nothing runs them yet.

A handler is called ``handler(event)`` with a JSON dict ``{event, sessionId, pluginId, ...}`` and
answers None / ``{"action": "continue"}``, ``{"action": "abort", "reason"}`` (PreToolUse: refuse;
PostToolUse: stop the queue), ``{"action": "rewrite", "tool"?, "input"?}`` (PreToolUse only).
A handler that raises counts as continue (the error is reported to the caller). Order: enforce
``pre`` → ``normal`` → ``post``, then the order of the plugins given. Who may run (community
grants) is the caller's decision: it passes only the plugins allowed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

SESSION_START, SESSION_END, TURN_START = "SessionStart", "SessionEnd", "TurnStart"
PRE_TOOL_USE, POST_TOOL_USE = "PreToolUse", "PostToolUse"
HOOKS_RUN = (SESSION_START, TURN_START, PRE_TOOL_USE, POST_TOOL_USE, SESSION_END)

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
    if not isinstance(value, dict):
        return HookAnswer(plugin_id=plugin_id)
    action = value.get("action")
    if action == ACTION_ABORT:
        reason = value.get("reason")
        return HookAnswer(plugin_id=plugin_id, action=ACTION_ABORT, reason=reason if isinstance(reason, str) else "")
    if action == ACTION_REWRITE:
        tool = value.get("tool") if isinstance(value.get("tool"), str) and value.get("tool") else None
        new_input = value.get("input") if isinstance(value.get("input"), dict) else None
        return HookAnswer(plugin_id=plugin_id, action=ACTION_REWRITE, tool=tool, input=new_input)
    return HookAnswer(plugin_id=plugin_id)
