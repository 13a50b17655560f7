"""Offline `scripted` model behaviour of codex: record the named newcomers and lore the scripted
narrator wrote this turn as codex entries (character / lore), once per turn; runtime-done when
nothing new is worth recording."""

from __future__ import annotations

import re
from typing import Any

_NEWCOMER = (
    re.compile(r"这时，(?P<name>[^，。——]{1,12})从人群里挤过来——(?P<desc>[^。]*。)"),
    re.compile(r"Then (?P<name>[A-Z][\w' -]{0,40}?) pushes through the crowd\. (?P<desc>[^.]*\.)"),
)
_LORE = (re.compile(r"想起镇上的说法：(?P<fact>.+?[。！？])"), re.compile(r"People here say: (?P<fact>.+?[.!?])(?=\s|$)"))


def _narrative(turn: dict[str, Any]) -> str:
    value = (turn.get("inputs") or {}).get("narrative") or ""
    if isinstance(value, dict):
        value = value.get("narrativeOutput") or ""
    if not value:  # fall back to the last assistant prose in the history the engine gave us
        for message in reversed(turn.get("messages") or []):
            if message.get("role") in ("assistant", "user") and message.get("content"):
                return str(message["content"])
    return str(value)


def entries(turn: dict[str, Any]) -> list[dict[str, Any]]:
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    text = _narrative(turn)
    out: list[dict[str, Any]] = []
    for pattern in _NEWCOMER:
        for m in pattern.finditer(text):
            out.append({"category": "character", "title": m.group("name").strip(), "content": m.group("desc").strip()})
    for pattern in _LORE:
        for m in pattern.finditer(text):
            fact = m.group("fact").strip()
            title = re.split(r"[，,。.：:；;]", fact)[0][: 12 if zh else 40].strip()
            if title:
                out.append({"category": "lore", "title": title, "content": fact})
    return out[:8]


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
