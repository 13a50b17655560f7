"""Offline `scripted` model behaviour of chat-mode-narrator (turns/engine/providers/scripted.py).

The prose is the core narrator's offline story (narrator/scripted.py `story`, loaded by path, so
both engines answer the player the same way: the addressed character replies about what was
asked), laid out as a conversation: a new paragraph starts wherever the character a sentence is
about changes (the earliest name outside quoted speech), so each paragraph has one speaker or is
narration. Before the prose, in the first model call, the
events the session's plugins advertise are emitted:

- `stage.direction` every reply: `actor.enter` for each speaker not yet on stage in the story so
  far, `actor.focus` on the first non-player speaker, and `dialogue.paragraphSpeakers` = each
  paragraph's speaker id (player included) or null for narration — computed from the very
  paragraphs the second call writes;
- `scene.set` on the first reply (the world's name as the place, day);
- `music.cue` on the first reply (`mystery`) and when the story's closing ladder turns (`tense`
  on the fourth reply, `dread` on the sixth).
Deterministic: the same turn gives the same events and prose.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_NARRATOR: Any = None
_KIT: Any = None
MOODS = {0: "mystery", 3: "tense", 5: "dread"}


def _load() -> tuple[Any, Any]:
    global _NARRATOR, _KIT
    if _NARRATOR is None:
        from plugins_app.toolkit import module_load_by_path

        root = Path(__file__).resolve().parents[1] / "narrator"
        _KIT = module_load_by_path(root, "narrator", "story_kit.py")
        _NARRATOR = module_load_by_path(root, "narrator", "scripted.py")
    return _NARRATOR, _KIT


def _earlier(turn: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "") for m in turn.get("messages") or [] if m.get("role") == "assistant" and m.get("content")]


_QUOTES = re.compile(r"[\"“「『][^\"”」』]*[\"”」』]")


def _subject(sentence: str, people: list[dict[str, Any]], zh: bool) -> str | None:
    """The id of the character a sentence is about: the earliest one it names outside quoted
    speech ("“Rin, …?” Ada asks Rin." is Ada's), else None (narration)."""
    kit = _load()[1]
    bare = _QUOTES.sub(" ", sentence)
    best: tuple[int, str] | None = None
    for c in people:
        for name in kit.names_of(c):
            at = kit._find(bare, name, zh)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, c["id"])
    return best[1] if best else None


def _people(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in turn.get("characters") or [] if c.get("name") and c.get("id")]


def layout(turn: dict[str, Any]) -> tuple[list[str], list[str | None]]:
    """(paragraphs, paragraphSpeakers): the narrator's story with a new paragraph wherever the
    character a sentence is about changes; a paragraph's speaker is that one character, null for
    narration only."""
    narrator, kit = _load()
    zh = kit.is_zh(turn.get("locale"))
    people = _people(turn)
    join = "" if zh else " "
    parts: list[str] = []
    ids: list[str | None] = []
    for block in [p for p in narrator.story(turn).split("\n\n") if p.strip()]:
        current: list[str] = []
        speaker: str | None = None
        for sentence in kit.sentences(block, zh):
            subject = _subject(sentence, people, zh)
            if current and subject and speaker and subject != speaker:
                parts.append(join.join(current))
                ids.append(speaker)
                current, speaker = [], None
            speaker = speaker or subject
            current.append(sentence)
        if current:
            parts.append(join.join(current))
            ids.append(speaker)
    return parts, ids


def _topics(turn: dict[str, Any]) -> list[str]:
    tool = next((t for t in turn.get("tools") or [] if t.get("name") == "emit-event"), None)
    topic = (((tool or {}).get("parameters") or {}).get("properties") or {}).get("topic") or {}
    return [t for t in topic.get("enum") or [] if isinstance(t, str)]


def events(turn: dict[str, Any], ids: list[str | None]) -> list[dict[str, Any]]:
    """The emit-event calls of this reply (see the module docstring)."""
    topics = _topics(turn)
    earlier = _earlier(turn)
    calls: list[dict[str, Any]] = []
    if "scene.set" in topics and not earlier:
        place = str((turn.get("world") or {}).get("name") or "").strip()
        if place:
            calls.append({"topic": "scene.set", "data": {"location": place[:80], "timeOfDay": "day"}})
    if "stage.direction" in topics:
        kit = _load()[1]
        zh = kit.is_zh(turn.get("locale"))
        so_far = "\n".join(earlier)
        by_id = {c["id"]: c for c in turn.get("characters") or [] if c.get("id")}
        cues: list[dict[str, Any]] = []
        for cid in dict.fromkeys(i for i in ids if i):
            c = by_id.get(cid) or {}
            if c.get("type") != "player" and not kit.mentioned(so_far, c, zh, aliases=False):
                cues.append({"type": "actor.enter", "characterId": cid})
        focus = next((i for i in ids if i and (by_id.get(i) or {}).get("type") != "player"), None)
        if focus:
            cues.append({"type": "actor.focus", "characterId": focus})
        calls.append({"topic": "stage.direction", "data": {"cues": cues[:16], "dialogue": {"paragraphSpeakers": ids[:80]}}})
    mood = MOODS.get(len(earlier))
    if "music.cue" in topics and mood:
        calls.append({"topic": "music.cue", "data": {"mood": mood}})
    return calls


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    """Story runtime: events first (one model call), then the prose."""
    if not turn.get("is_story"):
        return None
    parts, ids = layout(turn)
    if not turn.get("tool_results"):
        calls = events(turn, ids)
        if calls:
            return {"tool_calls": [{"name": "emit-event", "arguments": c} for c in calls]}
    return {"text": "\n\n".join(parts)}
