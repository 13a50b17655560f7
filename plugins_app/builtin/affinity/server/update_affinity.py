"""update-affinity: apply this turn's player→NPC affinity changes in one batch (spec 000 overview:
unknown names start at 0, scores accumulate across turns and stay in [-100, 100]).

Records live in this plugin's `affinity` namespace: `{id, name, score, tier, history: [{turn,
delta, reason}] (last 10)}`, matched by name (NFKC, case-folded, spaces and interpuncts ignored). A new record for a session
character (matched by name or alias) takes that character's id and canonical name.
One plugin.data.batch per call.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import (
    INVALID_INPUT,
    PLUGIN_DATA_BATCH,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    normalize_name,
    tool,
    word_id,
)

NAME = "update-affinity"
NAMESPACE = "affinity"
SCORE_MIN, SCORE_MAX = -100, 100
MAX_CHANGES = 5
MAX_DELTA = 20
HISTORY_KEEP = 10

#: (lowest score, tier id, en label, zh label), highest first.
TIERS = (
    (85, "devoted", "Devoted", "倾心"),
    (60, "close", "Close", "亲近"),
    (20, "friendly", "Friendly", "友好"),
    (-19, "neutral", "Neutral", "中立"),
    (-59, "cold", "Cold", "冷淡"),
    (SCORE_MIN, "hostile", "Hostile", "敌视"),
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["changes"],
    "properties": {
        "changes": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_CHANGES,
            "items": {
                "type": "object",
                "required": ["name", "delta", "reason"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 80, "description": "The NPC's canonical name."},
                    "delta": {
                        "type": "integer",
                        "minimum": -MAX_DELTA,
                        "maximum": MAX_DELTA,
                        "not": {"const": 0},
                        "description": "This turn's change: everyday ±1..5, major events up to ±20; never 0.",
                    },
                    "reason": {"type": "string", "minLength": 1, "maxLength": 160, "description": "One sentence from the player's perspective."},
                },
                "additionalProperties": False,
            },
        }
    },
    "additionalProperties": False,
}


def tier_of(score: int) -> tuple[str, str, str]:
    """(tier id, en label, zh label) of a cumulative score."""
    for low, tier_id, en, zh in TIERS:
        if score >= low:
            return tier_id, en, zh
    return TIERS[-1][1:]


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    rows = ctx.state.plugin_data_list(ctx.plugin_id, NAMESPACE)
    by_name = {normalize_name(v["name"]): k for k, v in rows.items() if isinstance(v, dict) and isinstance(v.get("name"), str)}
    seen: dict[str, int] = {}
    for i, change in enumerate(args["changes"]):
        key = normalize_name(change["name"])
        if key in seen:
            raise ToolError(
                INVALID_INPUT,
                f'changes[{i}]: "{change["name"]}" already appears in changes[{seen[key]}]; merge them into one delta and one reason',
                hint="Send one change per NPC.",
            )
        seen[key] = i
    is_zh = instruction_locale_for(ctx.locale) == ZH_CN
    entries = []
    lines = []
    results = []
    taken = set(rows)
    known = {
        normalize_name(n): c for c in ctx.state.characters() if c.type != "player" for n in (c.name, *c.aliases)
    }
    for change in args["changes"]:
        key = by_name.get(normalize_name(change["name"]))
        if key is None:
            character = known.get(normalize_name(change["name"]))
            if character is not None and character.id not in taken:
                key, name = character.id, character.name  # a session character keeps its id and name
            else:
                key, name = word_id("npc", change["name"], taken), change["name"].strip()
            taken.add(key)
            by_name[normalize_name(name)] = key
            record: dict[str, Any] = {"id": key, "name": name, "score": 0, "history": []}
        else:
            record = dict(rows[key])
        before = int(record.get("score", 0))
        after = max(SCORE_MIN, min(SCORE_MAX, before + change["delta"]))
        tier_id, en, zh = tier_of(after)
        history = list(record.get("history") or []) + [
            {"turn": ctx.logical_turn, "delta": after - before, "reason": change["reason"]}
        ]
        record.update({"score": after, "tier": tier_id, "history": history[-HISTORY_KEEP:]})
        entries.append({"namespace": NAMESPACE, "key": key, "value": record})
        results.append({"id": key, "name": record["name"], "score": after, "tier": tier_id})
        lines.append(f"{record['name']}: {before} → {after} ({zh if is_zh else en})")
    header = f"好感度已更新（{len(lines)} 人）：" if is_zh else f"Affinity updated ({len(lines)}):"
    return ToolResult(
        content={"updated": results},
        proposals=[Proposal(PLUGIN_DATA_BATCH, {"entries": entries})],
        summary=header + "\n" + "\n".join(lines),
    )


def build() -> Tool:
    return tool(
        name=NAME,
        description=(
            "Apply this turn's affinity changes between the player and named NPCs they explicitly interacted with "
            "(at most 5, one per NPC). Give the change (delta), not the total; the tool accumulates and clamps to [-100, 100]."
        ),
        parameters=PARAMETERS,
        execute=_execute,
    )
