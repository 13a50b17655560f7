"""affinity entry module: registers update-affinity."""

from __future__ import annotations

from . import update_affinity


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(update_affinity.build())
