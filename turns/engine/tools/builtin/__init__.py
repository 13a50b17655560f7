"""Framework (builtin) tools: one module per tool, spec 000 §Builtin 工具.

search-tools and delegate are handled by the agent loop and are not built here.
Dataset tools are generated per runtime (turns.engine.tools.builtin.datasets), not registered.
"""

from __future__ import annotations

from turns.engine.tools.builtin import (
    characters,
    create_choices,
    create_form,
    create_notification,
    emit_event,
    memory_search,
    render_ui,
    runtime_done,
    suspend,
    world_dimension,
)
from plugins_app.toolkit.definition import Tool
from turns.engine.tools.registry import ToolRegistry


def builtin_tools() -> list[Tool]:
    """Fresh Tool objects for every builtin this package implements."""
    return [
        create_form.build(),
        create_choices.build(),
        create_notification.build(),
        render_ui.build(),
        characters.build_sync(),
        characters.build_list(),
        characters.build_get(),
        world_dimension.build_get(),
        world_dimension.build_list(),
        emit_event.build(),
        suspend.build(),
        runtime_done.build(),
        memory_search.build(),
    ]


def default_registry() -> ToolRegistry:
    """A registry with every builtin tool of this package registered."""
    registry = ToolRegistry()
    for builtin in builtin_tools():
        registry.register_builtin(builtin)
    return registry
