"""ExecutionEnv: what every runtime of one execution shares (snapshot, plugins, tools, models,
tracer), plus the process-wide tool registry/executor built from the plugin registry.

Community code (spec 000 §第三方插件 server-code 审批边界): the engine never decides trust itself. Its
caller passes ``code_grants(plugin_id, runtime_id | None) -> missing approval key | None`` (the
session's grants, read from the database right then); with none, community code never runs.
``community_entries_load`` imports the entry of every community plugin whose server-code grant
holds just before the execution builds its tools, and each community runtime is checked again
right before it runs (``ExecutionEnv.code_denial``; turns.engine.schedule).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from plugins_app.manifest_files import event_schema_load
from plugins_app.manifests import PluginManifest, RuntimeManifest
from plugins_app.registry import PluginRecord, PluginRegistry
from turns.engine.providers.config import ModelRouter
from turns.engine.snapshot import SessionSnapshot
from turns.engine.tools.context import CancelToken
from plugins_app.toolkit.state import DatasetDeclaration, EventTopic, SearchableRecord
from plugins_app.toolkit.definition import Tool, tool
from plugins_app.toolkit.errors import ToolDefinitionError, ToolRegistrationError
from turns.engine.tools.executor import ToolExecutor
from turns.engine.tools.builtin import default_registry
from turns.engine.tools.registry import ToolRegistry
from turns.engine.trace import Tracer
from plugins_app.trust import SERVER_CODE_ACTION

logger = logging.getLogger(__name__)

_tools_cache: dict[int, tuple[PluginRegistry, int, ToolRegistry, ToolExecutor]] = {}

#: (plugin_id, runtime_id or None) -> the missing approval key, or None when the code may run.
CodeGrants = Callable[[str, "str | None"], "str | None"]


def community_entries_load(plugin_registry: PluginRegistry, records: list[PluginRecord], code_grants: CodeGrants | None) -> None:
    """Import the pending entries of ``records`` whose session grant for server code holds now
    (checked through ``code_grants`` right before loading); others stay unloaded."""
    for record in records:
        if record.is_code_pending and code_grants is not None and code_grants(record.id, None) is None:
            plugin_registry.entry_ensure(record.id)
_tools_lock = threading.Lock()


def _plugin_tool(plugin_id: str, name: str, target: Any, options: dict[str, Any]) -> Tool:
    definition = options.get("definition")
    if isinstance(definition, Tool):
        return definition
    if isinstance(target, Tool):
        return target
    return tool(
        name=name,
        description=str(options.get("description") or name),
        parameters=options.get("parameters"),
        execute=target,
        annotations=options.get("annotations"),
        timeout_ms=options.get("timeout_ms") or options.get("timeoutMs"),
    )


def tools_for_registry(plugin_registry: PluginRegistry) -> tuple[ToolRegistry, ToolExecutor]:
    """The ToolRegistry (builtins + every loaded plugin's tools) and ToolExecutor for a plugin
    registry, built once per registry object. A plugin whose tools cannot be built is logged and
    left without tools (its runtimes then fail with "did not register it")."""
    key = id(plugin_registry)
    generation = getattr(plugin_registry, "generation", 0)
    with _tools_lock:
        cached = _tools_cache.get(key)
        if cached is not None and cached[0] is plugin_registry and cached[1] == generation:
            return cached[2], cached[3]
        registry = default_registry()
        for record in plugin_registry.loaded():
            batch = []
            try:
                for name, reg in record.registrations.tools.items():
                    batch.append(_plugin_tool(record.id, name, reg.target, dict(reg.options)))
                registry.register_plugin_tools(record.id, batch)
            except (ToolDefinitionError, ToolRegistrationError):
                logger.exception("plugin %s: tools could not be registered", record.id)
        executor = ToolExecutor(registry)
        _tools_cache[key] = (plugin_registry, generation, registry, executor)
        return registry, executor


@dataclass
class ExecutionEnv:
    """Shared by the runtimes of one execution. ``plugins``: active, loaded plugin records in
    activePlugins order. ``user_settings``: plugin id → merged settings (defaults < world < request)."""

    snapshot: SessionSnapshot
    plugin_registry: PluginRegistry
    plugins: list[PluginRecord]
    tool_registry: ToolRegistry
    executor: ToolExecutor
    router: ModelRouter
    tracer: Tracer
    request_model: str | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    user_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    code_grants: CodeGrants | None = None

    def code_denial(self, plugin_id: str, runtime_id: str | None) -> str | None:
        """The approval key a community plugin's code still lacks in this session (server code first,
        then ``runtime:<id>``), or None (builtin plugins, or granted). Asked right before the code runs."""
        record = self.plugin(plugin_id)
        if record is None or not record.needs_code_grant:
            return None
        if self.code_grants is None:
            return SERVER_CODE_ACTION
        return self.code_grants(plugin_id, runtime_id)

    def plugin(self, plugin_id: str) -> PluginRecord | None:
        return next((p for p in self.plugins if p.id == plugin_id), None)

    def manifest(self, plugin_id: str) -> PluginManifest | None:
        record = self.plugin(plugin_id)
        return record.manifest if record else None

    def runtimes(self) -> list[RuntimeManifest]:
        return [r for p in self.plugins for r in p.manifest.runtimes]

    def form_validators(self, plugin_id: str) -> frozenset[str]:
        record = self.plugin(plugin_id)
        return frozenset(record.registrations.form_validators) if record else frozenset()

    def event_topics(self) -> list[EventTopic]:
        out: list[EventTopic] = []
        for record in self.plugins:
            for item in record.manifest.contributes.events:
                if isinstance(item, dict) and isinstance(item.get("topic"), str):
                    # Inline schemas and package-relative schema files alike (spec 000 §emit-event).
                    schema, problem = event_schema_load(record.manifest.root, item)
                    desc = item.get("description")
                    out.append(EventTopic(topic=item["topic"], plugin_id=record.id, schema=schema,
                                          description=desc if isinstance(desc, str) else "",
                                          advertise=item.get("advertise", True) is not False,
                                          schema_unavailable=problem is not None))
        return out

    def searchable_records(self) -> list[SearchableRecord]:
        """Committed plugin-data records of the active plugins' namespaces declared
        ``contributes.data.<namespace>.search`` (memory-search archival, spec 000 §插件记忆与向量搜索:
        没声明的 namespace，框架不读)."""
        out: list[SearchableRecord] = []
        for record in self.plugins:
            for namespace, decl in record.manifest.contributes.data.items():
                if not isinstance(decl, dict) or not decl.get("search"):
                    continue
                for key, value in self.snapshot.plugin_data.get((record.id, namespace), {}).items():
                    out.append(SearchableRecord(plugin_id=record.id, namespace=namespace, key=key, value=value))
        return out

    def datasets(self, plugin_id: str) -> dict[str, DatasetDeclaration]:
        record = self.plugin(plugin_id)
        if record is None:
            return {}
        out: dict[str, DatasetDeclaration] = {}
        for name, decl in record.manifest.contributes.datasets.items():
            schema = decl.get("schema")
            if isinstance(schema, str):
                path = (record.manifest.root / schema).resolve()
                try:
                    schema = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    schema = {"type": "object"}
            ops = decl.get("ops")
            tools = decl.get("tools")
            out[name] = DatasetDeclaration(
                name=name, schema=schema if isinstance(schema, dict) else {"type": "object"}, key_field=decl.get("key"),
                ops=tuple(ops) if isinstance(ops, list) else ("set",), tools=tuple(tools) if isinstance(tools, list) else None,
                description=decl.get("description") if isinstance(decl.get("description"), str) else "",
            )
        return out
