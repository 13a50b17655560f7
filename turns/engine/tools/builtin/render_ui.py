"""render-ui: one ui.render block made of parts with their own status (spec 000, render-ui)."""

from __future__ import annotations

import copy
from typing import Any

from plugins_app.toolkit.forms import raise_issues
from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for
from plugins_app.toolkit.proposals import UI_PART_SCHEMA

NAME = "render-ui"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["parts"],
    "properties": {
        "parts": {"type": "array", "minItems": 1, "items": UI_PART_SCHEMA},
        "layout": {"enum": ["stream", "split", "overlay"]},
    },
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    seen: set[str] = set()
    issues = []
    for i, part in enumerate(args["parts"]):
        if part["id"] in seen:
            issues.append(f'parts[{i}].id: "{part["id"]}" is used by another part')
        seen.add(part["id"])
    raise_issues(issues)
    block: dict[str, Any] = {"parts": copy.deepcopy(args["parts"])}
    if "layout" in args:
        block["layout"] = args["layout"]
    count = len(args["parts"])
    summary = f"已渲染 {count} 个 UI part。" if instruction_locale_for(ctx.locale) == ZH_CN else f"Rendered {count} UI part(s)."
    return ToolResult(content={"ui": [block]}, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Render a UI block of parts (text, images, cards, audio), each with its own status.",
        parameters=PARAMETERS,
        execute=_execute,
    )
