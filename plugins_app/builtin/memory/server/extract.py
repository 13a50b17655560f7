"""memory/extract: the detached post-turn extraction (runtimes/extract/RUNTIME.md).

One model call (``ctx.model``, slot `plugin`) with the prompt of ``prompts/extract.<locale>.md``,
the block definitions in force, the current blocks and the source turn (the player's action and
the frozen story text). The model answers with one ``update-memory-blocks`` call
``{updates: [{label, content}], facts: [{text}]}``; an empty call means nothing changed. Updates
of unknown labels are dropped, contents are cut to their block's maxChars, at most
MAX_FACTS_PER_TURN facts are kept. A reply without the call is asked again once; a second miss
fails the runtime (nothing is written; the job is `failed`, the next turn runs without it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import blocks as B

TOOL = "update-memory-blocks"
PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
#: Story characters of the source turn sent to the model.
STORY_CHARS = 6000

TOOL_DEFINITION = {
    "name": TOOL,
    "description": "Commit this turn's memory: the new full content of every block the turn changed, and single facts worth finding again later.",
    "parameters": {
        "type": "object",
        "properties": {
            "updates": {"type": "array", "maxItems": 12, "items": {
                "type": "object", "required": ["label", "content"],
                "properties": {"label": {"type": "string", "description": "A label from <memory-definitions>."},
                               "content": {"type": "string", "description": "The block's complete new content."}},
                "additionalProperties": False}},
            "facts": {"type": "array", "maxItems": B.MAX_FACTS_PER_TURN, "items": {
                "type": "object", "required": ["text"],
                "properties": {"text": {"type": "string", "minLength": 1, "maxLength": B.MAX_FACT_CHARS}},
                "additionalProperties": False}},
        },
        "required": ["updates", "facts"],
        "additionalProperties": False,
    },
}


def system_prompt(locale: str | None) -> str:
    name = "extract.zh-CN.md" if B.is_zh(locale) else "extract.en-US.md"
    return (PROMPTS / name).read_text(encoding="utf-8").strip()


def _story(ctx) -> str:
    value = (ctx.inputs or {}).get("narrative")
    if isinstance(value, dict):
        value = value.get("narrativeOutput") or value.get("value") or ""
    if not value:  # a retried or manual run: the newest committed story turn
        history = ctx.history()
        last = history[-1]["turnId"] if history else None
        value = "\n\n".join(h["text"] for h in history if h["turnId"] == last and h["role"] == "assistant")
    return str(value or "")[-STORY_CHARS:]


def user_message(definitions: list[dict[str, Any]], current: dict[str, Any], *, locale: str | None,
                 player_message: str | None, story: str) -> str:
    """The extraction call's user message: definitions, current blocks and the source turn, in tags
    the prompt names."""
    defs = [{"label": d["label"], "displayName": B.localized(d.get("displayName"), locale),
             "extractionHint": B.localized(d.get("extractionHint"), locale), "maxChars": B.max_chars(d)}
            for d in definitions]
    blocks = {d["label"]: (current.get(d["label"]) or {}).get("content", "") for d in definitions}
    return (f"<memory-definitions>\n{json.dumps(defs, ensure_ascii=False, indent=1)}\n</memory-definitions>\n\n"
            f"<current-blocks>\n{json.dumps(blocks, ensure_ascii=False, indent=1)}\n</current-blocks>\n\n"
            f"<player-action>\n{player_message or ''}\n</player-action>\n\n"
            f"<story-turn>\n{story}\n</story-turn>")


def _answer(reply: dict[str, Any]) -> dict[str, Any] | None:
    for call in reply.get("toolCalls") or []:
        if call.get("name") == TOOL:
            return call.get("arguments") or {}
    return None


def handle(ctx) -> dict[str, Any]:
    """Run one extraction (module docstring). Returns ``{"updated": [label], "facts": n}``."""
    world = ctx.plugin_data.get(B.DEFINITIONS_NAMESPACE, B.WORLD_KEY)
    definitions = B.definitions_effective(world, [a for a in ctx.services.call(B.SERVICE) if a["pluginId"] != ctx.plugin_id])
    current = ctx.plugin_data.list(B.BLOCKS_NAMESPACE)
    story = _story(ctx)
    if not story.strip():
        return {"updated": [], "facts": 0, "skipped": "no story text in the source turn"}
    messages = [{"role": "system", "content": system_prompt(ctx.locale)},
                {"role": "user", "content": user_message(definitions, current, locale=ctx.locale,
                                                         player_message=ctx.player_message, story=story)}]
    reply = ctx.model.complete(messages, tools=[TOOL_DEFINITION], tool_choice={"name": TOOL})
    answer = _answer(reply)
    if answer is None:
        again = ("只调用一次 update-memory-blocks 来提交结果；没有变化就传空数组。" if B.is_zh(ctx.locale)
                 else f"Submit the result with exactly one {TOOL} call; pass empty arrays when nothing changed.")
        messages += [{"role": "assistant", "content": reply.get("text") or ""}, {"role": "user", "content": again}]
        answer = _answer(ctx.model.complete(messages, tools=[TOOL_DEFINITION], tool_choice={"name": TOOL}))
    if answer is None:
        return {"status": "failed", "error": {"code": "memory_extraction_incomplete",
                                              "message": f"the model did not call {TOOL}"}}
    by_label = {d["label"]: d for d in definitions}
    updated = []
    for item in answer.get("updates") or []:
        if not isinstance(item, dict) or item.get("label") not in by_label or not isinstance(item.get("content"), str):
            continue
        label = item["label"]
        old = (current.get(label) or {}).get("content") if isinstance(current.get(label), dict) else None
        block = B.block_make(by_label[label], item["content"], ctx.locale)
        if block["content"] != old:
            ctx.plugin_data.set(B.BLOCKS_NAMESPACE, label, block)
            updated.append(label)
    facts = 0
    known = {str(v.get("text")) for v in ctx.plugin_data.list(B.FACTS_NAMESPACE).values() if isinstance(v, dict)}
    for item in (answer.get("facts") or [])[:B.MAX_FACTS_PER_TURN]:
        text = str(item.get("text") or "").strip()[:B.MAX_FACT_CHARS] if isinstance(item, dict) else ""
        if text and text not in known:
            known.add(text)
            facts += 1
            ctx.plugin_data.set(B.FACTS_NAMESPACE, f"t{ctx.logical_turn:05d}-{facts}", {"turn": ctx.logical_turn, "text": text})
    return {"updated": updated, "facts": facts}
