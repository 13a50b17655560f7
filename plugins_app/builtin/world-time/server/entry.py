"""world-time entry module: registers advance-world-time (spec 000, Plugin tools)."""

from __future__ import annotations

from . import advance


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(advance.build())
