"""Dice rules of dice-check (shared by the roller, the recorder, the roll action and the scripted
narrator): the seeded pool, difficulty bands, outcomes and the checkContext text.

Bands: easy 8, standard 12, hard 15, very-hard 18, extreme 20. Outcome of roll r + modifier m
against DC d: r = 20 critical-success, r = 1 critical-failure, r + m >= d success, else failure.
Modifier of a hero attribute: its value minus the schema's defaultValue (0 without one), clamped
to [-5, 5] — a fresh hero starts at +0 and grows with play.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

POOL_SIZE = 3
ROLLS = "rolls"
CHECKS = "checks"
MESSAGE = "message"
BANDS = {"easy": 8, "standard": 12, "hard": 15, "very-hard": 18, "extreme": 20}
OUTCOMES = ("critical-success", "success", "failure", "critical-failure")
LABELS = {
    "en": {"critical-success": "Critical success", "success": "Success", "failure": "Failure", "critical-failure": "Critical failure"},
    "zh": {"critical-success": "大成功", "success": "成功", "failure": "失败", "critical-failure": "大失败"},
}
COLORS = {"critical-success": "gold", "success": "green", "failure": "orange", "critical-failure": "red"}
NOTATION = re.compile(r"^\s*(\d{0,2})\s*[dD]\s*(\d{1,3})\s*([+-]\s*\d{1,3})?\s*$")


def pool(session_id: str, turn: int | None) -> list[int]:
    """The turn's three d20: a generator seeded with the session id and turn (same dice on a retry).
    Not for security: the seed only has to be stable and unknown to the model before the turn."""
    seed = hashlib.sha256(f"dice-check:{session_id}:{turn}".encode()).hexdigest()
    rng = random.Random(seed)
    return [rng.randint(1, 20) for _ in range(POOL_SIZE)]


def outcome(roll: int, modifier: int, dc: int) -> str:
    if roll == 20:
        return "critical-success"
    if roll == 1:
        return "critical-failure"
    return "success" if roll + modifier >= dc else "failure"


def modifiers(hero: dict[str, Any] | None, schema: dict[str, Any] | None) -> dict[str, int]:
    """Attribute id → modifier for the hero's numeric attributes (module docstring)."""
    if not hero:
        return {}
    fields = hero.get("fields") or {}
    out: dict[str, int] = {}
    for attr in (schema or {}).get("attributes") or []:
        if not isinstance(attr, dict) or attr.get("type") not in ("number", "integer"):
            continue
        value = fields.get(attr.get("id"))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            base = attr.get("defaultValue") if isinstance(attr.get("defaultValue"), (int, float)) else 0
            out[attr["id"]] = max(-5, min(5, int(round(value - base))))
    return out


def settle(item: dict[str, Any], roll: int) -> dict[str, Any] | None:
    """A receipt item with roll, DC, total and the computed outcome; None when it is malformed."""
    action, modifier, difficulty = item.get("action"), item.get("modifier"), item.get("difficulty")
    if not isinstance(action, str) or not action.strip() or difficulty not in BANDS:
        return None
    if not isinstance(modifier, int) or isinstance(modifier, bool) or not -5 <= modifier <= 5:
        return None
    dc = BANDS[difficulty]
    result = outcome(roll, modifier, dc)
    out = {"action": action.strip(), "modifier": modifier, "difficulty": difficulty, "dc": dc, "roll": roll,
           "total": roll + modifier, "outcome": result}
    if isinstance(item.get("attribute"), str) and item["attribute"].strip():
        out["attribute"] = item["attribute"].strip()
    if item.get("outcome") in OUTCOMES and item["outcome"] != result:
        out["claimed"] = item["outcome"]
    return out


def display(check: dict[str, Any], zh: bool) -> dict[str, Any]:
    sign = "+" if check["modifier"] >= 0 else "-"
    return {**check, "outcomeLabel": LABELS["zh" if zh else "en"][check["outcome"]], "color": COLORS[check["outcome"]],
            "notation": f"d20 {check['roll']} {sign} {abs(check['modifier'])} = {check['total']} vs DC {check['dc']}"}


def check_context(dice: list[int], mods: dict[str, int], labels: dict[str, str], zh: bool, tabletop: bool) -> str:
    """Self-contained instructions for the narrator (the action-check@1 `checkContext`)."""
    pool_text = ", ".join(f"#{i + 1} = {d}" for i, d in enumerate(dice))
    mod_text = ", ".join(f"{labels.get(k, k)} ({k}) {v:+d}" for k, v in mods.items()) or ("无" if zh else "none")
    bands = ", ".join(f"{k} {v}" for k, v in BANDS.items())
    if zh:
        lines = [
            "## 本回合的骰子检定",
            f"骰池（d20，按顺序使用）：{pool_text}",
            f"主角属性调整值：{mod_text}",
            f"难度（DC）：{bands}",
            "- 只有结果不确定、失败有代价的行动才检定（攀爬、撬锁、潜行、说服、搏斗、追逐……）；寻常举动、交谈和观察不检定。",
            "- 每个检定按顺序用掉一颗骰子（第一个检定用 #1），最多三个。总值 = 骰值 + 最相关属性的调整值（没有就用 0）。",
            "- 骰值 20 为大成功，1 为大失败；否则总值 ≥ DC 成功，小于 DC 失败。大成功带来额外好处，大失败带来新的麻烦。",
            "- 写正文之前，先用 emit-event 发出一次 `check.resolved`，把本回合所有检定按顺序写进 `checks`：action（几个字说明尝试了什么）、attribute（可选）、modifier、difficulty、outcome。不写骰值、DC 或总值。",
            "- 正文按结果写，不提骰子、数字和规则。",
        ]
        if tabletop:
            lines.append("- 本回合的属性检定已由桌面规则结算，照它的结果写；那个行动不再用骰池。")
        return "\n".join(lines)
    lines = [
        "## Dice checks this turn",
        f"Dice pool (d20, use in order): {pool_text}",
        f"Hero modifiers: {mod_text}",
        f"Difficulty (DC): {bands}",
        "- Check only actions whose result is uncertain and whose failure costs something (climbing, forcing a lock, sneaking, persuading, fighting, chasing...); ordinary moves, talk and looking around never roll.",
        "- Each check uses the next die in order (the first check uses #1), at most three. Total = die + the modifier of the most relevant attribute (0 when none).",
        "- A die of 20 is a critical success, 1 a critical failure; otherwise total >= DC succeeds and below fails. A critical success brings an extra benefit, a critical failure a new complication.",
        "- Before writing the prose, call emit-event once with `check.resolved`, listing every check of the turn in order in `checks`: action (a few words on the attempt), attribute (optional), modifier, difficulty, outcome. No dice values, DC or totals.",
        "- Write the prose from the outcome; never mention dice, numbers or rules.",
    ]
    if tabletop:
        lines.append("- This turn's attribute check was already settled by the tabletop rules; follow its result and do not use the pool for that action.")
    return "\n".join(lines)


def roll_notation(notation: str | None) -> dict[str, Any]:
    """`/roll` (action `roll`): NdM[+K], 1–20 dice of 2–100 sides, default 1d20. ValueError if malformed."""
    match = NOTATION.match(notation or "1d20")
    if not match:
        raise ValueError("notation: NdM, such as 2d6 or 1d20+2")
    count, sides = int(match.group(1) or 1), int(match.group(2))
    bonus = int((match.group(3) or "0").replace(" ", ""))
    if not 1 <= count <= 20 or not 2 <= sides <= 100:
        raise ValueError("notation: 1-20 dice of 2-100 sides")
    rng = random.SystemRandom()
    dice = [rng.randint(1, sides) for _ in range(count)]
    return {"notation": f"{count}d{sides}{bonus:+d}" if bonus else f"{count}d{sides}", "dice": dice, "bonus": bonus, "total": sum(dice) + bonus}
