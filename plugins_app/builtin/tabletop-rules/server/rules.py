"""tabletop-rules' rules and pure operations (creation, check, the point-buy validator).

Rules record (contract tabletop-rules.rules.initial@1, namespace `rules`, key `creation`):
`{budget, attributes: [{id, label, base, max}]}`. A world file holding a list arrives as one row
(its source id as key); the first item with `attributes` counts.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

NAMESPACE = "rules"
RECEIPTS = "receipts"
FORM_ID = "point-buy"
VALIDATOR = "point-buy"
BANDS = {"easy": 8, "standard": 12, "hard": 15, "very-hard": 18}
_BAND_WORDS = {"easy": r"easy|简单|容易", "hard": r"hard|困难|很难", "very-hard": r"very hard|极难|非常难"}


def rules_of(rows: dict[str, Any]) -> dict[str, Any] | None:
    """The creation rules among the plugin's `rules` rows, else None."""
    candidates = [rows.get("creation"), *rows.values()]
    for value in candidates:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get("attributes"), list) and item["attributes"]:
                return item
    return None


def _text(value: Any, locale: str | None) -> str:
    if isinstance(value, dict):  # a locale map {"zh-CN": ..., "en-US": ...}
        zh = str(locale or "").lower().startswith("zh")
        pick = next((v for k, v in value.items() if str(k).lower().startswith("zh") == zh and isinstance(v, str)), None)
        return pick or next((v for v in value.values() if isinstance(v, str)), "")
    return str(value or "")


def _bound(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        return None
    return int(value)


def rules_for_schema(rules: dict[str, Any], schema: dict[str, Any] | None, locale: str | None) -> dict[str, Any] | None:
    """The creation rules as the world's character schema allows them (the rules' authoring
    contract: each rule attribute is a bounded integer attribute with ``category: abilities`` in the
    world's ``characterSchema``): attributes the schema lacks, that are not numbers, not abilities
    or unbounded are left out; ``base`` is raised to the schema's ``min`` and ``max`` lowered to the
    schema's ``max``; a missing label is the schema attribute's name in ``locale``. Without a
    character schema the rules stand as written. None when no attribute is left."""
    attributes = [a for a in rules.get("attributes") or [] if isinstance(a, dict) and a.get("id")]
    if isinstance(schema, dict) and isinstance(schema.get("attributes"), list):
        declared = {a.get("id"): a for a in schema["attributes"] if isinstance(a, dict)}
        kept = []
        for attr in attributes:
            spec = declared.get(attr["id"])
            low, high = (_bound(spec.get("min")), _bound(spec.get("max"))) if isinstance(spec, dict) else (None, None)
            if spec is None or spec.get("type") not in ("number", "integer") or spec.get("category") != "abilities" \
                    or low is None or high is None:
                continue
            base = max(_bound(attr.get("base")) if _bound(attr.get("base")) is not None else low, low)
            top = min(_bound(attr.get("max")) if _bound(attr.get("max")) is not None else high, high)
            if base > top:
                continue
            kept.append({**attr, "base": base, "max": top, "label": str(attr.get("label") or _text(spec.get("name"), locale) or attr["id"])})
        attributes = kept
    else:
        attributes = [{**a, "label": str(a.get("label") or a["id"])} for a in attributes
                      if _bound(a.get("base")) is not None and _bound(a.get("max")) is not None]
    return {**rules, "attributes": attributes} if attributes else None


def point_buy_issue(values: dict[str, Any], rules: dict[str, Any], zh: bool) -> dict[str, str] | None:
    """The first problem of a point-buy answer as `{field, message}`, else None."""
    spent = 0
    for attr in rules.get("attributes") or []:
        value = values.get(attr["id"], attr["base"])
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not attr["base"] <= value <= attr["max"]:
            message = (f"{attr['label']}需要是 {attr['base']} 到 {attr['max']} 之间的整数。" if zh
                       else f"{attr['label']} must be a whole number from {attr['base']} to {attr['max']}.")
            return {"field": attr["id"], "message": message}
        spent += value - attr["base"]
    if spent > int(rules.get("budget") or 0):
        first = (rules.get("attributes") or [{}])[0].get("id", "")
        message = (f"一共只有 {rules['budget']} 点，现在用了 {spent} 点。" if zh
                   else f"You have {rules['budget']} points to spend and used {spent}.")
        return {"field": first, "message": message}
    return None


def validate_point_buy(values: dict[str, Any], data: Any, context: dict[str, Any] | None = None) -> Any:
    """Form validator `point-buy` (data = the rules the form was issued with)."""
    if not isinstance(data, dict) or not isinstance(values, dict):
        return None
    return point_buy_issue(values, data, str((context or {}).get("locale") or "").lower().startswith("zh"))


def _attr_pattern(attr: dict[str, Any]) -> str:
    names = sorted({re.escape(str(attr["id"])), re.escape(str(attr.get("label") or attr["id"]))}, key=len, reverse=True)
    return "(?:" + "|".join(names) + ")"


def check_request(text: str, rules: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """(attribute rule, difficulty) when ``text`` asks for a check of a rule attribute, else None."""
    for attr in rules.get("attributes") or []:
        name = _attr_pattern(attr)
        patterns = [rf"\b(?:check|roll|test)\s+(?:my\s+)?{name}\b", rf"\b{name}\s+(?:check|roll|test)\b",
                    rf"{name}\s*检定", rf"检定\s*{name}", rf"用{name}"]
        if any(re.search(p, text, re.I) for p in patterns):
            difficulty = "standard"
            for band in ("very-hard", "hard", "easy"):
                if re.search(_BAND_WORDS[band], text, re.I):
                    difficulty = band
                    break
            return attr, difficulty
    return None


def settle(session_id: str, turn: int | None, attr: dict[str, Any], value: int, difficulty: str) -> dict[str, Any]:
    """A receipt: d20 seeded with the session, turn and attribute, + (value − base) vs the band's DC."""
    seed = hashlib.sha256(f"tabletop-rules:{session_id}:{turn}:{attr['id']}".encode()).hexdigest()
    roll = random.Random(seed).randint(1, 20)
    modifier = int(value) - int(attr["base"])
    dc = BANDS[difficulty]
    total = roll + modifier
    outcome = "critical-success" if roll == 20 else "critical-failure" if roll == 1 else ("success" if total >= dc else "failure")
    sign = "+" if modifier >= 0 else "-"
    return {"turn": turn, "attribute": attr["id"], "label": str(attr.get("label") or attr["id"]), "value": value,
            "modifier": modifier, "difficulty": difficulty, "dc": dc, "roll": roll, "total": total, "outcome": outcome,
            "notation": f"d20 {roll} {sign} {abs(modifier)} = {total} vs DC {dc}"}


def check_context(receipt: dict[str, Any], zh: bool) -> str:
    if zh:
        return (f"## 本回合的属性检定（已结算）\n{receipt['label']}检定：{receipt['notation']}\n结果：{receipt['outcome']}\n"
                "按这个结果写玩家的尝试，不提骰子和数字；大成功带来额外好处，大失败带来新的麻烦。")
    return (f"## This turn's attribute check (settled)\n{receipt['label']} check: {receipt['notation']}\nOutcome: {receipt['outcome']}\n"
            "Write the player's attempt from this outcome without mentioning dice or numbers; a critical success brings an "
            "extra benefit, a critical failure a new complication.")
