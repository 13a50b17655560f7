"""Offline `scripted` model behaviour of scene-prompts: one generate-scene-prompts call read from
this turn's story with narrator/story_kit.py. The recap is the story's last whole sentences (what
is waiting for an answer), the decision asks how the player answers the character the story
ended on, and four lines of four kinds name that character, another one present, and a lorebook
topic the story has not touched yet (rotating with the turn number)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_KIT: Any = None


def kit() -> Any:
    global _KIT
    if _KIT is None:
        from plugins_app.toolkit import module_load_by_path

        _KIT = module_load_by_path(Path(__file__).resolve().parents[1] / "narrator", "narrator", "story_kit.py")
    return _KIT


def _topic(entry: dict[str, Any] | None, zh: bool) -> str | None:
    if not entry:
        return None
    keys = [str(k).strip() for k in entry.get("keys") or [] if str(k).strip()]
    return keys[0] if keys else kit().title_of(entry)


def arguments(turn: dict[str, Any]) -> dict[str, Any]:
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    story = k.narrative_of(turn)
    characters = turn.get("characters") or []
    said = k.sentences(story, zh)
    tail = said[-2:] if len(said) > 2 else said
    recap = k.fit(("" if zh else " ").join(tail), 230, zh) if tail else ("故事才刚开始，一切还没有定下来。" if zh else "The story has only just begun; nothing is settled yet.")
    if len(recap) < 20:
        recap = (recap + ("眼前的人还在等回答。" if zh else " Someone is still waiting for an answer.")).strip()
    present = [c for c in k.appeared(story, characters, zh) if not k.absent(c)]
    if not present:
        present = [c for c in k.npcs(characters) if not k.absent(c)][:1]
    last = present[-1]["name"] if present else None
    other = present[0]["name"] if len(present) > 1 else None
    lorebook = [e for e in turn.get("lorebook") or [] if e.get("keys")]
    touched = {e.get("id") for e in k.lore_keyed(story, lorebook, zh)}
    fresh = [e for e in lorebook if e.get("id") not in touched] or lorebook
    number = int(turn.get("turn") or 0)
    topic = _topic(fresh[number % len(fresh)], zh) if fresh else None
    place = ((turn.get("world") or {}).get("name") or "").strip()
    if zh:
        who = last or "对方"
        scene = (f"{place}，{who}在等回话" if place else f"{who}在等回话")[:16]
        lines = [
            {"text": f"我先不说话，看{who}接下来怎么做。", "kind": "observe"},
            {"text": f"{who}，你刚才的话是什么意思？", "kind": "ask"},
            {"text": f"我去查一查和{topic}有关的地方。" if topic else "我往前走几步，看看四周有什么。", "kind": "act"},
            {"text": f"我请{other}帮我一起拿个主意。" if other else f"我向{who}保证，这件事我会管到底。", "kind": "social"},
        ]
        decision = f"{who}在等你的回应：你打算怎么接这句话？"
    else:
        who = last or "the stranger"
        scene = (f"{place}: {who} waits" if place else f"{who} waits for an answer")[:60]
        lines = [
            {"text": f"I say nothing yet and watch what {who} does.", "kind": "observe"},
            {"text": f"{who}, what did you mean by that?", "kind": "ask"},
            {"text": f"I go and look into {topic}." if topic else "I take a few steps and look around.", "kind": "act"},
            {"text": f"I ask {other} to help me decide." if other else f"I promise {who} I will see this through.", "kind": "social"},
        ]
        decision = f"{who} is waiting on you: how do you answer?"
    return {"scene": scene, "recap": recap, "decision": decision, "prompts": lines}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "generate-scene-prompts" not in names:
        return None
    if turn.get("tool_results") and not any(isinstance(r.get("content"), dict) and "error" in r["content"] for r in turn["tool_results"]):
        return {"text": ""}
    return {"tool_calls": [{"name": "generate-scene-prompts", "arguments": arguments(turn)}]}
