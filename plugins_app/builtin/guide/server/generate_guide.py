"""generate-guide: recap, current decision and quick replies in the player's voice, written
atomically (spec 000 overview; output contract scene-prompts@1).

Stages one plugin.data write: `guides/latest` holds `{scene, recap, decision, prompts: [{text, kind}],
turn}`; a ui block shows it in the message stream, and that block is each turn's guide on record
(the view's and /messages' ui messages), so no per-turn copy is kept in plugin data (issue 18: a
copy nothing read, written and pruned every turn and carried by every session view). The content
is the scene-prompts@1 output.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import (
    INVALID_INPUT,
    PLUGIN_DATA,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    tool,
)

NAME = "generate-guide"
NAMESPACE = "guides"
LATEST_KEY = "latest"
PROMPT_KINDS = ("observe", "ask", "act", "social")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["scene", "recap", "decision", "prompts"],
    "properties": {
        "scene": {"type": "string", "minLength": 1, "maxLength": 40, "description": "The scene or decision point in 2-6 words."},
        "recap": {"type": "string", "minLength": 1, "maxLength": 400, "description": "1-3 sentences of confirmed context relevant now."},
        "decision": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The one question the player now faces."},
        "prompts": {
            "type": "array",
            "minItems": 3,
            "maxItems": 6,
            "description": "3-6 short replies the player can send as-is, first person or imperative.",
            "items": {
                "type": "object",
                "required": ["text", "kind"],
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 120},
                    "kind": {"enum": list(PROMPT_KINDS)},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    texts = [p["text"].strip() for p in args["prompts"]]
    dupes = sorted({t for t in texts if texts.count(t) > 1})
    if dupes:
        raise ToolError(
            INVALID_INPUT,
            f"prompts: the same reply appears twice ({'; '.join(dupes)}); give distinct replies",
            hint="Fix the prompts and call generate-guide again.",
        )
    guide = {
        "scene": args["scene"].strip(),
        "recap": args["recap"].strip(),
        "decision": args["decision"].strip(),
        "prompts": [{"text": p["text"].strip(), "kind": p["kind"]} for p in args["prompts"]],
        "turn": ctx.logical_turn,
    }
    ui = [
        {
            "parts": [
                {"id": f"guide-{ctx.call_id}", "type": "guide.block", "status": "success", "content": guide}
            ]
        }
    ]
    content = {k: guide[k] for k in ("scene", "recap", "decision", "prompts")}
    content["ui"] = ui
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"指引已保存：{len(guide['prompts'])} 条快捷回复。"
    else:
        summary = f"Guide saved: {len(guide['prompts'])} quick replies."
    return ToolResult(content=content, proposals=[Proposal(PLUGIN_DATA, {"namespace": NAMESPACE, "key": LATEST_KEY, "value": guide})], summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Save the guide for this moment: scene, recap, the current decision and 3-6 quick replies.",
        parameters=PARAMETERS,
        execute=_execute,
    )
