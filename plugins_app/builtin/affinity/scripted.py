"""Offline `scripted` model behaviour of affinity: +2 for each named NPC the player's action or
this turn's narrative mentions (at most 5), else runtime-done."""

from __future__ import annotations

from typing import Any


def changes(turn: dict[str, Any]) -> list[dict[str, Any]]:
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    inputs = turn.get("inputs") or {}
    narrative = inputs.get("narrative") or inputs.get("worldIR") or ""
    text = f"{turn.get('player_message') or ''}\n{narrative if isinstance(narrative, str) else narrative}"
    for c in turn.get("characters") or []:  # the hero's own name never counts as meeting someone
        if c.get("type") == "player" and c.get("name"):
            text = text.replace(c["name"], " ")
    out = []
    for c in turn.get("characters") or []:
        if c.get("type") == "player" or not c.get("name"):
            continue
        if any(n and n in text for n in (c["name"], *(c.get("aliases") or []))):
            out.append({"name": c["name"], "delta": 2,
                        "reason": f"你和{c['name']}说上了话。" if zh else f"You spoke with {c['name']}."})
    return out[:5]


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "update-affinity" not in names:
        return None
    if turn.get("tool_results"):
        return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]} if "runtime-done" in names else {"text": ""}
    found = changes(turn)
    if found:
        return {"tool_calls": [{"name": "update-affinity", "arguments": {"changes": found}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {"reason": "no interaction"}}]} if "runtime-done" in names else None
