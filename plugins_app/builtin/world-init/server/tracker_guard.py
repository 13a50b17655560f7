"""Guard of world-init/dimension-tracker: skip the model when the session has no dimensions or
this narrative source is already settled."""

from __future__ import annotations

from typing import Any

from .common import SETTLEMENTS_NAMESPACE


def guard(ctx) -> dict[str, Any] | None:
    if not ctx.world.dimensions:
        return {"skip": "no world dimensions"}
    narrative = ctx.inputs.get("narrative")
    source = narrative.get("source") if isinstance(narrative, dict) else None
    result_id = source.get("resultId") if isinstance(source, dict) else f"turn-{ctx.logical_turn}"
    if ctx.plugin_data.get(SETTLEMENTS_NAMESPACE, str(result_id)) is not None:
        return {"skip": "this turn's dimensions are already settled"}
    return None
