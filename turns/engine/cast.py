"""The cast of a session as sub-agents and turn policies see it (spec 000 §角色委托与策略导入,
§故事内的演员委托): private name resolution and a character's experienced history.

- ``character_resolve(characters, name)``: the one character whose name or alias is ``name``
  (case- and width-insensitive, surrounding blanks ignored). A raw id (UUID or semantic id) is not
  a name: it is refused like an unknown name, so a model cannot address a character by its id.
  Raises ToolError ``not-found`` / ``ambiguous`` (marked refused, as delegate's failures are).
- ``character_history(snapshot, character, limit)``: the committed story turns the character took
  part in, oldest first, ``[{turnId, role, text}]``. The engine keeps no per-turn presence list, so
  "took part" means the turn's player message or story prose names the character (name or alias);
  the turn's player message is kept with the prose it led to.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from plugins_app.toolkit.errors import AMBIGUOUS, NOT_FOUND, ToolError
from plugins_app.toolkit.state import CharacterRecord

#: Experienced-history turns a character agent gets by default (spec: 档案与亲历历史).
HISTORY_LIMIT_DEFAULT = 6
HISTORY_LIMIT_MAX = 50


def refused(code: str, message: str, **kw: Any) -> ToolError:
    """A ToolError marked refused (turns.engine.tools.services.refused; this module sits below tools)."""
    error = ToolError(code, message, **kw)
    error.refused = True  # type: ignore[attr-defined]
    return error


def _key(text: str) -> str:
    return unicodedata.normalize("NFKC", text).strip().casefold()


def character_names(character: CharacterRecord) -> list[str]:
    """The name and aliases of a character (non-empty, in order)."""
    return [n for n in (character.name, *character.aliases) if isinstance(n, str) and n.strip()]


def character_resolve(characters: Iterable[CharacterRecord], name: str) -> CharacterRecord:
    """The one character called ``name`` (name or alias). Raises refused ToolError not-found /
    ambiguous; an id that is nobody's name or alias is not-found with a hint to use the name."""
    wanted = _key(str(name or ""))
    pool = list(characters)
    found = [c for c in pool if wanted and any(_key(n) == wanted for n in character_names(c))]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise refused(AMBIGUOUS, f'More than one character is called "{name}".',
                      hint="Use a name or alias only one character has.")
    if any(_key(c.id) == wanted for c in pool):
        raise refused(NOT_FOUND, f'"{name}" is an id, not a character name.', hint="Name the character by its name or alias.")
    raise refused(NOT_FOUND, f'No character in this session is called "{name}".')


def _mentions(text: str, names: list[str]) -> bool:
    folded = _key(text)
    return any(_key(n) in folded for n in names)


def _text(row: dict[str, Any]) -> str:
    content = row.get("content")
    text = content.get("text") if isinstance(content, dict) else content
    return text if isinstance(text, str) else ""


def character_history(snapshot: Any, character: CharacterRecord, limit: int | None = None) -> list[dict[str, Any]]:
    """The last ``limit`` (default 6, at most 50) story turns that name the character, oldest first:
    ``[{"turnId", "role": "user" | "assistant", "text"}]`` (a turn's player message and prose)."""
    limit = HISTORY_LIMIT_DEFAULT if limit is None else max(0, min(int(limit), HISTORY_LIMIT_MAX))
    names = character_names(character)
    turns: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []
    for row in snapshot.history:
        if row.get("role") not in ("user", "assistant") or not _text(row).strip():
            continue
        turn_id = str(row.get("turn_id"))
        if turn_id not in turns:
            turns[turn_id] = []
            order.append(turn_id)
        turns[turn_id].append({"turnId": turn_id, "role": row["role"], "text": _text(row)})
    kept = [t for t in order if any(_mentions(r["text"], names) for r in turns[t])]
    out: list[dict[str, Any]] = []
    for turn_id in kept[-limit:] if limit else []:
        out.extend(turns[turn_id])
    return out


def history_for_binding(snapshot: Any, characters: Any):
    """``history_for(character_id, limit=None)`` bound to a session (``context.historyFor`` of plugin
    tools and services): the experienced history of that character id; [] for an unknown id."""

    def history_for(character_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        if isinstance(limit, dict):  # the spec's {limit?} option bag
            limit = limit.get("limit")
        found = next((c for c in characters() if c.id == character_id), None)
        return character_history(snapshot, found, limit) if found is not None else []

    return history_for
