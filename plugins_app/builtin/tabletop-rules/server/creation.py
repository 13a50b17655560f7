"""tabletop-rules/creation function runtime (setup): the point-buy step of character creation.

- no rules (or none the world's character schema allows, rules.rules_for_schema) → done
  (`preGameDone`, `rules: null`);
- no player character yet → not done (char-creator's form comes first);
- the player answered `point-buy` this turn → the values go to the hero's fields
  (`character.upsert`), done;
- the hero already carries allocated values (`fields.tabletopAllocated`) → done;
- the form is waiting → not done; else the form is issued (create-form) and the step waits.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import rules as R


def _answer(ctx) -> dict[str, Any] | None:
    for item in ctx.submissions:
        if item.get("interactionId") == R.FORM_ID and item.get("pluginId", ctx.plugin_id) == ctx.plugin_id:
            return item
    return None


def handle(ctx) -> dict[str, Any]:
    rules = R.rules_of(ctx.plugin_data.list(R.NAMESPACE))
    if rules is not None:  # only what the world's character schema allows (bounds, abilities)
        rules = R.rules_for_schema(rules, ctx.world.character_schema(), ctx.locale)
    if rules is None:
        return {"preGameDone": True, "rules": None}
    hero = next((c for c in ctx.world.characters() if c.get("type") == "player"), None)
    if hero is None:
        return {"rules": rules, "waiting": "character"}
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    answer = _answer(ctx)
    if answer is not None:
        values = {a["id"]: int(answer["values"].get(a["id"], a["base"])) for a in rules["attributes"]}
        if R.point_buy_issue(values, rules, zh) is None:
            fields = {**(hero.get("fields") or {}), **values, "tabletopAllocated": True}
            payload = {"id": hero["id"], "name": hero["name"], "type": "player", "fields": fields}
            return {"preGameDone": True, "rules": rules, "allocated": values,
                    "proposals": [{"type": "character.upsert", "payload": payload}]}
    if (hero.get("fields") or {}).get("tabletopAllocated"):
        return {"preGameDone": True, "rules": rules}
    if any(i.get("interactionId") == R.FORM_ID for i in ctx.pending_interactions):
        return {"rules": rules, "waiting": "form"}
    fields = [{"type": "number", "name": a["id"], "label": str(a.get("label") or a["id"]), "required": True,
               "min": a["base"], "max": a["max"], "step": 1, "defaultValue": a["base"]} for a in rules["attributes"]]
    budget = int(rules.get("budget") or 0)
    ctx.tools.call("create-form", {
        "formId": R.FORM_ID,
        "title": "分配属性点" if zh else "Spend your points",
        "fields": fields,
        "submitLabel": "确定" if zh else "Confirm",
        "notice": f"共有 {budget} 点可以分配。" if zh else f"You have {budget} points to spend.",
        "narrativeTemplate": "我分配好了属性点。" if zh else "I have spent my points.",
        "validation": {"name": R.VALIDATOR, "data": rules},
    })
    return {"rules": rules, "waiting": "form"}
