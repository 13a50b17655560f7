"""Offline `scripted` model behaviour of story-events/plot: one plan-story-events call per run.

Reads this turn's story (runtime-inputs.narrative) and the roster: the first present non-player
character the story names who has no pending plan yet gets one follow-up event — they come back to
the hero two turns later (`turnGte: turn + 2`) about what passed between them, leaving the hero a
choice. Nobody named, or six pending plans → `events: []` with a reason. A refused call is
answered with an empty plan. Deterministic; nothing beyond the story's own names is invented.
"""

from __future__ import annotations

import re
from typing import Any

NAME = "plan-story-events"


def _value(inputs: dict[str, Any], key: str) -> Any:
    value = inputs.get(key)
    return value.get("value") if isinstance(value, dict) and "value" in value and len(value) <= 2 else value


def _event_id(character: dict[str, Any], turn: int) -> str:
    base = "-".join(re.findall(r"[a-z0-9]+", str(character.get("id") or "").lower()))[:40] or "someone"
    if not base[0].isalpha():
        base = f"npc-{base}"
    return f"{base}-returns-t{turn}"


def plan(turn: dict[str, Any]) -> dict[str, Any]:
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    inputs = turn.get("inputs") or {}
    story = str(_value(inputs, "narrative") or "")
    ledger = _value(inputs, "storyEvents") or {}
    now = int(ledger.get("turn") or turn.get("turn") or 0)
    planned = [p.get("eventId") for p in ledger.get("planned") or [] if isinstance(p, dict)]
    characters = [c for c in turn.get("characters") or [] if c.get("name")]
    hero = next((c for c in characters if c.get("type") == "player"), None)
    if len(planned) >= 6:
        return {"events": [], "reason": "six plans are already pending"}
    for c in characters:
        if c is hero or c.get("type") == "player" or c["name"] not in story:
            continue
        event_id = _event_id(c, now)
        if any(str(p).startswith(event_id.rsplit("-t", 1)[0]) for p in planned):
            continue
        name, hero_name = c["name"], (hero or {}).get("name") or ("主角" if zh else "the hero")
        if zh:
            payload = (f"{name}再次找到{hero_name}，放不下第{now}回合两人之间说过的话。"
                       f"{name}带来一个新的细节，也提出一个请求；答应与否由{hero_name}决定。")
            title = f"{name}去而复返"
        else:
            payload = (f"{name} seeks {hero_name} out again, unable to let go of what passed between them on turn {now}. "
                       f"{name} brings one new detail and asks for something in return; whether to agree is {hero_name}'s choice.")
            title = f"{name} comes back"
        return {"events": [{"id": event_id, "title": title, "when": {"turnGte": now + 2}, "payload": payload, "priority": 1}],
                "reason": f"an open thread with {c.get('id')}"}
    return {"events": [], "reason": "no character thread to follow this turn"}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    if NAME not in [t["name"] for t in turn.get("tools") or []]:
        return None
    results = [r for r in turn.get("tool_results") or [] if r.get("name") == NAME]
    if results:
        last = results[-1].get("content")
        if isinstance(last, dict) and "error" in last:
            return {"tool_calls": [{"name": NAME, "arguments": {"events": [], "reason": "the first plan was refused"}}]}
        return {"text": ""}
    return {"tool_calls": [{"name": NAME, "arguments": plan(turn)}]}
