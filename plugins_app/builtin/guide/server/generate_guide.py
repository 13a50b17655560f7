"""generate-guide: recap, current decision and quick replies in the player's voice, written
atomically (spec 000 overview; output contract scene-prompts@1).

Stages one plugin.data.batch: `guides/latest` and `guides/turn-<n>` hold
`{scene, recap, decision, prompts: [{text, kind}], turn}` (the last 4 turns are kept); a ui block shows it in the message
stream. The content is the scene-prompts@1 output.
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import (
    INVALID_INPUT,
    PLUGIN_DATA_BATCH,
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
#: Per-turn guides kept (``turn-<n>``): the batch that writes turn n deletes turn n - 4, so the
#: plugin's data stays bounded however long a session runs. Four, as the guide's own history
#: (``history.maxTurns``): each turn's guide is also in its message's ui block, and every row kept
#: here is read by every turn's snapshot and carried by the session view (issue 18).
TURNS_KEPT = 4
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
    entries = [{"namespace": NAMESPACE, "key": LATEST_KEY, "value": guide}]
    if ctx.logical_turn is not None:
        entries.append({"namespace": NAMESPACE, "key": f"turn-{ctx.logical_turn}", "value": guide})
        if ctx.logical_turn > TURNS_KEPT:
            entries.append({"namespace": NAMESPACE, "key": f"turn-{ctx.logical_turn - TURNS_KEPT}", "delete": True})
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
    return ToolResult(content=content, proposals=[Proposal(PLUGIN_DATA_BATCH, {"entries": entries})], summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Save the guide for this moment: scene, recap, the current decision and 3-6 quick replies.",
        parameters=PARAMETERS,
        execute=_execute,
    )
