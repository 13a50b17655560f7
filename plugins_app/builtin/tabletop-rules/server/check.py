"""tabletop-rules/check function runtime (pre-turn): settle the attribute check the player asks
for (rules.check_request), reusing this turn's stored receipt on a retry (no reroll)."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import rules as R


def handle(ctx) -> dict[str, Any]:
    rules = ctx.inputs.get("rules")
    if not isinstance(rules, dict):
        rules = R.rules_of(ctx.plugin_data.list(R.NAMESPACE))
        if rules is not None:  # the same attributes and bases the creation step offered
            rules = R.rules_for_schema(rules, ctx.world.character_schema(), ctx.locale)
    text = str(ctx.player_message or "")
    request = R.check_request(text, rules) if rules and text else None
    if request is None:
        return {"receipt": None, "checkContext": ""}
    key = f"turn-{ctx.logical_turn}"
    receipt = ctx.plugin_data.get(R.RECEIPTS, key)
    attr, difficulty = request
    if not (isinstance(receipt, dict) and receipt.get("attribute") == attr["id"]):
        hero = next((c for c in ctx.world.characters() if c.get("type") == "player"), None) or {}
        value = (hero.get("fields") or {}).get(attr["id"], attr["base"])
        value = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else int(attr["base"])
        receipt = R.settle(ctx.session_id, ctx.logical_turn, attr, value, difficulty)
        ctx.plugin_data.set(R.RECEIPTS, key, receipt)
    return {"receipt": receipt, "checkContext": R.check_context(receipt, instruction_locale_for(ctx.locale) == ZH_CN)}
