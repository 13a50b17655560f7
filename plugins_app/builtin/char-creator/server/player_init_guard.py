"""Guard of char-creator/player-init (spec 000, 开场角色表单: "player-init 的表单提交由 guard 直接生成
同类 proposal").

- the player answered the `char-creation` form this turn → stage the player character
  (name from `characterName`; the schema's string name attributes take it too; world defaults
  merged, defaults that break their own type skipped; submitted values no longer valid for the
  attribute dropped) and return `preGameDone: true` without a model call;
- a player character already exists → `preGameDone: true`;
- the form is still waiting for the player → skip;
- otherwise None: the agent emits the form.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import character_attr_issues, merge_schema_defaults, word_id

from .character_form import DEFAULT_FORM_ID
from .player_name import NAME_FIELD

NAME_ATTRIBUTE_IDS = ("name", "characterName", "playerName", "姓名")


def player_character_payload(values: dict[str, Any], schema: dict[str, Any] | None, taken_ids: set[str],
                             description: str = "") -> dict[str, Any]:
    """character.upsert payload of the new player character from the form's values."""
    name = str(values[NAME_FIELD]).strip()
    attributes = [a for a in (schema or {}).get("attributes") or [] if isinstance(a, dict) and "id" in a]
    fields: dict[str, Any] = {}
    for attr in attributes:
        if attr["id"] in values and not character_attr_issues(attr, values[attr["id"]], attr["id"]):
            fields[attr["id"]] = values[attr["id"]]
        if attr["id"] in NAME_ATTRIBUTE_IDS and attr.get("type") == "string":
            fields[attr["id"]] = name
    fields = merge_schema_defaults(fields, attributes)
    payload: dict[str, Any] = {"id": word_id("player", name, taken_ids), "name": name, "type": "player", "fields": fields, "version": 1}
    if description:
        payload["description"] = description
    return payload


def _answer(ctx) -> dict[str, Any] | None:
    for item in ctx.submissions:
        if item.get("interactionId") == DEFAULT_FORM_ID and item.get("pluginId", ctx.plugin_id) == ctx.plugin_id:
            if isinstance((item.get("values") or {}).get(NAME_FIELD), str):
                return item
    return None


def guard(ctx) -> dict[str, Any] | None:
    characters = ctx.world.characters()
    answer = _answer(ctx)
    if answer is not None:
        taken = {c["id"] for c in characters}
        payload = player_character_payload(answer["values"], ctx.world.character_schema(), taken,
                                           str(answer.get("filledNarrative") or ""))
        return {
            "preGameDone": True,
            "formId": DEFAULT_FORM_ID,
            "characterId": payload["id"],
            "characterName": payload["name"],
            "proposals": [{"type": "character.upsert", "payload": payload}],
        }
    player = next((c for c in characters if c.get("type") == "player"), None)
    if player is not None:
        return {"preGameDone": True, "characterId": player["id"], "characterName": player["name"]}
    if any(i.get("interactionId") == DEFAULT_FORM_ID for i in ctx.pending_interactions):
        return {"skip": "the character form is waiting for the player"}
    return None
