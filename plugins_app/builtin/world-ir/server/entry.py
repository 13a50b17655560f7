"""world-ir entry module: registers submit-world-facts."""

from __future__ import annotations

from . import submit


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(submit.build())
