"""create-choices: a list of options for the player (spec 000, create-choices)."""

from __future__ import annotations

import copy
from typing import Any

from plugins_app.toolkit.forms import ACTION_KIND_SCHEMA, action_kind_check, raise_issues
from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for

NAME = "create-choices"
DEFAULT_ACTION_KIND = "say"
DEFAULT_NARRATIVE_TEMPLATE = "{{selectedLabel}}"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["choiceId", "prompt", "choices"],
    "properties": {
        "choiceId": {"type": "string", "minLength": 1},
        "prompt": {"type": "string", "minLength": 1, "description": 'Lead-in text, e.g. "What do you do?"'},
        "choices": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "required": ["id", "label"],
                "properties": {
                    "id": {"type": "string", "minLength": 1},
                    "label": {"type": "string", "minLength": 1},
                    "description": {"type": "string"},
                    "category": {"type": "string", "description": "safe | aggressive | creative | wild ..."},
                },
                "additionalProperties": False,
            },
        },
        "actionKind": ACTION_KIND_SCHEMA,
    },
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    action_kind = args.get("actionKind", DEFAULT_ACTION_KIND)
    issues = action_kind_check(action_kind)
    seen: set[str] = set()
    for i, choice in enumerate(args["choices"]):
        if choice["id"] in seen:
            issues.append(f'choices[{i}].id: "{choice["id"]}" is used by another choice')
        seen.add(choice["id"])
    raise_issues(issues)
    interaction = {
        "type": "choice",
        "interactionId": args["choiceId"],
        "prompt": args["prompt"],
        "choices": copy.deepcopy(args["choices"]),
        "narrativeTemplate": DEFAULT_NARRATIVE_TEMPLATE,
        "actionKind": action_kind,
        "sourcePluginId": ctx.plugin_id,
    }
    count = len(args["choices"])
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"已向玩家给出 {count} 个选项（{args['choiceId']}）。"
    else:
        summary = f"Offered {count} choices to the player ({args['choiceId']})."
    return ToolResult(content={"created": True, "interaction": interaction}, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Offer the player a list of choices (at least 2) at a decision point.",
        parameters=PARAMETERS,
        execute=_execute,
    )
