"""story-events/intake function runtime (post-turn): store the follow-up plans published this turn
(`story-event.plan@1`, input `plans`, every provider) in the hidden `_hidden.planned` bucket.

Each plan is checked again (plan.plan_issues against the ledger as it stands); a rejected plan is
reported by id and reason only. A planned event never replaces a world-authored event, a fired one
or one already planned. `retire` drops pending planned events. Output `{accepted, retired,
rejected}` — ids and reasons, never payloads.
"""

from __future__ import annotations

from typing import Any

from . import events
from .facts import dimension_values, time_fields
from .plan import plan_issues


def handle(ctx) -> dict[str, Any] | None:
    raw = ctx.inputs.get("plans")
    plans = [p for p in (raw if isinstance(raw, list) else [raw]) if isinstance(p, dict)]
    plans = [p.get("value") if isinstance(p.get("value"), dict) and "events" not in p else p for p in plans]
    if not plans:
        return None
    turn = int(ctx.logical_turn or 0)
    world_ids = {e["id"] for e in events.world_events(ctx)}
    accepted: list[str] = []
    retired: list[str] = []
    rejected: list[dict[str, str]] = []
    for plan in plans:
        ledger = events.ledger_view(ctx, turn, ctx.locale)
        issues = plan_issues({k: v for k, v in plan.items() if k in ("events", "retire", "reason")}, ledger,
                             dimension_values(ctx.inputs.get("dimensions")) or dict(ctx.world.dimensions),
                             time_fields(ctx.inputs.get("worldTime")))
        clash = [e["id"] for e in plan.get("events") or [] if e.get("id") in world_ids]
        if issues or clash:
            for event in plan.get("events") or [{"id": "(plan)"}]:
                rejected.append({"eventId": str(event.get("id")), "reason": (issues or [f"{clash[0]} is a world event id"])[0][:200]})
            continue
        for rid in plan.get("retire") or []:
            ctx.plugin_data.delete(events.HIDDEN_PLANNED, rid)
            retired.append(rid)
        for event in plan.get("events") or []:
            ctx.plugin_data.set(events.HIDDEN_PLANNED, event["id"], {"event": event, "plannedTurn": turn})
            accepted.append(event["id"])
    return {"accepted": accepted, "retired": retired, "rejected": rejected}
