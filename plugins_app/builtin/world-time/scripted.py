"""Offline `scripted` model behaviour of world-time/advance: the world's defaultStep (random
worlds: only a reason), with a reason in the session locale."""

from __future__ import annotations

from typing import Any


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "advance-world-time" not in names or turn.get("tool_results"):
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    current = (turn.get("inputs") or {}).get("currentTime") or {}
    evolution = ((current.get("definition") or {}).get("evolution")) or {}
    reason = "本回合的交谈与走动花去了一些时间。" if zh else "This turn's talk and movement took a little time."
    if evolution.get("mode") == "random":
        return {"tool_calls": [{"name": "advance-world-time", "arguments": {"reason": reason}}]}
    args: dict[str, Any] = {"amount": int(evolution.get("defaultStep", 0)), "reason": reason}
    if evolution.get("mode") == "bidirectional":
        args["direction"] = "forward"
    return {"tool_calls": [{"name": "advance-world-time", "arguments": args}]}
