"""runtime-done: the agent's end-of-runtime signal (spec 000, runtime-done).

Only a successful call of this builtin ends the loop (ToolCallOutcome.control == "done");
the same field returned by another tool is ordinary data. reason stays in the trace only.
"""

from __future__ import annotations

from typing import Any

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from turns.engine.tools.envelope import DONE_SUMMARY
from plugins_app.toolkit.locale import instruction_locale_for

NAME = "runtime-done"
DONE_SENTINEL_KEY = "_covelDone"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "Optional note kept in the trace."}},
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    content: dict[str, Any] = {DONE_SENTINEL_KEY: True}
    if "reason" in args:
        content["reason"] = args["reason"]
    return ToolResult(content=content, summary=DONE_SUMMARY[instruction_locale_for(ctx.locale)])


def build() -> Tool:
    return tool(
        name=NAME,
        description=(
            "Call last, once every needed tool call has succeeded or there is nothing to do: "
            "ends this runtime. It records no data."
        ),
        parameters=PARAMETERS,
        execute=_execute,
    )
