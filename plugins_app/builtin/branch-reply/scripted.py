"""Offline `scripted` model behaviour of branch-reply: the alternative telling a createCandidates
call asks for (ctx.model, context `branch_reply: {baseText, variant}`). The offline model cannot
paraphrase, so it gives two honest alternatives built from the reply itself: variant 1 keeps each
paragraph's first and last sentence (a tighter take), variant 2 leads with the reply's closing
paragraph and then tells the rest (the hook first). A reply too short for either gets no answer
(empty text), and the set keeps fewer candidates."""

from __future__ import annotations

import re
from typing import Any

_SPLIT = re.compile(r"(?<=[。！？!?.])\s*")


def _sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in _SPLIT.split(paragraph) if s.strip()]


def variant(base: str, number: int) -> str:
    paragraphs = [p.strip() for p in base.split("\n\n") if p.strip()]
    if number <= 1:
        zh = bool(re.search(r"[\u4e00-\u9fff]", base))
        kept = []
        for p in paragraphs:
            said = _sentences(p)
            kept.append(("" if zh else " ").join([said[0], said[-1]] if len(said) > 2 else said))
        out = "\n\n".join(kept)
    else:
        out = "\n\n".join(paragraphs[-1:] + paragraphs[:-1]) if len(paragraphs) > 1 else ""
    return "" if out.strip() == base.strip() else out


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    asked = turn.get("branch_reply")
    if not isinstance(asked, dict):
        return None
    return {"text": variant(str(asked.get("baseText") or ""), int(asked.get("variant") or 1))}
