"""Guard of story-events/plot: skip without this turn's story, and when six or more planned events
are pending and none could be retired by the model anyway (nothing to do); else run the planner."""

from __future__ import annotations

from typing import Any

from . import events


def guard(ctx) -> dict[str, Any] | None:
    narrative = ctx.inputs.get("narrative")
    if not isinstance(narrative, str) or not narrative.strip():
        return {"skip": "no story this turn"}
    fired = events.ledger(ctx)
    pending = [e for e in events.planned_events(ctx) if e["id"] not in fired]
    if len(pending) >= events.PLANNED_LIMIT * 2:
        return {"skip": f"{len(pending)} planned events are pending"}
    return None
