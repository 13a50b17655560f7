"""Offline `scripted` narrator: the catalogue plugins' inputs (issue 20), kept apart from the prose
engine (scripted.py) — they add to its prose, they never rewrite it.

- `check-results` (dice-check `action-check@1`): a risky `act` (climb, force, sneak, persuade,
  fight, … / 爬、撬、潜、说服、打 …) uses die #1 of the pool with the hero's first listed modifier at
  `standard` difficulty: the narrator first emits one `check.resolved` receipt (emit-event, when
  offered), then the prose tells the outcome;
- `tabletopCheck` (tabletop-rules `tabletop-check@1`): a settled check's `Outcome:` line is told;
- `storyEvent` (story-events `story-event-cue@1`): the cue's brief is staged — its descriptive
  sentences, without the brief's instructions to the narrator.
Deterministic: everything is read from the inputs.
"""

from __future__ import annotations

import re
from typing import Any

RISKY = {
    "en": re.compile(r"\b(climb|force|pry|prise|pick the lock|sneak|slip past|jump|leap|persuade|convince|bluff|lie to|fight|strike|attack|"
                     r"wrestle|chase|run after|steal|swim|break|smash|hack|repair|fix|lift|dodge|hide from)\w*", re.I),
    "zh": re.compile(r"(爬|攀|撬|潜入|潜行|溜过|跳|说服|劝服|骗|搏斗|打倒|出手|追赶|偷|游过|砸开|撞开|修好|抢修|举起|躲开|闪身)"),
}
OUTCOME_TEXT = {
    "en": {"critical-success": "{hero} makes it look easy — better than anyone had a right to expect.",
           "success": "It is not graceful, but {hero} manages it.",
           "failure": "{hero} tries, and it does not go the way it should; the attempt costs time and leaves a mark.",
           "critical-failure": "It goes badly wrong for {hero}, and now there is a new problem on top of the old one."},
    "zh": {"critical-success": "{hero}做得干脆利落，比谁预料的都要好。",
           "success": "算不上漂亮，但{hero}做成了。",
           "failure": "{hero}试了，却没能如愿，白白耗了工夫，还留下了痕迹。",
           "critical-failure": "{hero}这一下糟透了，旧麻烦没了结，又惹出了新麻烦。"},
}
_INSTRUCTION = {
    "en": re.compile(r"^(make|play|let|do not|don't|keep|leave|stage|show|never|describe|avoid|have)\b", re.I),
    "zh": re.compile(r"^(不要|别|让|把|写|保持|留下|描写|注意)"),
}


def _text(value: Any) -> str:
    if isinstance(value, dict) and "value" in value:
        value = value["value"]
    return value if isinstance(value, str) else ""


def _hero(turn: dict[str, Any], zh: bool) -> str:
    hero = next((c for c in turn.get("characters") or [] if c.get("type") == "player" and c.get("name")), None)
    return hero["name"] if hero else ("来客" if zh else "The newcomer")


def _zh(turn: dict[str, Any]) -> bool:
    return str(turn.get("locale") or "").lower().startswith("zh")


def dice_check(turn: dict[str, Any]) -> dict[str, Any] | None:
    """This turn's check `{action, attribute?, modifier, difficulty, outcome}` or None."""
    context = _text((turn.get("inputs") or {}).get("check-results"))
    action = str(turn.get("player_message") or "").strip()
    if not context or not action or turn.get("action_kind") not in (None, "act"):
        return None
    zh = _zh(turn)
    match = RISKY["zh" if zh else "en"].search(action)
    pool = [int(d) for d in re.findall(r"#\d+ = (\d+)", context)]
    if not match or not pool:
        return None
    mods = re.findall(r"\(([A-Za-z][A-Za-z0-9_]*)\) ([+-]\d+)", context)
    modifier = int(mods[0][1]) if mods else 0
    roll = pool[0]
    total = roll + modifier
    outcome = "critical-success" if roll == 20 else "critical-failure" if roll == 1 else ("success" if total >= 12 else "failure")
    words = re.split(r"[，。,.;!?]", action)[0].strip()
    check = {"action": (words[:60] or match.group(0)), "modifier": modifier, "difficulty": "standard", "outcome": outcome}
    if mods:
        check["attribute"] = mods[0][0]
    return check


def tool_call(turn: dict[str, Any]) -> dict[str, Any] | None:
    """The `check.resolved` receipt to emit before the prose (once), else None."""
    if "emit-event" not in [t.get("name") for t in turn.get("tools") or []]:
        return None
    if any(r.get("name") == "emit-event" for r in turn.get("tool_results") or []):
        return None
    if _settled(turn):  # tabletop-rules owns this turn's check: the pool is not used
        return None
    check = dice_check(turn)
    if check is None:
        return None
    return {"name": "emit-event", "arguments": {"topic": "check.resolved", "data": {"checks": [check]}}}


def _settled(turn: dict[str, Any]) -> re.Match | None:
    return re.search(r"(?:Outcome|结果)[:：]\s*(critical-success|success|failure|critical-failure)",
                     _text((turn.get("inputs") or {}).get("tabletopCheck")))


def _cue(turn: dict[str, Any], zh: bool) -> str:
    context = _text((turn.get("inputs") or {}).get("storyEvent"))
    lines = [line.strip() for line in context.splitlines() if line.strip()]
    if len(lines) < 2:
        return ""
    brief = lines[1]
    parts = re.findall(r"[^。！？]+[。！？]?", brief) if zh else re.findall(r"[^.!?]+[.!?]?", brief)
    kept = [p.strip() for p in parts if p.strip() and not _INSTRUCTION["zh" if zh else "en"].match(p.strip())]
    return ("" if zh else " ").join(kept[:3])


def paragraphs(turn: dict[str, Any]) -> list[str]:
    """Paragraphs to add to this turn's prose (module docstring)."""
    zh = _zh(turn)
    lang = "zh" if zh else "en"
    hero = _hero(turn, zh)
    out: list[str] = []
    settled = _settled(turn)
    check = dice_check(turn)
    if settled:
        out.append(OUTCOME_TEXT[lang][settled.group(1)].format(hero=hero))
    elif check is not None:
        out.append(OUTCOME_TEXT[lang][check["outcome"]].format(hero=hero))
    cue = _cue(turn, zh)
    if cue:
        out.append(cue)
    return out


def story_with_inputs(turn: dict[str, Any], story) -> dict[str, Any]:
    """The story runtime's reply: the receipt call first when due, then ``story(turn)`` with the
    extra paragraphs placed before its closing paragraph."""
    call = tool_call(turn)
    if call is not None:
        return {"tool_calls": [call]}
    text = story(turn)
    extra = paragraphs(turn)
    if not extra:
        return {"text": text}
    parts = text.split("\n\n")
    return {"text": "\n\n".join([*parts[:-1], *extra, *parts[-1:]] if len(parts) > 1 else [*parts, *extra])}
