"""Offline `scripted` model behaviour of history-compaction/compact: one `submit-history-summary`
call. The segment is each older turn's player action and first story sentence; the summary is the
previous summary followed by the segment, keeping the newest sentences within 2,000 characters."""

from __future__ import annotations

import re
from typing import Any

TOOL = "submit-history-summary"
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")


def _tag(text: str, name: str) -> str:
    start, end = f"<{name}>", f"</{name}>"
    return text.split(start, 1)[1].split(end, 1)[0].strip() if start in text and end in text else ""


def _first_sentence(text: str) -> str:
    parts = [p.strip() for p in _SENTENCE.split(text.replace("\n", " ")) if p.strip()]
    return parts[0] if parts else ""


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    if TOOL not in [t["name"] for t in turn.get("tools") or []]:
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    user = next((str(m.get("content") or "") for m in turn.get("messages") or [] if m.get("role") == "user"), "")
    previous, older = _tag(user, "previous-summary"), _tag(user, "older-turns")
    lines = []
    for block in older.split("\n\n---\n\n"):
        action, story = "", []
        for line in block.splitlines():
            if line.startswith(("Player: ", "玩家：")):
                action = line.split(" ", 1)[1] if line.startswith("Player: ") else line[3:]
            elif line.strip():
                story.append(line)
        sentence = _first_sentence(" ".join(story))
        parts = [p for p in ((f"玩家{action}" if zh else f"The player: {action}") if action else "", sentence) if p]
        if parts:
            lines.append(("；" if zh else " — ").join(parts))
    segment = ("\n".join(lines) or ("这几回合没有可记的事。" if zh else "Nothing of note happened in these turns."))[:1500]
    merged = (previous + "\n" + segment).strip() if previous else segment
    while len(merged) > 2000 and "\n" in merged:
        merged = merged.split("\n", 1)[1]
    return {"tool_calls": [{"name": TOOL, "arguments": {"summary": merged[-2000:], "segment": segment}}]}
