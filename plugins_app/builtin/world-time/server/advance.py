"""advance-world-time: settle this turn's world time (spec 000 overview and §advance-world-time).

State (this plugin's own data):
- `definitions/world`: `{id: "world", definition}` imported from the world's
  `contract:world.time-definition@1` data;
- `clock/session`: `{tick, turn, reason}`; absent means the clock still stands at `initial`.

Runtime inputs (ToolContext.inputs): `narrative` (required; the bound narrative source) and
optionally `currentTime` (`{value: {tick}}`, the clock the narrative was written against).
Result (content): the world-time-evolution@1 output `{schemaVersion, definition, tick, display,
lastDelta, reason, summary: {display, unit, elapsedSinceStart, elapsedThisTurn}}`.
Errors: unavailable without a definition or a narrative input; conflict when the stored clock moved
after the narrative started (stop and read the clock next turn); invalid-input for arguments the
definition does not allow. One plugin.data proposal writes the new clock.
"""

from __future__ import annotations

import hashlib
from typing import Any

from plugins_app.toolkit import (
    CONFLICT,
    INVALID_INPUT,
    PLUGIN_DATA,
    UNAVAILABLE,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    tool,
)

from .clock import PHASES, Calendar

NAME = "advance-world-time"
DEFINITIONS_NAMESPACE = "definitions"
DEFINITION_KEY = "world"
CLOCK_NAMESPACE = "clock"
CLOCK_KEY = "session"

_POSITION = {
    "type": "object",
    "description": "The time the story has reached: calendar {year, month, day, hour, minute} or phases {cycle, phase}.",
    "properties": {k: {"type": "integer"} for k in ("year", "month", "day", "hour", "minute", "cycle", "phase")},
    "additionalProperties": False,
}

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["reason"],
    "properties": {
        "amount": {"type": "integer", "minimum": 0, "description": "How much time passed, in `unit`."},
        "unit": {"enum": ["minute", "hour", "day", "phase", "cycle"], "description": "Unit of `amount`."},
        "target": _POSITION,
        "direction": {"enum": ["forward", "backward"], "description": "Only for bidirectional worlds."},
        "reason": {"type": "string", "minLength": 1, "maxLength": 200, "description": "What took the time, one short sentence."},
    },
    "additionalProperties": False,
}

DESCRIPTION = (
    "Settle this turn's world time. Submit either the elapsed `amount` + `unit`, or the `target` time the "
    "story reached; the tool does the calendar arithmetic. In random-mode worlds submit only `reason`. "
    "Call once per turn."
)


def clock_state(ctx: CallContext) -> tuple[Calendar, int, int]:
    """(calendar, current tick, initial tick). Raises ToolError(unavailable) without a definition."""
    exists, record = ctx.state.plugin_data_get(ctx.plugin_id, DEFINITIONS_NAMESPACE, DEFINITION_KEY)
    definition = record.get("definition") if exists and isinstance(record, dict) else None
    if not isinstance(definition, dict):
        raise ToolError(UNAVAILABLE, "This session has no world time definition, so there is no clock to advance.")
    calendar = Calendar(definition)
    initial = calendar.initial_tick()
    has_clock, clock = ctx.state.plugin_data_get(ctx.plugin_id, CLOCK_NAMESPACE, CLOCK_KEY)
    tick = clock["tick"] if has_clock and isinstance(clock, dict) and isinstance(clock.get("tick"), int) else initial
    return calendar, tick, initial


def _invalid(message: str) -> ToolError:
    return ToolError(INVALID_INPUT, message, hint="Fix the arguments and call advance-world-time again.")


def _random_delta(calendar: Calendar, ctx: CallContext) -> int:
    evolution = calendar.definition.get("evolution") or {}
    bounds = evolution.get("randomRange") or {"min": 0, "max": int(evolution.get("maxStep", 1))}
    low, high = int(bounds["min"]), int(bounds["max"])
    seed = hashlib.sha256(f"{ctx.session_id}:{ctx.logical_turn}:{ctx.runtime_id}".encode()).digest()
    return low + int.from_bytes(seed[:8], "big") % (high - low + 1)


def _delta(args: dict[str, Any], calendar: Calendar, tick: int, ctx: CallContext) -> int:
    evolution = calendar.definition.get("evolution") or {}
    mode = evolution.get("mode", "forward")
    max_step = int(evolution.get("maxStep", 10**9))
    given = [k for k in ("amount", "unit", "target", "direction") if k in args]
    if mode == "random":
        if given:
            raise _invalid(f"This world's time moves randomly: submit only `reason` (remove {', '.join(given)}).")
        return _random_delta(calendar, ctx)
    if "target" in args and ("amount" in args or "unit" in args):
        raise _invalid("Give either `target` or `amount` + `unit`, not both.")
    if "target" in args:
        allowed = {"cycle", "phase"} if calendar.kind == PHASES else {"year", "month", "day", "hour", "minute"}
        extra = sorted(set(args["target"]) - allowed)
        if extra:
            raise _invalid(f"target: this world's clock has no {', '.join(extra)}; use {', '.join(sorted(allowed))}.")
        merged = {**calendar.parts_of(tick), **args["target"]}
        try:
            delta = calendar.tick_of(merged) - tick
        except ValueError as exc:
            raise _invalid(f"target: {exc}.") from None
    else:
        unit = args.get("unit", calendar.base_unit)
        try:
            per_unit = calendar.unit_ticks(unit)
        except KeyError:
            raise _invalid(f"unit: this world counts time in {', '.join(calendar.units)}, not {unit}.") from None
        amount = args["amount"] if "amount" in args else int(evolution.get("defaultStep", 0))
        delta = amount * per_unit
        direction = args.get("direction") or ("backward" if mode == "backward" else "forward")
        if direction == "backward":
            delta = -delta
    if mode == "forward" and delta < 0:
        raise _invalid("Time only moves forward in this world; the target is earlier than the current time.")
    if mode == "backward" and delta > 0:
        raise _invalid("Time only moves backward in this world.")
    if abs(delta) > max_step:
        raise _invalid(
            f"{calendar.duration_text(delta, 'en-US')} is more than this world's largest step "
            f"({calendar.duration_text(max_step, 'en-US')}); settle only the time this turn actually took."
        )
    return delta


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    if not ctx.inputs.get("narrative"):
        raise ToolError(UNAVAILABLE, "No narrative is bound to this run, so there is no story time to settle.")
    calendar, tick, initial = clock_state(ctx)
    current_input = (ctx.inputs.get("currentTime") or {}).get("value")
    if isinstance(current_input, dict) and isinstance(current_input.get("tick"), int) and current_input["tick"] != tick:
        raise ToolError(
            CONFLICT,
            "The world clock changed after this turn's story was written. Stop now; the next turn reads the current clock.",
        )
    delta = _delta(args, calendar, tick, ctx)
    new_tick = tick + delta
    locale = ctx.content_locale
    display = calendar.label(new_tick, locale)
    content = {
        "schemaVersion": 1,
        "definition": calendar.definition,
        "tick": new_tick,
        "display": display,
        "lastDelta": delta,
        "reason": args["reason"],
        "summary": {
            "display": display,
            "unit": calendar.base_unit,
            "elapsedSinceStart": new_tick - initial,
            "elapsedThisTurn": delta,
        },
    }
    previous_display = calendar.label(tick, locale)
    proposal = Proposal(
        PLUGIN_DATA,
        {
            "namespace": CLOCK_NAMESPACE,
            "key": CLOCK_KEY,
            "value": {"tick": new_tick, "turn": ctx.logical_turn, "reason": args["reason"]},
        },
    )
    if instruction_locale_for(ctx.locale) == ZH_CN:
        if delta == 0:
            summary = f"世界时间未变：{display}。"
        else:
            verb = "推进" if delta > 0 else "回退"
            summary = (
                f"世界时间{verb}了{calendar.duration_text(delta, ZH_CN)}："
                f"{previous_display} → {display}。"
            )
    elif delta == 0:
        summary = f"World time unchanged: {display}."
    else:
        verb = "advanced" if delta > 0 else "moved back"
        summary = (
            f"World time {verb} by {calendar.duration_text(delta, 'en-US')}: "
            f"{previous_display} → {display}."
        )
    return ToolResult(content=content, proposals=[proposal], summary=summary)


def build() -> Tool:
    return tool(name=NAME, description=DESCRIPTION, parameters=PARAMETERS, execute=_execute)
