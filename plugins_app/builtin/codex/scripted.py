"""Offline `scripted` model behaviour of codex: at most 3 entries per turn, read from this turn's
story with narrator/story_kit.py — the lorebook entry the narrator surfaced (category lore,
titled by the entry's title or first key, its whole content) and the characters the story shows
by full name (category character, titled by the name, the first sentences of their description).
Titles already in `<existing-entries>` are not sent again (the tool would append content), and
runtime-done when nothing new qualifies."""

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


def _existing(turn: dict[str, Any]) -> str:
    """The `<existing-entries>` block of the system prompt ('' when absent)."""
    for message in turn.get("messages") or []:
        text = str(message.get("content") or "")
        if message.get("role") == "system" and "<existing-entries>" in text:
            return text.split("<existing-entries>", 1)[1].split("</existing-entries>", 1)[0]
    return ""


def entries(turn: dict[str, Any]) -> list[dict[str, Any]]:
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    text = k.narrative_of(turn)
    existing = _existing(turn)
    out: list[dict[str, Any]] = []
    for entry in k.lore_surfaced(text, turn.get("lorebook") or [], zh):
        keys = [str(key) for key in entry.get("keys") or []][:5]
        out.append({"category": "lore", "title": k.title_of(entry), "content": str(entry["content"]).strip(),
                    "tags": [t[:30] for t in keys if t.strip()][:5]})
    for c in k.appeared(text, turn.get("characters") or [], zh):
        description = ("" if zh else " ").join(k.sentences(str(c.get("description") or ""), zh)[:2])
        if description:
            out.append({"category": "character", "title": c["name"], "content": description})
    fresh = [e for e in out if f'"title": "{e["title"]}"' not in existing]
    return fresh[:3]


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "sync-codex-entries" not in names:
        return None
    if turn.get("tool_results"):
        return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]} if "runtime-done" in names else {"text": ""}
    found = entries(turn)
    if not found:
        return {"tool_calls": [{"name": "runtime-done", "arguments": {"reason": "nothing new"}}]} if "runtime-done" in names else None
    return {"tool_calls": [{"name": "sync-codex-entries", "arguments": {"entries": found}}]}
