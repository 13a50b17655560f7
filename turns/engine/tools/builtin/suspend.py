"""suspend: stop the runtime until the player answers (spec 000, suspend).

Returns the sentinel `{_covelSuspend: true, reason, resumeSchema}`; the executor recognises it
only from this builtin (ToolCallOutcome.control == "suspend") and skips the rest of the batch
with `cancelled`. Persisting the suspension and resuming belong to the engine.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit.forms import FORM_FIELD_SCHEMA, form_fields_check, option_values, raise_issues
from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for

NAME = "suspend"
SUSPEND_SENTINEL_KEY = "_covelSuspend"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["reason", "fields"],
    "properties": {
        "reason": {"type": "string", "minLength": 1, "description": "Short explanation shown to the player."},
        "fields": {"type": "array", "minItems": 1, "items": FORM_FIELD_SCHEMA},
    },
    "additionalProperties": False,
}


def compile_resume_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of the answer object (spec table 字段类型 → 编译后的属性).

    text/textarea: string (+minLength 1 when required); number: number with minimum/maximum,
    no step; checkbox: boolean; select: string enum of option values (labels dropped);
    every type: default when defaultValue is given. Root: object, additionalProperties false,
    required only when non-empty.
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in fields:
        kind = field["type"]
        prop: dict[str, Any] = {"title": field["label"]}
        if kind in ("text", "textarea"):
            prop["type"] = "string"
            if field.get("required"):
                prop["minLength"] = 1
        elif kind == "number":
            prop["type"] = "number"
            if "min" in field:
                prop["minimum"] = field["min"]
            if "max" in field:
                prop["maximum"] = field["max"]
        elif kind == "checkbox":
            prop["type"] = "boolean"
        else:
            prop["type"] = "string"
            prop["enum"] = option_values(field)
        if "defaultValue" in field:
            prop["default"] = field["defaultValue"]
        properties[field["name"]] = prop
        if field.get("required"):
            required.append(field["name"])
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    raise_issues(form_fields_check(args["fields"]))
    content = {
        SUSPEND_SENTINEL_KEY: True,
        "reason": args["reason"],
        "resumeSchema": compile_resume_schema(args["fields"]),
    }
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = "已挂起，等待玩家回答。"
    else:
        summary = "Suspended: waiting for the player's answer."
    return ToolResult(content=content, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Pause this runtime and ask the player for input with form fields; resumes with the answer.",
        parameters=PARAMETERS,
        execute=_execute,
    )
