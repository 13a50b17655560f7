"""Shared helpers for tool tests: run builtin tools through the real executor."""

from __future__ import annotations

import json
from typing import Any

from turns.engine.tools import InMemoryStateView, ToolCall, ToolContext, ToolExecutor, default_registry
from turns.engine.tools.executor import ToolCallOutcome

REGISTRY = default_registry()


def make_context(state: InMemoryStateView | None = None, *, locale: str = "en-US", names=None, plugin_id="demo",
                 **kwargs: Any) -> ToolContext:
    return ToolContext(
        session_id="session-1",
        plugin_id=plugin_id,
        runtime_id="demo/main",
        state=state or InMemoryStateView(),
        authorized_tool_names=frozenset(names if names is not None else REGISTRY.builtin_names()),
        locale=locale,
        **kwargs,
    )


def run(name: str, args: Any, state: InMemoryStateView | None = None, *, locale: str = "en-US",
        context: ToolContext | None = None, runtime_tools=None) -> ToolCallOutcome:
    ctx = context or make_context(state, locale=locale, names=set(REGISTRY.builtin_names()) | set(runtime_tools or {}))
    raw = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    executor = ToolExecutor(REGISTRY)
    return executor.execute_batch([ToolCall("call-1", name, raw)], ctx, runtime_tools=runtime_tools)[0]
