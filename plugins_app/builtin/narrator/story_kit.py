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

import functools
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
    return list(_sentences(str(text or ""), zh))


# The scripted scripts read the same lorebook and roster texts every call of every turn: these
# per-process caches keep the split, the word sets and the compiled name patterns (bounded LRU;
# keys are the texts themselves, so an edited entry is simply a new key; a few MB at most).
@functools.lru_cache(maxsize=1024)
def _sentences(text: str, zh: bool) -> tuple[str, ...]:
    flat = " ".join(text.split())
    parts = _ZH_SPLIT.split(flat) if zh else _EN_SPLIT.split(flat)
    return tuple(p.strip() for p in parts if p and p.strip())


def names_of(character: dict[str, Any]) -> list[str]:
    """Name first, then aliases (non-empty strings only)."""
    return [n for n in [character.get("name"), *(character.get("aliases") or [])] if isinstance(n, str) and n.strip()]


def _find(text: str, needle: str, zh: bool) -> int:
    """Position of ``needle`` in ``text`` (-1 when absent); English matches whole words, any case."""
    pattern = None if zh else _word_pattern(needle)
    if pattern is None:
        return text.find(needle)
    found = pattern.search(text)
    return found.start() if found else -1


@functools.lru_cache(maxsize=4096)
def _word_pattern(needle: str) -> re.Pattern[str] | None:
    """The whole-word, any-case pattern of an English ``needle``; None when it does not start
    with a word character (then it is found as it is)."""
    if not re.match(r"\w", needle[:1] or " "):
        return None
    return re.compile(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", re.I)


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


# ------------------------------------------------------------------ issue 20: the storyteller

#: Labels of the rendered action tags (turns/engine/render.py) → base kind.
_KIND_LABELS = {"say": "say", "说": "say", "act": "act", "行动": "act", "做": "act", "narrate": "narrate",
                "旁白": "narrate", "direct": "direct", "导演": "direct"}
_TAG = re.compile(r"^\s*(?:【(?:(?P<zactor>[^·】]+)·)?(?P<zlabel>[^】]+)】|\[(?:(?P<eactor>[^\]·]+?)\s*·\s*)?(?P<elabel>[^\]]+)\]\s*)")


def actions_of(text: str) -> list[dict[str, Any]]:
    """The player's rendered input split into actions: each ``{kind, actor, text}``. A line with a
    render tag (``[Name · Act] …``, ``【名·行动】…``, ``[Narrate] …``) gives its kind and actor; an
    untagged input is one ``say`` (spec 004: a lone player's say stays verbatim)."""
    out: list[dict[str, Any]] = []
    for line in str(text or "").splitlines():
        if not line.strip():
            continue
        found = _TAG.match(line)
        label = (found.group("zlabel") or found.group("elabel") or "").strip() if found else ""
        kind = _KIND_LABELS.get(label.lower()) if found else None
        if found and kind:
            out.append({"kind": kind, "actor": (found.group("zactor") or found.group("eactor") or "").strip() or None,
                        "text": line[found.end():].strip()})
        elif out and not found:
            out[-1]["text"] += " " + line.strip()
        else:
            out.append({"kind": "say", "actor": None, "text": line.strip()})
    return out


def localized(value: Any, locale: str | None) -> str:
    """A value that may be per-locale (``{"zh-CN": …, "en-US": …}``) as the session locale's
    string: exact tag, then same language, then en, then the first value. Never ``str(dict)``."""
    if isinstance(value, dict):
        loc = str(locale or "")
        if loc in value:
            return localized(value[loc], locale)
        lang = loc.split("-")[0].lower()
        for key, item in value.items():
            if str(key).split("-")[0].lower() == lang:
                return localized(item, locale)
        for key in ("en-US", "en"):
            if key in value:
                return localized(value[key], locale)
        return localized(next(iter(value.values()), ""), locale) if value else ""
    if isinstance(value, list):
        return ""
    return "" if value is None else str(value)


_STOP = {"the", "and", "what", "that", "this", "with", "from", "have", "your", "there", "about", "where", "when", "who",
         "last", "night", "does", "did", "today", "anyone", "come", "some", "here", "they", "them", "their", "into", "over"}


def _words(text: str, zh: bool) -> frozenset[str]:
    """Content words (English, 4+ letters, not stop words) or character bigrams (Chinese)."""
    return _words_of(str(text or ""), zh)


@functools.lru_cache(maxsize=1024)
def _words_of(text: str, zh: bool) -> frozenset[str]:
    if zh:
        flat = re.sub(r"[^\u4e00-\u9fff]", "", text)
        return frozenset(flat[i:i + 2] for i in range(len(flat) - 1))
    return frozenset(w for w in re.findall(r"[a-z']{4,}", text.lower()) if w not in _STOP)


def lore_ranked(text: str, lorebook: list[dict[str, Any]], zh: bool, *, loose: bool = False) -> list[tuple[float, dict[str, Any]]]:
    """Entries that match ``text``, best first: each key found counts its length (whole words in
    English), shared content words count 1 each (Chinese bigrams ½). Entries below the threshold
    are left out; ``loose`` (the hero looking around rather than asking) takes any shared word."""
    asked = _words(text, zh)
    ranked = []
    for index, e in enumerate(lorebook or []):
        keys = [k for k in e.get("keys") or [] if isinstance(k, str) and k.strip()]
        score = float(sum(len(k) * (3 if zh else 1) for k in keys if _find(text, k, zh) >= 0))
        score += len(asked & _words(str(e.get("content") or ""), zh)) * (0.5 if zh else 1.0)
        if score >= (0.5 if loose else 2 if zh else 1):
            ranked.append((score, -index, e))
    ranked.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [(score, e) for score, _, e in ranked]


def lore_touched(text: str, lorebook: list[dict[str, Any]], zh: bool) -> list[dict[str, Any]]:
    """Entries any of whose sentences appears verbatim in ``text`` (first use or a later one)."""
    out = []
    for e in lorebook or []:
        found = [text.find(s) for s in sentences(str(e.get("content") or ""), zh) if len(s) > 8 and s in text]
        if found:
            out.append((min(found), e))
    return [e for _, e in sorted(out, key=lambda pair: pair[0])]


def unit_of(key: str, title: str) -> str | None:
    """The clock unit a countdown field counts in, from its key and title: minute/hour/day."""
    words = f"{key} {title}".lower()
    if re.search(r"minute|分钟|刻", words):
        return "minute"
    if re.search(r"shichen|hour|时辰|小时", words):
        return "hour"
    if re.search(r"day|天|日", words):
        return "day"
    return None


def countdown_fields(dim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, title, unit) of the integer fields of a clock-following dimension that count down
    (key/title says left/remaining/until/剩余/还剩)."""
    rule = str(dim.get("updateRule") or "").lower()
    if "updateRule" in dim and "clock" not in rule and "时钟" not in rule:  # the narrator's dimensions carry no rules
        return []
    out = []
    for key, prop in ((dim.get("schema") or {}).get("properties") or {}).items():
        title = str((prop or {}).get("title") or "")
        if (prop or {}).get("type") == "integer" and re.search(r"until|left|remaining|minutesTo|剩余|还剩", f"{key} {title}", re.I):
            unit = unit_of(key, title)
            if unit:
                out.append((key, title, unit))
    return out


def countdown_drop(unit: str, since_start_before: int, elapsed: int, minutes_per_hour: int, hours_per_day: int) -> int:
    """Whole ``unit``s a countdown loses when the clock (in base minutes) moves from
    ``since_start_before`` to ``since_start_before + elapsed`` (part units accumulate)."""
    size = {"minute": 1, "hour": minutes_per_hour, "day": minutes_per_hour * hours_per_day}[unit]
    after = since_start_before + max(0, elapsed)
    return after // size - since_start_before // size


_TRAVEL = re.compile(r"\b(go|goes|walk|run|head|cross|return|climb|row|sail)\b|去|往|前往|回到|赶到|走到|渡江|雇条|登上|爬上", re.I)
_WATER = re.compile(r"\b(row|rowing|sail|boat)\b|渡江|过江|江心洲|划船|小船", re.I)
_SEARCH = re.compile(r"\b(search|look|check|study|examine|read|find|inspect)\b|查|看|搜|找|翻|闻|验", re.I)


def time_step(action: str, kind: str, default_step: int) -> int:
    """Clock ticks (base minutes) a turn spends, from what the player did: talk = the world's
    defaultStep, a search 1.5×, going somewhere 2×, crossing water 4× (narrate/direct: default).
    Shared by the scripted narrator (the time it shows) and world-time/advance (the time it sets)."""
    base = max(0, int(default_step or 0))
    if kind in ("act", "say") and action:
        if _WATER.search(action) and _TRAVEL.search(action):
            return base * 4
        if _TRAVEL.search(action) and kind == "act":
            return base * 2
        if _SEARCH.search(action) and kind == "act":
            return (base * 3 + 1) // 2
    return base


def confirm_line(lead: str, zh: bool) -> str:
    """The sentence with which the scripted narrator says a ledger lead was borne out this turn
    (world-init's tracker reads it back with confirmed_leads)."""
    if zh:
        return f"这与「{lead}」对上了，这条线索不再只是传言。"
    lead = re.sub(r"^(The|A|An) ", lambda m: m.group(1).lower() + " ", lead)
    return f"That bears out the lead on {lead}; it is no longer only talk."


def confirmed_leads(narrative: str, ledger: dict[str, Any], zh: bool) -> list[str]:
    """Keys of the clue-ledger records the narration says were borne out (confirm_line)."""
    return [key for key, rec in (ledger or {}).items()
            if isinstance(rec, dict) and isinstance(rec.get("lead"), str) and confirm_line(rec["lead"], zh) in narrative]


def ledger_of(dimensions: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The first clue-ledger dimension (a map of {lead, status, note}) and its value, its records in
    key order: PostgreSQL's jsonb does not keep an object's key order and SQLite's JSON does, so
    the story must not depend on it (the same seed tells the same story on both shapes)."""
    for dim in dimensions or []:
        value = dim.get("value")
        if isinstance(value, dict) and any(isinstance(v, dict) and isinstance(v.get("lead"), str) for v in value.values()):
            return dim, dict(sorted(value.items()))
    return None, {}


def lead_for(entry: dict[str, Any], action: str, ledger: dict[str, Any], zh: bool, *, searched: bool = False) -> str | None:
    """The key of the first still-open ledger record (status "unverified") that this turn's lore
    entry bears on (one of its keys occurs in the record's lead or note) or, when the hero
    ``searched`` (an `act`), that their own words share content words with."""
    keys = [k for k in entry.get("keys") or [] if isinstance(k, str) and len(k.strip()) >= (2 if zh else 4)] if entry else []
    asked = _words(action, zh) if searched else set()
    for key, rec in (ledger or {}).items():
        if not isinstance(rec, dict) or rec.get("status") not in ("unverified", None):
            continue
        about = f"{rec.get('lead') or ''} {rec.get('note') or ''}"
        if any(_find(about, k, zh) >= 0 for k in keys) or (asked and len(asked & _words(about, zh)) >= (2 if zh else 1)):
            return key
    return None


#: Lore written to the narrator rather than about the world (a world's `world.rules@1` reach the
#: lorebook too): it speaks of "the player", the narrator or the telling, or gives orders.
_DIRECTIVE = re.compile(r"\bthe player\b|\bplayers?'s?\b|\bnarrat|\bGM\b|\bgame master\b|^(Do not|Don't|Never|Always)\b|"
                        r"\b(should|must) (be|not|always|never|make|stay|feel|keep)\b|\bnever (contradict|reveal|state)\b|\bmention it\b|"
                        r"玩家|叙事|叙述者|主持人|不可直接|^(不要|切勿|务必|应当|应)", re.I)


def lore_for_players(lorebook: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries a character may say aloud: not narrator directives or GM rules (_DIRECTIVE)
    — those steer the telling and never reach the player."""
    return [e for e in lorebook or [] if not _directive(str(e.get("content") or ""))]


@functools.lru_cache(maxsize=1024)
def _directive(content: str) -> bool:
    return _DIRECTIVE.search(content) is not None
