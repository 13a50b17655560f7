"""Offline `scripted` model behaviour of world-init.

- schema-gen (only runs for worlds without a character schema): initialize-world with a
  neutral 15-attribute schema in the session locale and, when the world has no dimensions, two
  generic dimensions (tension, daylight).
- dimension-tracker: one update-dimensions call recording "no change" (the scripted model has
  no reading of the rules; it settles the turn so the receipt is kept).
"""

from __future__ import annotations

from typing import Any

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


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if turn.get("tool_results"):
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    if "initialize-world" in names:
        return {"tool_calls": [{"name": "initialize-world", "arguments": schema_arguments(zh)}]}
    if "update-dimensions" in names:
        return {"tool_calls": [{"name": "update-dimensions", "arguments": {"followsClock": [], "updates": []}}]}
    return None
