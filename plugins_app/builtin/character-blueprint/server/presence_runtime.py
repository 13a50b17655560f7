"""character-blueprint/presence manual runtime: character-presence's record checks (its
server/presence.py, loaded by path) stored under this plugin's `presence` namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_PRESENCE: Any = None


def _presence() -> Any:
    global _PRESENCE
    if _PRESENCE is None:
        from plugins_app.toolkit import module_load_by_path

        _PRESENCE = module_load_by_path(Path(__file__).resolve().parents[2] / "character-presence", "character-presence",
                                        "server/presence.py")
    return _PRESENCE


def handle(ctx) -> dict[str, Any]:
    return _presence().store(ctx, ctx.manual_payload)
