"""generate-scene-prompts: the recap, the open decision and 3-6 ready-to-send player lines of
this moment (output contract scene-prompts@1; the host shows the prompts in stage.choices@1).

Stages one plugin.data.batch in the `scenes` namespace — `latest` and `turn-<n>`, each
`{scene, recap, decision, prompts: [{text, kind}], turn}` — and a `scene-prompts.block` ui block.
Refused (invalid-input, nothing staged): duplicate lines, a single kind for every line, a line
that only repeats the decision.
"""

from __future__ import annotations

import unicodedata
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

NAME = "generate-scene-prompts"
NAMESPACE = "scenes"
LATEST_KEY = "latest"
KINDS = ("observe", "ask", "act", "social")
UI_PART_TYPE = "scene-prompts.block"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["scene", "recap", "decision", "prompts"],
    "properties": {
        "scene": {"type": "string", "minLength": 1, "maxLength": 60, "description": "Where things stand, 2-8 words (zh: 4-16 characters)."},
        "recap": {"type": "string", "minLength": 1, "maxLength": 600, "description": "1-3 sentences of confirmed earlier facts that matter now."},
        "decision": {"type": "string", "minLength": 1, "maxLength": 300, "description": "The question the player is answering now."},
        "prompts": {
            "type": "array",
            "minItems": 3,
            "maxItems": 6,
            "description": "3-6 lines the player can send unchanged (first person or imperative), at least two kinds.",
            "items": {
                "type": "object",
                "required": ["text", "kind"],
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 160},
                    "kind": {"enum": list(KINDS)},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split()).strip(" .。!！?？")


def _check(args: dict[str, Any]) -> str | None:
    """The first rule the arguments break (a message naming the field), else None."""
    for field in ("scene", "recap", "decision"):
        if not args[field].strip():
            return f"{field}: must not be blank"
    texts = [_norm(p["text"]) for p in args["prompts"]]
    if any(not t for t in texts):
        return "prompts: a line is blank"
    dupes = sorted({p["text"].strip() for p, t in zip(args["prompts"], texts) if texts.count(t) > 1})
    if dupes:
        return f"prompts: the same line appears twice ({'; '.join(dupes)}); write distinct lines"
    if len({p["kind"] for p in args["prompts"]}) < 2:
        return "prompts: use at least two different kinds (observe, ask, act, social)"
    decision = _norm(args["decision"])
    if decision in texts:
        return "prompts: a line only repeats the decision; write something the player can say or do"
    return None


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    problem = _check(args)
    if problem:
        raise ToolError(INVALID_INPUT, problem, hint=f"Fix the named field and call {NAME} again.")
    value = {
        "scene": args["scene"].strip(),
        "recap": args["recap"].strip(),
        "decision": args["decision"].strip(),
        "prompts": [{"text": p["text"].strip(), "kind": p["kind"]} for p in args["prompts"]],
        "turn": ctx.logical_turn,
    }
    entries = [{"namespace": NAMESPACE, "key": LATEST_KEY, "value": value}]
    if ctx.logical_turn is not None:
        entries.append({"namespace": NAMESPACE, "key": f"turn-{ctx.logical_turn}", "value": value})
    content: dict[str, Any] = {k: value[k] for k in ("scene", "recap", "decision", "prompts")}
    content["ui"] = [{"parts": [{"id": f"scene-prompts-{ctx.call_id}", "type": UI_PART_TYPE, "status": "success", "content": dict(content)}]}]
    count = len(value["prompts"])
    summary = f"场景快捷回复已生成：{count} 条。" if instruction_locale_for(ctx.locale) == ZH_CN else f"Scene prompts ready: {count} lines."
    return ToolResult(content=content, proposals=[Proposal(PLUGIN_DATA_BATCH, {"entries": entries})], summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Save this moment's scene label, recap, open decision and 3-6 lines the player can send as they are.",
        parameters=PARAMETERS,
        execute=_execute,
    )
