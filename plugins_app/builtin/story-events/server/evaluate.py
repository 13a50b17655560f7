"""story-events/evaluate function runtime (pre-turn, every turn): reveal at most one hidden event
whose condition holds, as this turn's `story-event-cue@1`.

Candidates: enabled world events and planned events that did not fire yet (`once`, the default),
or whose `cooldownTurns` since the last firing passed (`once: false`). The highest `priority`
wins (world events before planned ones, then table order). The winner is recorded in the ledger
(`ledger/<id>`: id, public title, turn, count) in this turn's commit. Output: `{cue: {eventId,
title?, payload} | null, cueContext, diagnostics, ledger}`; the narrator reads `cueContext` only.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import conditions, events
from .facts import turn_facts


def _cue_context(cue: dict[str, Any] | None, zh: bool) -> str:
    if cue is None:
        return ""
    title = f"「{cue['title']}」" if zh and cue.get("title") else (f"“{cue['title']}”" if cue.get("title") else "")
    if zh:
        return (f"【本回合的隐藏事件{title}】\n{cue['payload']}\n"
                "把它自然地写进本回合的正文：通过场景、人物的举动和对白呈现，不要提“事件”“提示”这类字眼，"
                "不替玩家做决定，也不揭开它没有揭开的谜底。")
    return (f"[This turn's hidden event{(' ' + title) if title else ''}]\n{cue['payload']}\n"
            "Stage it inside this turn's prose through the scene, what people do and say; never mention events or cues, "
            "decide nothing for the player and reveal nothing the brief leaves open.")


def _eligible(event: dict[str, Any], fired: dict[str, Any], turn: int) -> bool:
    if event.get("enabled") is False:
        return False
    last = fired.get(event["id"])
    if last is None:
        return True
    if event.get("once", True):
        return False
    return turn - int(last.get("turn") or 0) >= max(1, int(event.get("cooldownTurns") or 1))


def handle(ctx) -> dict[str, Any]:
    turn = int(ctx.logical_turn or 0)
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    facts = turn_facts(ctx, turn, ctx.inputs.get("worldTime"), ctx.inputs.get("dimensions"))
    fired = events.ledger(ctx)
    diagnostics: list[str] = []
    table = [*events.world_events(ctx), *events.planned_events(ctx)]
    ranked = sorted(enumerate(table), key=lambda p: (-int(p[1].get("priority") or 0), p[1]["origin"] != "world", p[0]))
    cue = None
    for _, event in ranked:
        if not _eligible(event, fired, turn):
            continue
        try:
            met = conditions.holds(event.get("when"), facts)
        except Exception as exc:  # a malformed condition never stops the turn
            diagnostics.append(f"{event['id']}: condition not readable ({type(exc).__name__})")
            continue
        if not met:
            continue
        payload = events.text_in(event.get("payload"), ctx.locale)
        if not payload:
            diagnostics.append(f"{event['id']}: empty payload")
            continue
        cue = {"eventId": event["id"], "payload": payload}
        title = events.text_in(event.get("title"), ctx.locale)
        if title:
            cue["title"] = title
        previous = fired.get(event["id"]) or {}
        record = {"eventId": event["id"], "turn": turn, "count": int(previous.get("count") or 0) + 1, "origin": event["origin"]}
        if title:
            record["title"] = title
        ctx.plugin_data.set(events.LEDGER, event["id"], record)
        break
    view = events.ledger_view(ctx, turn, ctx.locale)
    if cue is not None and not any(r["eventId"] == cue["eventId"] for r in view["revealed"]):
        view["revealed"].append({k: v for k, v in {"eventId": cue["eventId"], "title": cue.get("title"), "lastTurn": turn}.items() if v is not None})
        view["planned"] = [p for p in view["planned"] if p["eventId"] != cue["eventId"]]
    return {"cue": cue, "cueContext": _cue_context(cue, zh), "diagnostics": diagnostics, "ledger": view}
