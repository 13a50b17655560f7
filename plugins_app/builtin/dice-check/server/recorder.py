"""dice-check/recorder function runtime (background event job on `check.resolved`): settle the
receipt's items against the pool the roller stored for the same turn (dice.settle)."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import dice


def handle(ctx) -> dict[str, Any]:
    trigger = ctx.trigger_event or {}
    payload = trigger.get("payload") or {}
    turn = ctx.logical_turn
    rolled = ctx.plugin_data.get(dice.ROLLS, f"turn-{turn}")
    if not isinstance(rolled, dict) or not isinstance(rolled.get("dice"), list):
        return {"recorded": 0, "skipped": "no dice pool for this turn"}
    if rolled.get("tabletopReceipt"):
        return {"recorded": 0, "skipped": "tabletop-rules settled this turn's check"}
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    items = payload.get("checks") if isinstance(payload.get("checks"), list) else []
    checks: list[dict[str, Any]] = []
    for index, item in enumerate(items[: len(rolled["dice"])]):
        settled = dice.settle(item, int(rolled["dice"][index])) if isinstance(item, dict) else None
        if settled is None:
            continue
        shown = {**dice.display(settled, zh), "turn": turn, "order": (turn or 0) * 10 + index, "die": index + 1}
        ctx.plugin_data.set(dice.CHECKS, f"{turn}-{index}", shown)
        checks.append(shown)
    if not checks:
        return {"recorded": 0, "skipped": "no valid check in the receipt"}
    source_turn = (getattr(ctx, "origin", None) or {}).get("sourceTurnId") if isinstance(getattr(ctx, "origin", None), dict) else None
    ctx.plugin_data.set(dice.MESSAGE, f"turn-{turn}", {"__turnId": source_turn, "turn": turn, "checks": checks})
    return {"recorded": len(checks), "checks": checks}
