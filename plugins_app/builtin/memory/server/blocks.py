"""Memory blocks: the definitions in force, the committed blocks, their prompt segment and edits.

A definition is `{label, displayName, extractionHint, icon?, maxChars?}` (schemas/
block-definitions.schema.json); `displayName` / `extractionHint` may be a string or a
`{locale: text}` map. A block is `{label, content, displayName, icon?, charCount, updatedAt}`
(schemas/blocks.schema.json). Pure functions: no host access, so the extraction runtime, the
prompt segment, the service and the RPC actions share them.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

DEFINITIONS_NAMESPACE = "definitions"
WORLD_KEY = "world"
BLOCKS_NAMESPACE = "blocks"
FACTS_NAMESPACE = "facts"
SERVICE = "memory.block-definitions@1"
LABEL_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: Length of a block without its own `maxChars`.
DEFAULT_MAX_CHARS = 600
#: Facts one extraction may add, and the longest fact kept.
MAX_FACTS_PER_TURN = 5
MAX_FACT_CHARS = 300

DEFAULT_BLOCKS: list[dict[str, Any]] = [
    {"label": "plot", "icon": "book",
     "displayName": {"en-US": "Plot so far", "zh-CN": "剧情进展"},
     "extractionHint": {"en-US": "The events that shaped the story so far and the threads still open.",
                        "zh-CN": "到目前为止影响故事走向的事件，以及尚未了结的线索。"},
     "maxChars": 800},
    {"label": "scene", "icon": "map",
     "displayName": {"en-US": "Current scene", "zh-CN": "当前场景"},
     "extractionHint": {"en-US": "Where the hero is now, the time of day and who is present.",
                        "zh-CN": "主角此刻身在何处、什么时候、身边有谁。"},
     "maxChars": 400},
    {"label": "relationships", "icon": "users",
     "displayName": {"en-US": "Relationships", "zh-CN": "人物关系"},
     "extractionHint": {"en-US": "How the hero stands with each person met: trust, debts, grudges.",
                        "zh-CN": "主角与遇到的每个人的关系：信任、人情、嫌隙。"},
     "maxChars": 600},
    {"label": "hero", "icon": "user",
     "displayName": {"en-US": "Hero", "zh-CN": "主角状态"},
     "extractionHint": {"en-US": "The hero's condition, goals and the things they carry that matter.",
                        "zh-CN": "主角的身体状况、目标，以及身上要紧的东西。"},
     "maxChars": 400},
]


def is_zh(locale: str | None) -> bool:
    return str(locale or "").lower().startswith("zh")


def localized(value: Any, locale: str | None) -> str:
    """A string, or the `{locale: text}` entry for ``locale`` (same language, then en-US, then any)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or not value:
        return ""
    locale = str(locale or "en-US")
    if isinstance(value.get(locale), str):
        return value[locale]
    language = locale.split("-", 1)[0]
    for key, text in value.items():
        if str(key).split("-", 1)[0] == language and isinstance(text, str):
            return text
    return str(value.get("en-US") or next(iter(value.values())))


def _valid(definition: Any) -> bool:
    return (isinstance(definition, dict) and isinstance(definition.get("label"), str)
            and bool(LABEL_RE.match(definition["label"])) and definition.get("displayName") is not None
            and definition.get("extractionHint") is not None)


def definitions_effective(world_record: Any, contributed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The block definitions in force: the world's ``definitions/world`` record replaces the default
    set; then the blocks other plugins' ``memory.block-definitions@1`` services answered
    (``[{pluginId, value: {blocks: [...]}}]``), a label already defined kept as it is. Invalid
    definitions are skipped."""
    world_blocks = world_record.get("blocks") if isinstance(world_record, dict) else None
    base = [dict(d) for d in world_blocks if _valid(d)] if isinstance(world_blocks, list) and world_blocks else \
        [dict(d) for d in DEFAULT_BLOCKS]
    seen = {d["label"] for d in base}
    for answer in contributed or []:
        value = answer.get("value") if isinstance(answer, dict) else None
        for definition in (value.get("blocks") if isinstance(value, dict) else None) or []:
            if _valid(definition) and definition["label"] not in seen:
                seen.add(definition["label"])
                base.append({**definition, "contributedBy": answer.get("pluginId")})
    return base


def max_chars(definition: dict[str, Any]) -> int:
    value = definition.get("maxChars")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_MAX_CHARS


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def block_make(definition: dict[str, Any], content: str, locale: str | None) -> dict[str, Any]:
    """A block record for ``definition`` holding ``content`` cut to its maxChars (at a sentence or
    word end when one is near)."""
    text = " ".join(str(content or "").split()) if not is_zh(locale) else str(content or "").strip()
    limit = max_chars(definition)
    if len(text) > limit:
        cut = text[:limit]
        stop = max(cut.rfind(p) for p in ("。", "！", "？", ". ", "! ", "? "))
        text = cut[:stop + 1].rstrip() if stop >= limit // 2 else cut.rstrip()
    block: dict[str, Any] = {"label": definition["label"], "content": text,
                             "displayName": definition.get("displayName"), "charCount": len(text), "updatedAt": now_iso()}
    if isinstance(definition.get("icon"), str):
        block["icon"] = definition["icon"]
    return block


def segment_text(definitions: list[dict[str, Any]], blocks: dict[str, Any], locale: str | None) -> str:
    """The prompt segment of the committed blocks, in definition order ('' when all are empty)."""
    lines = []
    for definition in definitions:
        block = blocks.get(definition["label"])
        content = block.get("content") if isinstance(block, dict) else None
        if isinstance(content, str) and content.strip():
            lines.append(f"{localized(definition.get('displayName'), locale)}: {content.strip()}")
    if not lines:
        return ""
    head = "[记忆]（此前回合记下的要点，叙述须与之一致）" if is_zh(locale) else "[MEMORY] (notes kept from earlier turns; stay consistent with them)"
    return head + "\n" + "\n".join(lines)
