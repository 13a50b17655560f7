"""The reserved framework tool names (spec 000 §注解与超时: "框架保留名只有 SDK 的
FRAMEWORK_TOOL_NAMES 一份来源").

One table for everything that must not shadow a framework tool: plugin tool registration
(turns.engine.tools.registry), the manifest's static checks (plugins_app.manifest_semantics:
contributes.tools, service imports, dataset tools) and the engine's generated tools. The order is
the overview table's (builtin rows, then the injected search-tools, then memory-search).
"""

from __future__ import annotations

#: Framework tools in the overview table's order (builtin and 注入 rows, plus memory-search).
FRAMEWORK_TOOL_ORDER: tuple[str, ...] = (
    "create-form", "create-choices", "create-notification", "render-ui", "sync-characters",
    "list-characters", "get-character", "world-dimension-get", "world-dimension-list",
    "emit-event", "suspend", "runtime-done", "delegate", "memory-search", "search-tools",
)
#: The reserved names as a set (registration and manifest checks look names up here).
FRAMEWORK_TOOL_NAMES: frozenset[str] = frozenset(FRAMEWORK_TOOL_ORDER)
#: Injected by the framework (tools.defer), never declared in tools.builtin (spec 000 §search-tools).
SEARCH_TOOLS = "search-tools"
#: Names the agent loop handles itself, never the ToolExecutor (spec 000: 循环内处理).
LOOP_HANDLED_TOOL_NAMES: frozenset[str] = frozenset({SEARCH_TOOLS, "delegate"})
