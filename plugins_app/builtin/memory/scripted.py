"""Offline `scripted` model behaviour of memory/extract: one `update-memory-blocks` call built
from the tags of the extraction prompt. `plot` keeps the newest story sentences that fit (the
turn's first sentence appended to what was there), `scene` takes the turn's last sentence, `hero`
the player's action; blocks a world defined instead get the story sentences that share the most
words with their extraction hint. Facts: the player's action and the story's first sentence when
they carry at least five words (CJK: twelve characters). Other blocks stay as they are."""

from __future__ import annotations

import json
import re
from typing import Any

TOOL = "update-memory-blocks"
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_WORD = re.compile(r"[A-Za-z']+|[\u4e00-\u9fff]")


def _tag(text: str, name: str) -> str:
    start, end = f"<{name}>", f"</{name}>"
    return text.split(start, 1)[1].split(end, 1)[0].strip() if start in text and end in text else ""


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.replace("\n", " ")) if s.strip()]


def _fits(parts: list[str], limit: int, zh: bool) -> str:
    joined = ""
    for part in reversed(parts):
        candidate = part + ("" if zh else " ") + joined if joined else part
        if len(candidate) > limit:
            break
        joined = candidate
    return joined or parts[-1][:limit]


def _long_enough(text: str, zh: bool) -> bool:
    return len(text) >= 12 if zh else len(_WORD.findall(text)) >= 5


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    if TOOL not in [t["name"] for t in turn.get("tools") or []]:
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    user = next((str(m.get("content") or "") for m in turn.get("messages") or [] if m.get("role") == "user"), "")
    try:
        definitions = json.loads(_tag(user, "memory-definitions") or "[]")
        current = json.loads(_tag(user, "current-blocks") or "{}")
    except ValueError:
        definitions, current = [], {}
    action, story = _tag(user, "player-action"), _tag(user, "story-turn")
    sentences = _sentences(story)
    if not sentences:
        return {"tool_calls": [{"name": TOOL, "arguments": {"updates": [], "facts": []}}]}
    updates = []
    for d in definitions:
        label, limit = d.get("label"), int(d.get("maxChars") or 600)
        old = str(current.get(label) or "")
        if label == "plot":
            content = _fits(_sentences(old) + [sentences[0]], limit, zh)
        elif label == "scene":
            content = sentences[-1][:limit]
        elif label == "hero":
            content = ((f"刚才：{action}" if zh else f"Last action: {action}")[:limit]) if action else ""
        elif label == "relationships":
            continue
        else:
            hint = set(_WORD.findall(str(d.get("extractionHint") or "").lower()))
            scored = sorted(sentences, key=lambda s: -len(hint & set(_WORD.findall(s.lower()))))
            best = scored[0] if hint & set(_WORD.findall(scored[0].lower())) else ""
            content = _fits(_sentences(old) + [best], limit, zh) if best else ""
        if content and content != old:
            updates.append({"label": label, "content": content})
    facts = [{"text": t[:300]} for t in (action, sentences[0]) if t and _long_enough(t, zh)]
    return {"tool_calls": [{"name": TOOL, "arguments": {"updates": updates, "facts": facts[:5]}}]}
