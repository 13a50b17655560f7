"""Offline `scripted` model behaviour of guide: one generate-guide call built from this turn's
narrative and the characters present (the first one the story names), in the session locale."""

from __future__ import annotations

from typing import Any


def guide(turn: dict[str, Any]) -> dict[str, Any]:
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    narrative = (turn.get("inputs") or {}).get("narrative") or ""
    if isinstance(narrative, dict):
        narrative = narrative.get("narrativeOutput") or ""
    first = str(narrative).replace("\n", " ")
    recap = first[:110] + ("…" if len(first) > 110 else "") if first else ("故事刚刚开始。" if zh else "The story has just begun.")
    text = str(narrative)
    present = [(text.find(c["name"]), c["name"]) for c in turn.get("characters") or []
               if c.get("type") != "player" and c.get("name") and c["name"] in text]
    # the first non-player character the story names (the one who reacted this turn), else the newest one
    npc = min(present)[1] if present else next(
        (c["name"] for c in reversed(turn.get("characters") or []) if c.get("type") != "player" and c.get("name")), None)
    world = (turn.get("world") or {}).get("name") or ""
    if zh:
        who = npc or "眼前的人"
        return {"scene": (world or "眼前")[:20], "recap": recap, "decision": f"接下来怎么对待{who}？",
                "prompts": [{"text": f"我向{who}打听昨夜的事。", "kind": "ask"},
                            {"text": "我先四下看看，找找线索。", "kind": "observe"},
                            {"text": f"我把知道的告诉{who}，看对方怎么说。", "kind": "social"}]}
    who = npc or "the stranger"
    return {"scene": (world or "Here")[:40], "recap": recap, "decision": f"What do you do about {who}?",
            "prompts": [{"text": f"I ask {who} what happened last night.", "kind": "ask"},
                        {"text": "I look around for clues first.", "kind": "observe"},
                        {"text": f"I tell {who} what I know and watch the reaction.", "kind": "social"}]}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "generate-guide" in names and not turn.get("tool_results"):
        return {"tool_calls": [{"name": "generate-guide", "arguments": guide(turn)}]}
    return None
