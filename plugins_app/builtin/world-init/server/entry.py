"""world-init entry module: initialize-world, update-dimensions, dimension-rule-get."""

from __future__ import annotations

from . import dimensions, initialize_world


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(initialize_world.build())
    api.register_tool(dimensions.build_update())
    api.register_tool(dimensions.build_rule_get())
