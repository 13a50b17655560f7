"""plan-story-events (spec 000 §plan-story-events): check a follow-up hidden event plan and return
it, normalized, as the tool's content (the plot runtime's `story-event.plan@1` output). No
proposals (stagesWrites false, idempotent); intake stores the plan after the turn.

Checks beyond the JSON Schema (schemas/story-event-plan.schema.json): at most 2 events per call;
ids unique, not a fired or already planned event; `dimension` leaves name a dimension of the
`dimensions` input and a path that exists in its value; `revealed` leaves name a fired or planned
event (or one of this plan); no condition may already hold; `retire` names pending planned events
only; with 6 or more pending plans no new event. Without the ledger input (`storyEvents`):
`unavailable`. Problems: one `invalid-input` listing every issue on its own line (deduplicated,
cut at 1 900 characters).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema

from plugins_app.toolkit import INVALID_INPUT, UNAVAILABLE, ZH_CN, CallContext, Tool, ToolError, ToolResult, instruction_locale_for, tool

from . import conditions, events
from .facts import dimension_values, time_fields

NAME = "plan-story-events"
MESSAGE_LIMIT = 1900
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "story-event-plan.schema.json").read_text(encoding="utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _parameters() -> dict[str, Any]:
    schema = copy.deepcopy(SCHEMA)
    for key in ("$schema", "$id", "title"):
        schema.pop(key, None)
    schema["required"] = ["events"]
    return schema


def _exists(value: Any, path: Any) -> bool:
    parts = path if isinstance(path, list) else [p for p in str(path or "").split(".") if p]
    for part in parts:
        if isinstance(value, dict) and str(part) in value:
            value = value[str(part)]
        elif isinstance(value, list) and str(part).isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False
    return True


def plan_issues(plan: dict[str, Any], ledger: dict[str, Any], dims: dict[str, Any], time: dict[str, Any]) -> list[str]:
    """Every problem of ``plan`` against the ledger view and the current state ([] = acceptable)."""
    issues = [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in _VALIDATOR.iter_errors(plan)]
    if issues:
        return issues
    revealed = {r["eventId"] for r in ledger.get("revealed") or [] if isinstance(r, dict)}
    planned = {p["eventId"] for p in ledger.get("planned") or [] if isinstance(p, dict)}
    new = plan.get("events") or []
    if len(new) > events.PER_PLAN_LIMIT:
        issues.append(f"events: at most {events.PER_PLAN_LIMIT} per plan")
    if new and len(planned - set(plan.get("retire") or [])) >= events.PLANNED_LIMIT:
        issues.append(f"events: {len(planned)} planned events are pending; add none (you may retire old ones)")
    ids = [e["id"] for e in new]
    facts = conditions.Facts(dimensions=dims, time=time, fired={r: 0 for r in revealed}, turn=int(ledger.get("turn") or 0))
    for index, event in enumerate(new):
        where = f"events[{index}]"
        if ids.count(event["id"]) > 1:
            issues.append(f"{where}.id: {event['id']!r} is used twice")
        if event["id"] in revealed or event["id"] in planned:
            issues.append(f"{where}.id: {event['id']!r} already exists; choose a new id")
        for kind, ref in conditions.references(event["when"]):
            if kind == "dimension":
                dim, path = ref
                if dim not in dims:
                    issues.append(f"{where}.when: unknown dimension {dim!r}; use an id of runtime-inputs.dimensions")
                elif path not in (None, "", []) and not _exists(dims[dim], path):
                    issues.append(f"{where}.when: dimension {dim!r} has no field {path!r}")
            elif kind == "time" and time and ref not in time:
                issues.append(f"{where}.when: unknown time field {ref!r}; use one of {', '.join(sorted(time))}")
            elif kind == "revealed" and ref not in revealed | planned | set(ids):
                issues.append(f"{where}.when: revealed {ref!r} is neither a fired nor a planned event")
        if not issues and conditions.holds(event["when"], facts):
            issues.append(f"{where}.when: the condition already holds; plan something that becomes true later")
    for index, rid in enumerate(plan.get("retire") or []):
        if rid not in planned:
            issues.append(f"retire[{index}]: {rid!r} is not a pending planned event")
    return list(dict.fromkeys(issues))


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    ledger = ctx.inputs.get("storyEvents")
    if isinstance(ledger, dict) and isinstance(ledger.get("value"), dict):
        ledger = ledger["value"]
    if not isinstance(ledger, dict) or "turn" not in ledger:
        raise ToolError(UNAVAILABLE, "the story event ledger (runtime-inputs.storyEvents) is missing this turn")
    plan = {"events": args.get("events") or [], **({"retire": args["retire"]} if args.get("retire") else {}),
            **({"reason": args["reason"]} if args.get("reason") else {})}
    issues = plan_issues(plan, ledger, dimension_values(ctx.inputs.get("dimensions")), time_fields(ctx.inputs.get("worldTime")))
    if issues:
        message = "\n".join(issues)
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 1] + "…"
        raise ToolError(INVALID_INPUT, message, hint=f"Fix the listed problems and call {NAME} again.")
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    n, r = len(plan["events"]), len(plan.get("retire") or [])
    summary = f"计划已接受：新增 {n} 条，撤回 {r} 条。" if zh else f"Plan accepted: {n} new, {r} retired."
    return ToolResult(content=plan, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Plant up to two hidden follow-up events (id, when, payload, title?) and/or retire pending planned ones. "
                    "Conditions must not hold yet. Returns the accepted plan.",
        parameters=_parameters(),
        execute=_execute,
        annotations={"stagesWrites": False, "idempotent": True},
    )
