"""Prompt assembly for agent runtimes: system prompt, history and the turn's user message.

System prompt = the runtime's prompt file ``prompts/<name>.<locale>.md`` (name: the runtime's
local id, the plugin id for the inline runtime; locale exact, then same language, then en-US),
or the manifest body when there is no file — with ``{{ dotted.path }}`` placeholders filled from
``template_values`` (unknown paths become ""; a line that was only an empty placeholder is
dropped) — followed by the segments the template did not already place: world lore, characters,
lorebook matches, memory, plugin prompt contributions, runtime inputs and the completion rule.
Every segment is cut to its character budget; a cut is reported as ``context.pruned``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from turns.engine.snapshot import SessionSnapshot
from plugins_app.toolkit.state import CharacterRecord

PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")
#: Character budgets per segment (prompt budget, roughly 4 characters per token).
LORE_BUDGET_CHARS = 16000
CHARACTERS_BUDGET_CHARS = 6000
LOREBOOK_BUDGET_CHARS = 6000
MEMORY_BUDGET_CHARS = 4000
HISTORY_BUDGET_CHARS = 24000
#: Default number of past turns in the history when agent.history.maxTurns is not declared.
HISTORY_MAX_TURNS = 20
#: How many recent messages lorebook keys are matched against.
LOREBOOK_SCAN_MESSAGES = 6


def prompt_file_find(plugin_root: Path, name: str, locale: str) -> Path | None:
    """``prompts/<name>.<locale>.md``: exact locale, then same language, then en-US."""
    folder = plugin_root / "prompts"
    if not folder.is_dir():
        return None
    exact = folder / f"{name}.{locale}.md"
    if exact.is_file():
        return exact
    language = locale.split("-", 1)[0]
    for candidate in sorted(folder.glob(f"{name}.{language}*.md")):
        return candidate
    fallback = folder / f"{name}.en-US.md"
    return fallback if fallback.is_file() else None


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1)


def template_fill(template: str, values: dict[str, Any]) -> tuple[str, set[str]]:
    """Fill ``{{ path }}`` placeholders; returns (text, the top-level keys referenced)."""
    used: set[str] = set()
    out_lines: list[str] = []
    for line in template.splitlines():
        found = PLACEHOLDER_RE.findall(line)
        for path in found:
            used.add(path.split(".", 1)[0] + ("." + path.split(".")[1] if "." in path else ""))
        # Only placeholders in a namespace we fill are replaced; anything else ({{characterName}}
        # in a prompt that explains form templates) is prompt text and stays literal.
        filled = PLACEHOLDER_RE.sub(
            lambda m: _as_text(_lookup(values, m.group(1))) if m.group(1).split(".", 1)[0] in values else m.group(0),
            line,
        )
        if found and not filled.strip() and line.strip():
            continue
        out_lines.append(filled)
    return "\n".join(out_lines), used


def budget_cut(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit].rstrip() + "\n…", True


#: character_line's results by (id(record), zh), each with its record: a turn's ~9 prompts list the
#: same ~20 snapshot records (immutable, shared by the runtimes of an execution), so each line is
#: made once instead of once per prompt (issue 18: 225 lines and JSON encodings a full-game turn).
#: The record is kept beside its line, so an id reused by a new object never hits a stale entry.
#: A dict rather than functools.lru_cache: the records hold dicts and are not hashable.
_CHARACTER_LINES: dict[tuple[int, bool], tuple[CharacterRecord, str]] = {}
_CHARACTER_LINES_MAX = 4096


def character_line(c: CharacterRecord, zh: bool) -> str:
    """One roster line of the prompt: ``- [type] name — aliases: … — description — {fields}``."""
    key = (id(c), zh)
    hit = _CHARACTER_LINES.get(key)
    if hit is not None and hit[0] is c:
        return hit[1]
    line = _character_line_make(c, zh)
    if len(_CHARACTER_LINES) >= _CHARACTER_LINES_MAX:
        _CHARACTER_LINES.clear()
    _CHARACTER_LINES[key] = (c, line)
    return line


def _character_line_make(c: CharacterRecord, zh: bool) -> str:
    bits = [c.name]
    if c.aliases:
        bits.append(("别名：" if zh else "aliases: ") + ", ".join(c.aliases))
    if c.description:
        bits.append(c.description.strip().replace("\n", " ")[:300])
    facts = {k: v for k, v in (c.fields or {}).items() if v not in (None, "", [], {})}
    if facts:
        bits.append(json.dumps(facts, ensure_ascii=False)[:400])
    return f"- [{c.type}] " + " — ".join(bits)


#: Characters of fields the <character-fields> block carries before lines say fieldsOmitted
#: (spec 000 §sync-characters: 12000 字符的预算).
CHARACTER_FIELDS_BUDGET_CHARS = 12000
#: Characters of one roster description in <existing-characters>.
ROSTER_DESCRIPTION_CHARS = 240


def character_roster_blocks(characters: list[CharacterRecord]) -> str:
    """The two blocks a character-writing runtime reads (spec 000 §sync-characters, 使用者):
    ``<existing-characters>`` — one line per character: ``id | name | aliases: … | type | description``;
    ``<character-fields>`` — one line per id with its current fields as JSON, within
    CHARACTER_FIELDS_BUDGET_CHARS; lines past the budget say ``fieldsOmitted`` (read them with
    get-character). Returns the text of both blocks."""
    roster = []
    for c in characters:
        bits = [c.id, c.name]
        if c.aliases:
            bits.append("aliases: " + ", ".join(c.aliases))
        bits.append(c.type)
        if c.description:
            bits.append(c.description.strip().replace("\n", " ")[:ROSTER_DESCRIPTION_CHARS])
        roster.append(" | ".join(bits))
    fields_lines, used = [], 0
    for c in characters:
        body = json.dumps(c.fields or {}, ensure_ascii=False, sort_keys=True)
        if used + len(body) > CHARACTER_FIELDS_BUDGET_CHARS:
            fields_lines.append(f"{c.id}: fieldsOmitted")
            continue
        used += len(body)
        fields_lines.append(f"{c.id}: {body}")
    return ("<existing-characters>\n" + "\n".join(roster) + "\n</existing-characters>\n\n"
            "<character-fields>\n" + "\n".join(fields_lines) + "\n</character-fields>")


def lorebook_matches(snapshot: SessionSnapshot, entries: list[Any], scan_text: str) -> list[Any]:
    """Enabled entries with no keys (constant) or a key occurring in ``scan_text`` (case-insensitive)."""
    lowered = scan_text.lower()
    out = []
    for entry in entries:
        if not entry.enabled:
            continue
        keys = [k for k in entry.keys if isinstance(k, str) and k.strip()]
        if not keys or any(k.lower() in lowered for k in keys):
            out.append(entry)
    return out


def template_values(
    *,
    snapshot: SessionSnapshot,
    characters: list[CharacterRecord],
    lore_matches: list[Any],
    inputs: dict[str, Any],
    user_settings: dict[str, Any],
    character_schema: dict[str, Any] | None,
    budget_scale: float = 1.0,
) -> dict[str, Any]:
    """The values prompt templates may reference (see turns/engine/README.md, "Prompt templates").
    The world lore, the character lines and the lorebook matches are cut to the same budgets as
    the sections the engine adds itself, times ``budget_scale`` (the model's context window)."""
    zh = snapshot.locale.lower().startswith("zh")
    players = [c for c in characters if c.type == "player"]
    npcs = [c for c in characters if c.type != "player"]
    dims = {d.id: d.value for d in snapshot.dimensions}
    characters_budget = int(CHARACTERS_BUDGET_CHARS * budget_scale)
    return {
        "world": {
            "name": snapshot.world.name,
            "description": snapshot.world.summary,
            "lore": budget_cut(snapshot.world.lore, int(LORE_BUDGET_CHARS * budget_scale))[0],
            "openingScenario": snapshot.world.opening_scenario,
            "dimensions": dims if dims else "",
            "schema": character_schema or "",
        },
        "player": {"character": "\n".join(character_line(c, zh) for c in players)},
        "characters": {"npcs": budget_cut("\n".join(character_line(c, zh) for c in npcs), characters_budget)[0],
                       "all": budget_cut("\n".join(character_line(c, zh) for c in characters), characters_budget)[0]},
        "lorebook": {"matches": budget_cut("\n\n".join(e.content for e in lore_matches), int(LOREBOOK_BUDGET_CHARS * budget_scale))[0]},
        "userSettings": user_settings,
        "session": {"locale": snapshot.locale, "turn": snapshot.completed_player_turns},
        "runtime": {"inputs": inputs},
    }


#: The placeholder of the dimension-tracker prompt (turns/engine/README.md, "Prompt templates").
DIMENSION_RULES_PLACEHOLDER = "world.dimensionRules"
#: A rule or schema longer than this (characters; schema as compact JSON) is not inlined: the
#: block lists the dimension as truncated and the model reads it with dimension-rule-get.
DIMENSION_RULE_INLINE_CHARS = 2000


def dimension_rules_text(dimensions: list[Any], rules: dict[str, str], *, zh: bool) -> str:
    """``{{ world.dimensionRules }}``: one block per dimension with an updateRule — id, name,
    version, rule, schema and the frozen value (JSON). A rule or schema over
    DIMENSION_RULE_INLINE_CHARS is replaced by a "truncated" note naming dimension-rule-get."""
    blocks: list[str] = []
    for d in dimensions:
        rule = rules.get(d.id)
        if not rule:
            continue
        schema = json.dumps(d.schema or {}, ensure_ascii=False, separators=(",", ":"))
        value = json.dumps(d.value, ensure_ascii=False, separators=(",", ":"))
        lines = [f"## {d.id}" + (f" — {d.name}" if d.name else ""), f"version: {d.version}"]
        if len(rule) > DIMENSION_RULE_INLINE_CHARS:
            lines.append(("rule: （过长，已截断；用 dimension-rule-get 读 part: rule）" if zh
                          else "rule: (truncated; read it with dimension-rule-get part: rule)") + f" {rule[:200]}…")
        else:
            lines.append(f"rule: {rule}")
        if len(schema) > DIMENSION_RULE_INLINE_CHARS:
            lines.append("schema: （过长，已截断；用 dimension-rule-get 读 part: schema）" if zh
                         else "schema: (truncated; read it with dimension-rule-get part: schema)")
        else:
            lines.append(f"schema: {schema}")
        lines.append(f"value: {value}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def completion_text(*, is_story: bool, offers_done: bool, after_tools: list[str], require: str | None, zh: bool) -> str:
    """The [COMPLETION] rule the model reads."""
    if is_story:
        return "以故事正文结束本回合：直接写出正文。" if zh else "Finish by writing the story prose itself."
    if after_tools:
        names = ", ".join(after_tools)
        if offers_done:  # require: explicit — a quiet turn ends with runtime-done instead
            return (f"调用 {names} 完成本任务；它成功后本 runtime 即结束。没有需要记录的内容时，只调用 runtime-done。" if zh
                    else f"Complete this task by calling {names}; the runtime ends when it succeeds. "
                         "When there is nothing to record, call runtime-done alone.")
        return (f"调用 {names} 完成本任务；它成功后本 runtime 即结束。" if zh
                else f"Complete this task by calling {names}; the runtime ends when it succeeds.")
    if offers_done:
        extra = ("先完成需要的工具调用，" if require == "tool-use" else "") if zh else ("first make the tool calls the task needs, then " if require == "tool-use" else "")
        return (f"{extra}完成后调用 runtime-done 结束。" if zh else f"When finished, {extra}call runtime-done.")
    return "完成后用一句话说明结果。" if zh else "When finished, reply with one short sentence."


def history_messages(snapshot: SessionSnapshot, *, max_turns: int | None, budget_scale: float = 1.0,
                     compaction: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Story history (player messages and story prose) as chat messages, newest turns within budget.

    compaction: ``{"text", "throughTurnId"}`` of a history.compact@1 provider (history-compaction):
    the turns up to and including ``throughTurnId`` are left out and the summary comes first, as a
    system message (a summary whose turn is no longer in the kept rows still leads).
    Returns (messages oldest first, was_pruned).
    """
    rows = [h for h in snapshot.history if h["role"] in ("user", "assistant")]
    summary: list[dict[str, Any]] = []
    if compaction:
        through = compaction.get("throughTurnId")
        order = []
        for row in rows:
            if not order or order[-1] != row["turn_id"]:
                order.append(row["turn_id"])
        if through in order:
            covered = set(order[:order.index(through) + 1])
            rows = [r for r in rows if r["turn_id"] not in covered]
        zh = (snapshot.locale or "").lower().startswith("zh")
        summary = [{"role": "system", "content": ("[前情提要]\n" if zh else "[EARLIER STORY — SUMMARY]\n") + compaction["text"]}]
    turns: list[str] = []
    for row in rows:
        if not turns or turns[-1] != row["turn_id"]:
            turns.append(row["turn_id"])
    keep_turns = set(turns[-(max_turns or HISTORY_MAX_TURNS):])
    selected = [r for r in rows if r["turn_id"] in keep_turns]
    out: list[dict[str, Any]] = []
    total = 0
    pruned = len(selected) < len(rows)
    for row in reversed(selected):
        content = row["content"]
        text = content.get("text") if isinstance(content, dict) else str(content)
        if not text:
            continue
        if total + len(text) > HISTORY_BUDGET_CHARS * budget_scale:
            pruned = True
            break
        total += len(text)
        out.append({"role": row["role"], "content": text})
    out.reverse()
    return summary + out, pruned
