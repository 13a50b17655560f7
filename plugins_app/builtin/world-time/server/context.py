"""world-time/context function runtime: publish the committed clock before narration
(world-time-context@1). Without a time definition it publishes nothing (advance is then skipped
because its required `currentTime` input is missing). On the first turn it stores the clock at
`definition.initial` in the same transaction."""

from __future__ import annotations

from typing import Any

from .advance import CLOCK_KEY, CLOCK_NAMESPACE, DEFINITION_KEY, DEFINITIONS_NAMESPACE
from .clock import Calendar


def handle(ctx) -> dict[str, Any] | None:
    """Function runtime entry (turns.engine.function.FunctionContext)."""
    record = ctx.plugin_data.get(DEFINITIONS_NAMESPACE, DEFINITION_KEY)
    definition = record.get("definition") if isinstance(record, dict) else None
    if not isinstance(definition, dict):
        return None
    calendar = Calendar(definition)
    clock = ctx.plugin_data.get(CLOCK_NAMESPACE, CLOCK_KEY)
    if isinstance(clock, dict) and isinstance(clock.get("tick"), int):
        tick = clock["tick"]
    else:
        tick = calendar.initial_tick()
        ctx.plugin_data.set(CLOCK_NAMESPACE, CLOCK_KEY, {"tick": tick, "turn": ctx.logical_turn, "reason": "initial"})
    return {
        "schemaVersion": 1,
        "definition": definition,
        "tick": tick,
        "display": calendar.label(tick, ctx.locale),
        "locale": ctx.locale,
    }
