"""history-compaction/compact: budget admission and one summary call (PLUGIN.md).

Admission: the turns after the rolling summary's ``throughTurnId`` (all turns before the first
compaction) are "uncovered". When they hold more than ``budgetChars`` characters or more than
MAX_UNCOVERED_TURNS turns, every uncovered turn except the newest ``protectTurns`` is compacted.
The model answers with one ``submit-history-summary`` call ``{summary, segment}``; the summary is
cut to MAX_SUMMARY_CHARS from its end. Failures write nothing and leave a
``context.compaction.failed`` trace row; the runtime itself succeeds (the turn lost nothing).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

TOOL = "submit-history-summary"
ROLLING_NAMESPACE, ROLLING_KEY = "rolling", "current"
SUMMARIES_NAMESPACE = "summaries"
PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
DEFAULT_PROTECT_TURNS = 6
DEFAULT_BUDGET_CHARS = 12000
MAX_UNCOVERED_TURNS = 20
MAX_SUMMARY_CHARS = 2000
MAX_SEGMENT_CHARS = 800
#: Characters of older turns sent in one call (the oldest are summarized first if there are more).
MAX_TRANSCRIPT_CHARS = 40000
COMPACTION_FAILED = "context.compaction.failed"

TOOL_DEFINITION = {
    "name": TOOL,
    "description": "Submit the merged rolling summary and the segment of the turns compacted now.",
    "parameters": {
        "type": "object",
        "required": ["summary", "segment"],
        "properties": {
            "summary": {"type": "string", "minLength": 1, "maxLength": 4000,
                        "description": "Previous summary and the older turns merged, oldest first."},
            "segment": {"type": "string", "minLength": 1, "maxLength": 1600,
                        "description": "Only the turns compacted now."},
        },
        "additionalProperties": False,
    },
}


def _int_setting(settings: dict[str, Any], key: str, default: int) -> int:
    value = (settings or {}).get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def _zh(locale: str | None) -> bool:
    return str(locale or "").lower().startswith("zh")


def plan(history: list[dict[str, Any]], through: str | None, *, protect: int, budget_chars: int) -> list[str]:
    """The turn ids to compact now (oldest first; empty when within budget)."""
    order: list[str] = []
    for row in history:
        if not order or order[-1] != row["turnId"]:
            order.append(row["turnId"])
    start = order.index(through) + 1 if through in order else 0
    uncovered = order[start:]
    chars = sum(len(row["text"]) for row in history if row["turnId"] in set(uncovered))
    if len(uncovered) <= protect or (chars <= budget_chars and len(uncovered) <= MAX_UNCOVERED_TURNS):
        return []
    return uncovered[:-protect]


def transcript(history: list[dict[str, Any]], turn_ids: list[str], zh: bool) -> tuple[str, list[str]]:
    """The older turns as text, within MAX_TRANSCRIPT_CHARS (oldest turns first); returns the text
    and the turn ids it holds."""
    wanted, parts, used, total = set(turn_ids), [], [], 0
    for turn_id in turn_ids:
        rows = [r for r in history if r["turnId"] == turn_id and turn_id in wanted]
        block = "\n".join((("玩家：" if zh else "Player: ") if r["role"] == "user" else "") + r["text"] for r in rows)
        if used and total + len(block) > MAX_TRANSCRIPT_CHARS:
            break
        parts.append(block)
        used.append(turn_id)
        total += len(block)
    return "\n\n---\n\n".join(parts), used


def _failed(ctx, reason: str) -> dict[str, Any]:
    ctx.trace(COMPACTION_FAILED, {"reason": reason[:500]})
    return {"compacted": False, "failed": reason[:500]}


def handle(ctx) -> dict[str, Any]:
    """Compact when over budget (module docstring). Returns ``{"compacted": bool, ...}``."""
    protect = _int_setting(ctx.settings, "protectTurns", DEFAULT_PROTECT_TURNS)
    budget = _int_setting(ctx.settings, "budgetChars", DEFAULT_BUDGET_CHARS)
    rolling = ctx.plugin_data.get(ROLLING_NAMESPACE, ROLLING_KEY) or {}
    history = ctx.history()
    turn_ids = plan(history, rolling.get("throughTurnId"), protect=protect, budget_chars=budget)
    if not turn_ids:
        return {"compacted": False}
    zh = _zh(ctx.locale)
    text, turn_ids = transcript(history, turn_ids, zh)
    prompt = (PROMPTS / ("compact.zh-CN.md" if zh else "compact.en-US.md")).read_text(encoding="utf-8").strip()
    user = (f"<previous-summary>\n{rolling.get('text') or ''}\n</previous-summary>\n\n"
            f"<older-turns>\n{text}\n</older-turns>")
    try:
        reply = ctx.model.complete([{"role": "system", "content": prompt}, {"role": "user", "content": user}],
                                   tools=[TOOL_DEFINITION], tool_choice={"name": TOOL})
    except Exception as exc:  # the host's RuntimeFailure (model error, abort): reported, nothing written
        return _failed(ctx, f"model call failed: {getattr(exc, 'message', None) or exc}")
    call = next((c for c in reply.get("toolCalls") or [] if c.get("name") == TOOL), None)
    args = (call or {}).get("arguments") or {}
    summary, segment = str(args.get("summary") or "").strip(), str(args.get("segment") or "").strip()
    if not summary or not segment:
        return _failed(ctx, f"the model did not call {TOOL} with a summary and a segment")
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    count = int(rolling.get("turnCount") or 0) + len(turn_ids)
    ctx.plugin_data.set(ROLLING_NAMESPACE, ROLLING_KEY, {"text": summary[:MAX_SUMMARY_CHARS], "throughTurnId": turn_ids[-1],
                                                         "turnCount": count, "updatedAt": now})
    seq = len(ctx.plugin_data.list(SUMMARIES_NAMESPACE)) + 1
    ctx.plugin_data.set(SUMMARIES_NAMESPACE, f"s{seq:05d}", {"text": segment[:MAX_SEGMENT_CHARS], "fromTurnId": turn_ids[0],
                                                            "throughTurnId": turn_ids[-1], "turnCount": len(turn_ids),
                                                            "createdAt": now})
    return {"compacted": True, "turns": len(turn_ids), "throughTurnId": turn_ids[-1]}
