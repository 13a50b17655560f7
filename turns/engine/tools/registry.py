"""The tool registry: builtins plus plugin tools keyed by (plugin_id, name) (spec 000,
目录与访问边界, 来源分类逻辑).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable

from plugins_app.toolkit.definition import Tool
from plugins_app.toolkit.errors import ToolRegistrationError
# The reserved names live in one table, the toolkit's (plugin manifests are checked against it too).
from plugins_app.toolkit.names import FRAMEWORK_TOOL_NAMES, LOOP_HANDLED_TOOL_NAMES  # noqa: F401

SOURCE_BUILTIN = "builtin"
SOURCE_LOCAL = "local"


@dataclass(frozen=True)
class ResolvedTool:
    tool: Tool
    source: str  # "builtin" | "local"
    plugin_id: str | None


class ToolRegistry:
    """Builtin tools plus per-plugin tools. Thread-safe.

    A plugin's tools resolve only for that plugin; a name never falls through to another
    plugin's tool of the same name.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builtins: dict[str, Tool] = {}
        self._plugins: dict[str, dict[str, Tool]] = {}

    def register_builtin(self, tool: Tool) -> None:
        """Register a framework tool. Raises ToolRegistrationError on a duplicate name."""
        with self._lock:
            if tool.name in self._builtins:
                raise ToolRegistrationError(f'builtin tool "{tool.name}" is already registered')
            self._builtins[tool.name] = tool

    def register_plugin_tools(self, plugin_id: str, tools: Iterable[Tool]) -> None:
        """Register one plugin's whole batch, all or nothing.

        Raises ToolRegistrationError, registering none of the batch, when a name repeats inside
        the plugin (this batch or earlier ones) or uses a reserved framework name.
        """
        batch = list(tools)
        with self._lock:
            existing = self._plugins.get(plugin_id, {})
            seen: set[str] = set(existing)
            for tool in batch:
                if tool.name in FRAMEWORK_TOOL_NAMES or tool.name in self._builtins:
                    raise ToolRegistrationError(
                        f'plugin "{plugin_id}": tool "{tool.name}" uses a reserved framework name; '
                        "no tool of this batch was registered"
                    )
                if tool.name in seen:
                    raise ToolRegistrationError(
                        f'plugin "{plugin_id}": tool "{tool.name}" is registered twice; '
                        "no tool of this batch was registered"
                    )
                seen.add(tool.name)
            merged = dict(existing)
            merged.update({t.name: t for t in batch})
            self._plugins[plugin_id] = merged

    def unregister_plugin(self, plugin_id: str) -> None:
        with self._lock:
            self._plugins.pop(plugin_id, None)

    def resolve(self, name: str, plugin_id: str | None) -> ResolvedTool | None:
        """Find `name` for a caller plugin: builtins first, then that plugin's own tools.

        plugin_id None (no caller context) finds builtins only (spec: findTool 从严).
        """
        with self._lock:
            if name in self._builtins:
                return ResolvedTool(self._builtins[name], SOURCE_BUILTIN, None)
            if plugin_id is not None and name in self._plugins.get(plugin_id, {}):
                return ResolvedTool(self._plugins[plugin_id][name], SOURCE_LOCAL, plugin_id)
        return None

    def builtin_names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._builtins)

    def plugin_tool_names(self, plugin_id: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._plugins.get(plugin_id, {}))
