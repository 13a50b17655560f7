"""npc-graph entry module: registers upsert-npc-graph and list-npc-graph."""

from __future__ import annotations

from . import tools


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    for definition in tools.build():
        api.register_tool(definition)
