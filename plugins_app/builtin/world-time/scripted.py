"""Offline `scripted` model behaviour of world-time/advance: the time this turn's action spends
(narrator/story_kit.time_step: talk = the world's defaultStep, a search 1.5×, going somewhere 2×,
crossing water 4× — the same figure the scripted narrator shows as the time after the turn), with
a reason in the session locale naming what took the time (random worlds: only a reason)."""

from __future__ import annotations

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


REASONS = {
    "say": ("几句问答花去了一点时间。", "A few questions and answers took a little time."),
    "search": ("细细查看花去了些工夫。", "Looking closely took a while."),
    "travel": ("赶路花去了不少时间。", "Getting there took time."),
    "water": ("渡水往返花去了很长时间。", "Crossing the water took a long time."),
    "none": ("本回合的交谈与走动花去了一些时间。", "This turn's talk and movement took a little time."),
}


def step_of(turn: dict[str, Any], default_step: int) -> tuple[int, str]:
    """(ticks, reason key) for this turn's player action."""
    actions = kit().actions_of(str(turn.get("player_message") or ""))
    if not actions:
        return default_step, "none"
    act = actions[0]
    kind = str(turn.get("action_kind") or "") if act["kind"] == "say" and turn.get("action_kind") else act["kind"]
    amount = kit().time_step(act["text"], kind, default_step)
    if amount == default_step:
        return amount, "say" if kind == "say" else "none"
    ratio = amount / default_step if default_step else 1
    return amount, "water" if ratio >= 4 else "travel" if ratio >= 2 else "search"


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "advance-world-time" not in names or turn.get("tool_results"):
        return None
    zh = str(turn.get("locale") or "").lower().startswith("zh")
    current = (turn.get("inputs") or {}).get("currentTime") or {}
    evolution = ((current.get("definition") or {}).get("evolution")) or {}
    if evolution.get("mode") == "random":
        return {"tool_calls": [{"name": "advance-world-time", "arguments": {"reason": REASONS["none"][0 if zh else 1]}}]}
    amount, why = step_of(turn, int(evolution.get("defaultStep", 0)))
    amount = min(amount, int(evolution.get("maxStep") or amount))
    args: dict[str, Any] = {"amount": amount, "reason": REASONS[why][0 if zh else 1]}
    if evolution.get("mode") == "bidirectional":
        args["direction"] = "forward"
    return {"tool_calls": [{"name": "advance-world-time", "arguments": args}]}
