"""create-notification: an Alert UI block, committed through ui.render (spec 000)."""

from __future__ import annotations

from typing import Any

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for

NAME = "create-notification"
LEVELS = ("info", "success", "warning", "error")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["level", "title", "message"],
    "properties": {
        "level": {"enum": list(LEVELS)},
        "title": {"type": "string", "minLength": 1},
        "message": {"type": "string", "minLength": 1},
    },
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    part = {
        "id": f"notification-{ctx.call_id}",
        "type": "alert",
        "status": "success",
        "content": {"level": args["level"], "title": args["title"], "message": args["message"]},
    }
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"已显示通知「{args['title']}」。"
    else:
        summary = f'Notification "{args["title"]}" shown.'
    return ToolResult(content={"ui": [{"parts": [part]}]}, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Show a notification (info, success, warning or error) in the message stream.",
        parameters=PARAMETERS,
        execute=_execute,
    )
