"""Offline `scripted` model behaviour of guide: one generate-guide call built from this turn's
story (read with narrator/story_kit.py): the recap is its first whole sentences, and the quick
replies, in the player's voice, name characters the story shows this turn — ask the newest face
about a lorebook topic the story has not touched this turn, look into another topic, tell the one
who answered what the hero knows. The topics rotate with the turn number."""

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


def _topic(entry: dict[str, Any], zh: bool) -> str:
    """How the player names a lorebook topic: its first key ('the' before a lower-case English key)."""
    keys = [str(k).strip() for k in entry.get("keys") or [] if str(k).strip()]
    key = keys[0] if keys else kit().title_of(entry)
    if not zh and key[:1].islower() and not key.lower().startswith("the "):
        key = "the " + key
    return key


def guide(turn: dict[str, Any]) -> dict[str, Any]:
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    narrative = k.narrative_of(turn)
    chars = turn.get("characters") or []
    sentences = k.sentences(narrative, zh)
    recap = k.fit(("" if zh else " ").join(sentences[:3]), 300, zh) if sentences else ("故事刚刚开始。" if zh else "The story has just begun.")
    present = [c for c in k.appeared(narrative, chars, zh) if not k.absent(c)]
    if not present:
        present = [c for c in k.npcs(chars) if not k.absent(c)][:1]
    newest = present[-1]["name"] if present else ("眼前的人" if zh else "the nearest villager")
    first = present[0]["name"] if present else newest
    lorebook = turn.get("lorebook") or []
    surfaced = {e.get("id") for e in k.lore_surfaced(narrative, lorebook, zh)}
    unused = [e for e in lorebook if e.get("id") not in surfaced and e.get("keys")]
    about = [e for e in k.lore_about(present[-1], unused, zh)] if present else []
    number = int(turn.get("turn") or 0)
    ask = about[0] if about else (unused[(2 * number) % len(unused)] if unused else None)
    look = next((e for e in unused[(2 * number + 1) % len(unused):] + unused if e is not ask), None) if unused else None
    world = (turn.get("world") or {}).get("name") or ""
    if zh:
        topic_a = _topic(ask, zh) if ask else "昨夜的事"
        topic_b = _topic(look, zh) if look else "四周"
        return {"scene": (world or "眼前")[:40], "recap": recap, "decision": f"是追问{newest}{topic_a}的事，还是自己去查{topic_b}？"[:200],
                "prompts": [{"text": f"我向{newest}打听{topic_a}的事。", "kind": "ask"},
                            {"text": f"我仔细查看和{topic_b}有关的痕迹。", "kind": "observe"},
                            {"text": f"我把刚打听到的告诉{first}，看看对方的反应。", "kind": "social"}]}
    topic_a = _topic(ask, zh) if ask else "what happened last night"
    topic_b = _topic(look, zh) if look else "the scene"
    return {"scene": (world or "Here")[:40], "recap": recap, "decision": f"Press {newest} about {topic_a}, or look into {topic_b} alone?"[:200],
            "prompts": [{"text": f"I ask {newest} about {topic_a}."[:120], "kind": "ask"},
                        {"text": f"I look for anything connected with {topic_b}."[:120], "kind": "observe"},
                        {"text": f"I tell {first} everything so far and watch the reaction."[:120], "kind": "social"}]}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "generate-guide" in names and not turn.get("tool_results"):
        return {"tool_calls": [{"name": "generate-guide", "arguments": guide(turn)}]}
    return None
