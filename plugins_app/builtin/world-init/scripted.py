"""Offline `scripted` model behaviour of world-init.

- schema-gen (only runs for worlds without a character schema): initialize-world with a
  neutral 15-attribute schema in the session locale and, when the world has no dimensions, two
  generic dimensions (tension, daylight).
- dimension-tracker: one update-dimensions call built from the dimensions with an
  `updateRule` (`turn["dimensions"]`) and this turn's story, with three readings only:
  1. clock: a rule that mentions the clock ("clock", "时钟") puts the dimension in `followsClock`;
     an integer countdown field in the clock's unit ("minutes…", "…Left"/"剩余" with a minute
     clock) drops by the minutes that passed (`runtime-inputs.worldTime`), never below its
     minimum; otherwise `{id, reason}` (unchanged by its rule);
  2. clue ledgers (a map of `{lead, status, note}` records, or an array of strings): the lorebook
     entry the scripted narrator surfaced this turn (recognised by its first sentence with
     narrator/story_kit.py) becomes a new record keyed by the entry's kebab-case id (`lead-<n>`
     when that id is taken), lead = the entry's title, note = its first sentence(s) within the
     schema's maxLength (never cut mid-word), with the first status option;
  3. a plain integer dimension (generated "tension") rises by 5 when the story turned up a clue.
  Nothing applicable → `updates: []` ("no change").
"""

from __future__ import annotations

import re
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

_ATTRS = [
    ("calling", "营生", "Calling", "string", "bio"), ("origin", "来历", "Origin", "string", "bio"),
    ("persona", "性情", "Temperament", "string", "bio"), ("location", "所在", "Whereabouts", "string", "bio"),
    ("health", "体力", "Health", "number", "stats"), ("resolve", "心志", "Resolve", "number", "stats"),
    ("wounded", "负伤", "Wounded", "boolean", "stats"), ("knack", "拿手本事", "Knack", "string", "abilities"),
    ("skills", "技艺", "Skills", "array", "abilities"), ("belongings", "随身物件", "Belongings", "array", "equipment"),
    ("coin", "钱财", "Coin", "number", "equipment"), ("weapon", "兵器", "Weapon", "string", "equipment"),
    ("faction", "所属", "Allegiance", "string", "social"), ("attitude", "对主角的态度", "Attitude to the hero", "string", "social"),
    ("ties", "人情往来", "Ties", "map", "social"),
]


def schema_arguments(zh: bool) -> dict[str, Any]:
    attributes = []
    for attr_id, zh_name, en_name, kind, category in _ATTRS:
        attr: dict[str, Any] = {"id": attr_id, "name": zh_name if zh else en_name, "type": kind, "category": category}
        if kind == "number":
            attr.update({"min": 0, "max": 100, "defaultValue": 50})
        elif kind == "array":
            attr.update({"itemType": "string", "defaultValue": []})
        elif kind == "map":
            attr.update({"valueType": "string"})
        elif kind == "boolean":
            attr["defaultValue"] = False
        attributes.append(attr)
    tension_rule = ("冲突、威胁或秘密被揭开时加 5 到 15；局势缓和时减 5 到 10。" if zh
                    else "Add 5-15 when conflict, threats or secrets surface; subtract 5-10 when things calm down.")
    definitions = {
        "tension": {"name": "紧张程度" if zh else "Tension", "schema": {"type": "integer", "minimum": 0, "maximum": 100},
                    "initialValue": 20, "updateRule": tension_rule},
        "clues": {"name": "线索" if zh else "Clues", "schema": {"type": "array", "items": {"type": "string", "maxLength": 80}, "maxItems": 20},
                  "initialValue": [], "updateRule": "记下本回合明确发现的线索。" if zh else "Add each clue the story clearly uncovers this turn."},
    }
    return {"types": ["npc", "companion"], "attributes": attributes, "definitions": definitions}


_CLOCK_WORDS = ("clock", "时钟")
_COUNTDOWN_KEY = re.compile(r"(left|remaining|minutesTo|until)", re.I)


def _narrative(turn: dict[str, Any]) -> str:
    value = (turn.get("inputs") or {}).get("narrative") or ""
    if isinstance(value, dict):
        value = value.get("narrativeOutput") or ""
    return str(value)


def _countdown_field(schema: dict[str, Any], unit: str) -> str | None:
    """The integer field that counts down in the clock's unit, if any."""
    for key, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict) or prop.get("type") != "integer":
            continue
        words = f"{key} {prop.get('title') or ''}"
        if unit == "minute" and "minute" in words.lower() and _COUNTDOWN_KEY.search(words):
            return key
        if unit == "phase" and "phase" in words.lower() and _COUNTDOWN_KEY.search(words):
            return key
    return None


def _ledger_entry(schema: dict[str, Any], clue: dict[str, Any], zh: bool) -> dict[str, Any] | None:
    """A new `{lead, status, note}` record valid for a map-of-records schema, else None."""
    record = schema.get("additionalProperties")
    if schema.get("type") != "object" or not isinstance(record, dict):
        return None
    props = record.get("properties") or {}
    status = props.get("status") or {}
    if not {"lead", "note"} <= set(props) or not status.get("enum"):
        return None
    lead_max = int((props["lead"] or {}).get("maxLength") or 60)
    note_max = int((props["note"] or {}).get("maxLength") or 200)
    k = kit()
    note = ("听来的说法，还没有人证实：" if zh else "Heard tonight, not yet confirmed: ") + k.lore_quote(clue, zh, 1)
    return {"lead": k.fit(k.title_of(clue), lead_max, zh), "status": status["enum"][0], "note": k.fit(note, note_max, zh)}


def _countdown_changes(dim: dict[str, Any], world_time: dict[str, Any], story: str, zh: bool) -> list[dict[str, Any]]:
    """Changes of a clock-following dimension's countdown fields (story_kit.countdown_fields):
    minute fields drop by the minutes that passed; hour (shichen) and day fields take the figure
    the scripted narrator computed from the clock after this turn and wrote in the prose
    ("<title>: N." / "<名>：<title>N。"), so the tracked state follows what the narration says —
    a countdown never goes up and never below its minimum."""
    elapsed = world_time.get("elapsedThisTurn")
    if not isinstance(elapsed, int) or elapsed <= 0:
        return []
    value = dim.get("value") or {}
    props = (dim.get("schema") or {}).get("properties") or {}
    out = []
    for key, title, unit in kit().countdown_fields(dim):
        if not isinstance(value.get(key), int):
            continue
        low = int((props.get(key) or {}).get("minimum", 0))
        if unit == "minute" and world_time.get("unit") in (None, "minute"):
            new = max(low, value[key] - elapsed)
        else:
            label = re.escape(title or key)
            found = re.search((label + r"(\d+)。") if zh else (label + r": (\d+)\."), story)
            if not found:
                continue
            new = max(low, min(value[key], int(found.group(1))))
        if new != value[key]:
            out.append({"path": key, "value": new})
    return out


_HHMM = re.compile(r"\b(\d{1,2}):(\d\d)\b")


def _clock_windows(dim: dict[str, Any], display: str) -> list[dict[str, Any]]:
    """Enum fields a clock-following rule ties to the time of day ("open until 19:30, closing from
    19:30 to 20:00, and flooded after 20:00"): each enum value the rule names with "until T" /
    "from T" / "after T" holds from that time; the value for the clock after this turn (the
    HH:MM of `worldTime.display`) replaces the current one. Hand-rolled: the rule is prose, and
    only this one phrasing is read; anything else is left to the rule's other readings."""
    now = _HHMM.search(display or "")
    rule = str(dim.get("updateRule") or "")
    if not now or not rule:
        return []
    minute = int(now.group(1)) * 60 + int(now.group(2))
    value = dim.get("value") or {}
    out = []
    for key, prop in ((dim.get("schema") or {}).get("properties") or {}).items():
        options = [o for o in (prop or {}).get("enum") or [] if isinstance(o, str)]
        if not options or key not in value:
            continue
        starts: list[tuple[int, str]] = []
        for option in options:
            for m in re.finditer(r"\b" + re.escape(option) + r"\b(?:[^.;,]*?)\b(until|from|after)\s+(\d{1,2}):(\d\d)", rule):
                at = int(m.group(2)) * 60 + int(m.group(3))
                starts.append((-1 if m.group(1) == "until" else at, option))
        if len({o for _, o in starts}) < 2:
            continue
        current = max((s for s in starts if s[0] <= minute), default=None)
        if current and current[1] != value.get(key):
            out.append({"path": key, "value": current[1]})
    return out


def ledger_changes(dim: dict[str, Any], story: str, zh: bool) -> list[dict[str, Any]]:
    """The ledger records the narration says were borne out (story_kit.confirmed_leads): status →
    the ledger's second status option (corroborated), note → what bore it out."""
    value = dim.get("value") or {}
    record = (dim.get("schema") or {}).get("additionalProperties") or {}
    props = record.get("properties") or {}
    options = (props.get("status") or {}).get("enum") or []
    if len(options) < 2:
        return []
    note_max = int((props.get("note") or {}).get("maxLength") or 200)
    out = []
    for key in kit().confirmed_leads(story, value, zh):
        rec = value[key]
        if rec.get("status") != options[0]:
            continue
        line = kit().confirm_line(rec["lead"], zh)
        at = story.find(line)
        before = kit().sentences(story[:at], zh)
        because = before[-1] if before else ""
        note = (f"已有第二个来源佐证：{because}" if zh else f"Borne out by a second source: {because}") if because else str(rec.get("note") or "")
        out.append({"path": key, "value": {**rec, "status": options[1], "note": kit().fit(note, note_max, zh)}})
    return out


def dimension_updates(turn: dict[str, Any]) -> dict[str, Any]:
    """update-dimensions arguments for this turn (see the module docstring)."""
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    story = _narrative(turn)
    world_time = (turn.get("inputs") or {}).get("worldTime") or {}
    unit = str(world_time.get("unit") or "")
    elapsed = world_time.get("elapsedThisTurn") if isinstance(world_time.get("elapsedThisTurn"), int) else 0
    clues = kit().lore_surfaced(story, turn.get("lorebook") or [], zh)
    clue = clues[0] if clues else None
    fact = kit().lore_quote(clue, zh, 1) if clue else ""
    follows: list[str] = []
    updates: list[dict[str, Any]] = []
    for dim in turn.get("dimensions") or []:
        rule = str(dim.get("updateRule") or "")
        if not rule:
            continue
        schema = dim.get("schema") or {}
        value = dim.get("value")
        if any(w in rule.lower() for w in _CLOCK_WORDS):
            follows.append(dim["id"])
            changes = _countdown_changes(dim, world_time, story, zh) if isinstance(value, dict) else []
            changes += _clock_windows(dim, str(world_time.get("display") or "")) if isinstance(value, dict) else []
            if changes:
                reason = (f"时钟走了 {elapsed}，剩余的时间随之减少。" if zh else f"The clock moved {elapsed} {unit}(s); the countdown follows it.")
                updates.append({"id": dim["id"], "changes": changes, "reason": reason})
                continue
            key = _countdown_field(schema, unit) if isinstance(value, dict) else None
            if key and elapsed and isinstance(value.get(key), int):
                low = int((schema["properties"][key]).get("minimum", 0))
                new = max(low, value[key] - elapsed)
                reason = (f"时钟走了 {elapsed}，{key} 随之减少。" if zh else f"The clock moved {elapsed} {unit}(s); {key} counts down.")
                if new != value[key]:
                    updates.append({"id": dim["id"], "changes": [{"path": key, "value": new}], "reason": reason})
                    continue
            if elapsed:
                updates.append({"id": dim["id"], "reason": "按规则，本回合的时间没有改变它。" if zh else "By its rule the time that passed leaves it unchanged."})
            continue
        confirmed = ledger_changes(dim, story, zh) if isinstance(value, dict) else []
        if fact and isinstance(value, dict):
            entry = _ledger_entry(schema, clue, zh)
            if entry is not None and not any(isinstance(v, dict) and v.get("lead") == entry["lead"] for v in value.values()):
                ident = re.sub(r"[^a-z0-9]+", "-", str(clue.get("id") or "").lower()).strip("-")
                key = ident if ident and ident not in value else next(
                    f"lead-{n}" for n in range(len(value) + 1, len(value) + 100) if f"lead-{n}" not in value)
                reason = "故事里冒出了一条新线索。" if zh else "The story turned up a new lead."
                if confirmed:
                    reason += "另有一条线索得到了佐证。" if zh else " Another lead was borne out."
                updates.append({"id": dim["id"], "changes": [*confirmed, {"path": key, "value": entry}], "reason": reason})
                continue
        if confirmed:
            updates.append({"id": dim["id"], "changes": confirmed,
                            "reason": "故事里有了第二个独立的佐证。" if zh else "A second, independent source bore the lead out."})
            continue
        if fact and isinstance(value, list) and (schema.get("items") or {}).get("type") == "string":
            limit = int((schema.get("items") or {}).get("maxLength") or 80)
            item = kit().fit(fact, limit, zh)
            if item not in value and len(value) < int(schema.get("maxItems") or 20):
                updates.append({"id": dim["id"], "value": [*value, item],
                                "reason": "故事里冒出了一条新线索。" if zh else "The story turned up a new lead."})
            continue
        if fact and schema.get("type") == "integer" and isinstance(value, int):
            high = int(schema.get("maximum", 100))
            if value < high:
                updates.append({"id": dim["id"], "value": min(high, value + 5),
                                "reason": "又一条线索浮出水面。" if zh else "Another clue has surfaced."})
    return {"followsClock": follows, "updates": updates}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if turn.get("tool_results"):
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    if "initialize-world" in names:
        return {"tool_calls": [{"name": "initialize-world", "arguments": schema_arguments(zh)}]}
    if "update-dimensions" in names:
        return {"tool_calls": [{"name": "update-dimensions", "arguments": dimension_updates(turn)}]}
    return None
