"""scene-cast function runtime (pre-turn): the active speakers as scene-cast@1 (see cast.py)."""

from __future__ import annotations

from typing import Any

from . import cast


def handle(ctx) -> dict[str, Any]:
    return cast.publish(ctx)
