"""dice-check/roller function runtime (pre-turn): the turn's pool and check rules (action-check@1)."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import dice


def handle(ctx) -> dict[str, Any]:
    pool = dice.pool(ctx.session_id, ctx.logical_turn)
    hero = next((c for c in ctx.world.characters() if c.get("type") == "player"), None)
    schema = ctx.world.character_schema() or {}
    labels = {a["id"]: str(a.get("name") or a["id"]) for a in schema.get("attributes") or [] if isinstance(a, dict) and "id" in a}
    tabletop = isinstance(ctx.inputs.get("tabletopCheck"), dict)
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    ctx.plugin_data.set(dice.ROLLS, f"turn-{ctx.logical_turn}", {"dice": pool, "turn": ctx.logical_turn, "tabletopReceipt": tabletop})
    return {"dice": pool, "checkContext": dice.check_context(pool, dice.modifiers(hero, schema), labels, zh, tabletop)}
