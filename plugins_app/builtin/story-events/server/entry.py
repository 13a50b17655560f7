"""story-events entry module: registers plan-story-events."""

from __future__ import annotations

from . import plan


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(plan.build())
