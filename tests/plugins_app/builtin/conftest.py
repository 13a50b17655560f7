"""Fixtures for the builtin plugin tests: the real plugin registry (manifests + entry modules) and
a helper that runs one plugin tool through the ToolExecutor against an InMemoryStateView."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from plugins_app.registry import PluginRegistry, registry_build
from turns.engine.tools.context import InMemoryStateView, ToolContext
from plugins_app.toolkit.definition import Tool
from turns.engine.tools.executor import ToolCall, ToolCallOutcome, ToolExecutor
from turns.engine.tools.builtin import default_registry
from turns.engine.tools.registry import ToolRegistry


@pytest.fixture(scope="session")
def builtin_plugins() -> PluginRegistry:
    return registry_build(community_dir=None)


@pytest.fixture(scope="session")
def tool_executor(builtin_plugins: PluginRegistry) -> ToolExecutor:
    registry: ToolRegistry = default_registry()
    for record in builtin_plugins.loaded():
        tools = [reg.options["definition"] for reg in record.registrations.tools.values()]
        assert all(isinstance(t, Tool) for t in tools)
        registry.register_plugin_tools(record.id, tools)
    executor = ToolExecutor(registry)
    yield executor
    executor.close()


RunTool = Callable[..., ToolCallOutcome]


@pytest.fixture
def run_tool(tool_executor: ToolExecutor) -> RunTool:
    """run_tool(plugin_id, name, args, state=None, *, locale="en-US", inputs=None, turn=3)."""

    def run(
        plugin_id: str,
        name: str,
        args: dict[str, Any] | str,
        state: InMemoryStateView | None = None,
        *,
        locale: str = "en-US",
        inputs: dict[str, Any] | None = None,
        turn: int | None = 3,
    ) -> ToolCallOutcome:
        context = ToolContext(
            session_id="session-test",
            plugin_id=plugin_id,
            runtime_id=f"{plugin_id}/test",
            state=state or InMemoryStateView(),
            authorized_tool_names=frozenset({name}),
            locale=locale,
            content_locale=locale,
            logical_turn=turn,
            inputs=inputs or {},
        )
        raw = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return tool_executor.execute_one(ToolCall("call-1", name, raw), context)

    return run
