"""codex entry module: registers sync-codex-entries."""

from __future__ import annotations

from . import sync_codex


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(sync_codex.build())
