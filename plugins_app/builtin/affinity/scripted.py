"""Offline `scripted` model behaviour of affinity: the character the player's text addresses (by
name or alias, read with narrator/story_kit.py) and who answers in this turn's story gains +3;
with no one addressed, the first character the story shows gains +1 (the runtime must call the
tool: `afterTools` keeps runtime-done off the first step); runtime-done when the story shows no one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_KIT: Any = None


def kit() -> Any:
    """narrator/story_kit.py, the helpers the scripted narrator writes with (loaded once by path)."""
    global _KIT
    if _KIT is None:
        from plugins_app.toolkit import module_load_by_path

        _KIT = module_load_by_path(Path(__file__).resolve().parents[1] / "narrator", "narrator", "story_kit.py")
    return _KIT


def changes(turn: dict[str, Any]) -> list[dict[str, Any]]:
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    chars = turn.get("characters") or []
    message = str(turn.get("player_message") or "")
    shown = [c for c in k.appeared(k.narrative_of(turn), chars, zh) if not k.absent(c)]
    target = k.addressed(message, chars, zh) if message else None
    hero = k.player(chars)
    who = hero["name"] if hero else ("主角" if zh else "The hero")
    if target is not None and target in shown:
        reason = f"{who}当面向{target['name']}请教，对方答了话。" if zh else f"{who} came to {target['name']} directly and got an answer."
        return [{"name": target["name"], "delta": 3, "reason": reason}]
    if not shown:
        return []
    # no one addressed: the first character the story shows shared the scene with the hero
    reason = f"{shown[0]['name']}和{who}一起经历了这一幕。" if zh else f"{shown[0]['name']} shared the moment with {who}."
    return [{"name": shown[0]["name"], "delta": 1, "reason": reason}]


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
