"""create-form: a form the player fills in (spec 000, create-form)."""

from __future__ import annotations

import copy
from typing import Any

from plugins_app.toolkit.forms import (
    ACTION_KIND_SCHEMA,
    FORM_FIELD_SCHEMA,
    action_kind_check,
    form_fields_check,
    raise_issues,
)
from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for

NAME = "create-form"
DEFAULT_ACTION_KIND = "act"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["formId", "title", "fields", "submitLabel", "narrativeTemplate"],
    "properties": {
        "formId": {"type": "string", "minLength": 1, "description": "Unique form id."},
        "title": {"type": "string", "minLength": 1},
        "fields": {"type": "array", "minItems": 1, "items": FORM_FIELD_SCHEMA},
        "submitLabel": {"type": "string", "minLength": 1},
        "narrativeTemplate": {
            "type": "string",
            "description": "Sentence with {{fieldName}} placeholders; becomes the player's message.",
        },
        "validation": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}, "data": {}},
            "additionalProperties": False,
            "description": "A validator this plugin declared in contributes.forms and registered.",
        },
        "submitBehavior": {
            "type": "object",
            "properties": {"echoFilledNarrative": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "notice": {"type": "string", "description": "Shown above the fields when the form is re-issued."},
        "actionKind": ACTION_KIND_SCHEMA,
    },
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    issues = form_fields_check(args["fields"])
    action_kind = args.get("actionKind", DEFAULT_ACTION_KIND)
    issues += action_kind_check(action_kind)
    validation = args.get("validation")
    if validation is not None and validation["name"] not in ctx.state.form_validators(ctx.plugin_id):
        issues.append(
            f'validation.name: "{validation["name"]}" is not a form validator declared in '
            "contributes.forms and registered by this plugin"
        )
    raise_issues(issues)
    interaction: dict[str, Any] = {
        "type": "form",
        "interactionId": args["formId"],
        "title": args["title"],
        "fields": copy.deepcopy(args["fields"]),
        "submitLabel": args["submitLabel"],
        "narrativeTemplate": args["narrativeTemplate"],
        "actionKind": action_kind,
        "sourcePluginId": ctx.plugin_id,
    }
    for key in ("validation", "submitBehavior", "notice"):
        if key in args:
            interaction[key] = copy.deepcopy(args[key])
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"表单「{args['title']}」（{args['formId']}）已发给玩家，玩家提交后回答会进入下一回合。"
    else:
        summary = (
            f'Form "{args["title"]}" ({args["formId"]}) was sent to the player; '
            "the answer arrives in the next turn."
        )
    return ToolResult(content={"created": True, "interaction": interaction}, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Create a form for the player to fill in; the answer becomes the next player message.",
        parameters=PARAMETERS,
        execute=_execute,
    )
