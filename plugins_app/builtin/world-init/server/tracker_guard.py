"""Guard of world-init/dimension-tracker: skip the model when the session has no dimensions or
this narrative source's receipt is terminal (a pending-settlement receipt runs it again)."""

from __future__ import annotations

from typing import Any

from .common import SETTLEMENTS_NAMESPACE, fallback_result_id, receipt_is_terminal


def guard(ctx) -> dict[str, Any] | None:
    """`{"skip": reason}` without dimensions or when this narrative's settlement receipt exists
    (same key as update-dimensions: `source.resultId`, else common.fallback_result_id); None runs
    the model."""
    if not ctx.world.dimensions:
        return {"skip": "no world dimensions"}
    narrative = ctx.inputs.get("narrative")
    source = narrative.get("source") if isinstance(narrative, dict) else None
    if isinstance(source, dict) and source.get("resultId"):
        result_id = source["resultId"]
    else:
        text = narrative.get("value") if isinstance(narrative, dict) else narrative
        result_id = fallback_result_id(ctx.logical_turn, text)
    receipt = ctx.plugin_data.get(SETTLEMENTS_NAMESPACE, str(result_id))
    if receipt is not None and receipt_is_terminal(receipt):
        return {"skip": "this turn's dimensions are already settled"}
    return None
