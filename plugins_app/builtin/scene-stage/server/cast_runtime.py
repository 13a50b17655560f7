"""scene-stage/cast (pre-turn): the scene-cast plugin's selection (its server/cast.py, loaded by
path so both packages publish the same choice) under scene-stage's own `active-cast` data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_CAST: Any = None


def _cast() -> Any:
    global _CAST
    if _CAST is None:
        from plugins_app.toolkit import module_load_by_path

        _CAST = module_load_by_path(Path(__file__).resolve().parents[2] / "scene-cast", "scene-cast", "server/cast.py")
    return _CAST


def handle(ctx) -> dict[str, Any]:
    return _cast().publish(ctx)
