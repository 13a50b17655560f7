"""Reading and writing helpers shared by the builtin plugins' offline `scripted.py` scripts.

The scripted narrator writes with them and its companions (char-creator's tracker, codex, guide,
affinity, world-init's dimension tracker) read the narrator's prose back with them, so both sides
agree on who appeared and which lorebook entry surfaced. Everything is deterministic: choices
that vary use `pick(options, seed)` with a seed built from the session id and the turn number.

Shapes: a character is the engine's CharacterSnapshot dict (`name, type, aliases, description,
fields`); a lorebook entry is `{id, keys, content}` (the turn context's `lorebook`).
Other plugins load this file by path (`kit_load()` in their scripts).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

ABSENT = ("missing", "dead", "captive", "下落不明", "失踪", "已死", "身亡", "被擒", "关押")
_EN_ABBREV = r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bSt\.)(?<!\bMrs\.)(?<!\bNo\.)"
_EN_SPLIT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"”']))" + _EN_ABBREV + r"\s+(?=[A-Z\"“'(])")
_ZH_SPLIT = re.compile(r"(?<=[。！？])(?![」”』])|(?<=[。！？][」”』])")


def is_zh(locale: str | None) -> bool:
    """True for zh, zh-CN, zh-Hans … session locales."""
    return bool(locale) and str(locale).lower().startswith("zh")


def pick(options: list[Any], seed: str) -> Any:
    """One of ``options`` chosen by the sha256 of ``seed`` (stable across runs and processes)."""
    digest = int(hashlib.sha256(seed.encode("utf-8")).hexdigest()[:12], 16)
    return options[digest % len(options)]


def sentences(text: str, zh: bool) -> list[str]:
    """Whole sentences of ``text`` (terminal punctuation kept; English abbreviations such as
    "Dr." do not end a sentence)."""
    flat = " ".join(str(text or "").split())
    parts = _ZH_SPLIT.split(flat) if zh else _EN_SPLIT.split(flat)
    return [p.strip() for p in parts if p and p.strip()]


def names_of(character: dict[str, Any]) -> list[str]:
    """Name first, then aliases (non-empty strings only)."""
    return [n for n in [character.get("name"), *(character.get("aliases") or [])] if isinstance(n, str) and n.strip()]


def _find(text: str, needle: str, zh: bool) -> int:
    """Position of ``needle`` in ``text`` (-1 when absent); English matches whole words, any case."""
    if zh or not re.match(r"\w", needle[:1] or " "):
        return text.find(needle)
    found = re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", text, re.I)
    return found.start() if found else -1


def mentioned(text: str, character: dict[str, Any], zh: bool, *, aliases: bool = True) -> bool:
    """Whether ``text`` names the character (by name, or by an alias when ``aliases``)."""
    names = names_of(character) if aliases else names_of(character)[:1]
    return any(_find(text, n, zh) >= 0 for n in names)


def npcs(characters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-player characters with a name, in roster order."""
    return [c for c in characters or [] if c.get("type") != "player" and c.get("name")]


def player(characters: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((c for c in characters or [] if c.get("type") == "player" and c.get("name")), None)


def absent(character: dict[str, Any]) -> bool:
    """Missing, dead or captive characters (by their condition/whereabouts fields) cannot walk in."""
    fields = character.get("fields") or {}
    state = f"{fields.get('condition') or ''} {fields.get('whereabouts') or ''} {fields.get('location') or ''}".lower()
    return any(word in state for word in ABSENT) or state.strip() in ("不明", "unknown")


def addressed(text: str, characters: list[dict[str, Any]], zh: bool) -> dict[str, Any] | None:
    """The non-player character the player's text names first (longest name at a tie)."""
    best: tuple[int, int, dict[str, Any]] | None = None
    for c in npcs(characters):
        for n in names_of(c):
            at = _find(text, n, zh)
            if at >= 0 and (best is None or (at, -len(n)) < (best[0], best[1])):
                best = (at, -len(n), c)
    return best[2] if best else None


def title_of(entry: dict[str, Any]) -> str:
    """A lorebook entry's display title: its `title`/`name` when set, else its first key with an
    upper-case first letter, else its id in words."""
    for key in ("title", "name"):
        if isinstance(entry.get(key), str) and entry[key].strip():
            return entry[key].strip()
    keys = [k for k in entry.get("keys") or [] if isinstance(k, str) and k.strip()]
    raw = keys[0].strip() if keys else str(entry.get("id") or "").replace("-", " ")
    return raw[:1].upper() + raw[1:]


def lore_keyed(text: str, lorebook: list[dict[str, Any]], zh: bool) -> list[dict[str, Any]]:
    """Entries with a key occurring in ``text`` (whole words in English), in lorebook order."""
    return [e for e in lorebook or [] if any(_find(text, k, zh) >= 0 for k in e.get("keys") or [] if isinstance(k, str) and k.strip())]


def lore_about(character: dict[str, Any], lorebook: list[dict[str, Any]], zh: bool) -> list[dict[str, Any]]:
    """Entries whose keys or content name the character (full name or alias)."""
    out = []
    for e in lorebook or []:
        text = " ".join([*(k for k in e.get("keys") or [] if isinstance(k, str)), str(e.get("content") or "")])
        if mentioned(text, character, zh):
            out.append(e)
    return out


def lore_quote(entry: dict[str, Any], zh: bool, count: int = 2) -> str:
    """The first ``count`` whole sentences of an entry's content (never cut mid-word)."""
    return ("" if zh else " ").join(sentences(str(entry.get("content") or ""), zh)[:count])


def lore_surfaced(text: str, lorebook: list[dict[str, Any]], zh: bool) -> list[dict[str, Any]]:
    """Entries whose first sentence appears verbatim in ``text`` (how companions recognise the
    lore the scripted narrator used), in order of appearance."""
    found = []
    for e in lorebook or []:
        first = (sentences(str(e.get("content") or ""), zh) or [""])[0]
        if first and first in text:
            found.append((text.find(first), e))
    return [e for _, e in sorted(found, key=lambda pair: pair[0])]


def fit(text: str, limit: int, zh: bool) -> str:
    """``text`` within ``limit`` characters: whole sentences first, else cut at a word boundary
    with an ellipsis (never mid-word)."""
    if len(text) <= limit:
        return text
    kept = ""
    for s in sentences(text, zh):
        joined = (kept + ("" if zh else " ") + s).strip() if kept else s
        if len(joined) > limit:
            break
        kept = joined
    if kept:
        return kept
    if zh:
        return text[: limit - 1] + "…"
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:—- ")
    return cut + "…"


def narrative_of(turn: dict[str, Any]) -> str:
    """This turn's story prose as a post-turn runtime receives it (`inputs.narrative`)."""
    value = (turn.get("inputs") or {}).get("narrative") or ""
    if isinstance(value, dict):
        value = value.get("narrativeOutput") or value.get("value") or ""
    return str(value)


def appeared(narrative: str, characters: list[dict[str, Any]], zh: bool) -> list[dict[str, Any]]:
    """Non-player characters the prose names by their full name, in order of first appearance."""
    found = []
    for c in npcs(characters):
        at = _find(narrative, c["name"], zh)
        if at >= 0:
            found.append((at, c))
    return [c for _, c in sorted(found, key=lambda pair: pair[0])]
