"""guide entry module: registers generate-guide."""

from __future__ import annotations

from . import generate_guide


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(generate_guide.build())
