"""sync-codex-entries: this turn's codex changes in one call (spec 000 §sync-codex-entries).

Entries live in this plugin's `entries` namespace as `{key, title, category, content, tags,
rarity, imageHint?, turn}`. A title that matches an existing entry (trimmed, case-insensitive)
extends it: content appended, tags merged (at most 5), rarity only rises, category kept. At most 3
new entries per call; later new titles are skipped. Every write goes into ONE plugin.data.batch.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from typing import Any

from plugins_app.toolkit import (
    PLUGIN_DATA_BATCH,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolResult,
    instruction_locale_for,
    tool,
)

NAME = "sync-codex-entries"
NAMESPACE = "entries"
MAX_NEW_PER_CALL = 3
MAX_TAGS = 5
CATEGORIES = ("monster", "item", "location", "lore", "character", "skill")
RARITIES = ("common", "uncommon", "rare", "legendary")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["entries"],
    "properties": {
        "entries": {
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "description": "1-8 entries, most important first.",
            "items": {
                "type": "object",
                "required": ["category", "title", "content"],
                "properties": {
                    "category": {"enum": list(CATEGORIES)},
                    "title": {"type": "string", "minLength": 1, "maxLength": 80, "description": "Same title as an existing entry extends it."},
                    "content": {"type": "string", "minLength": 1, "description": "New entry: 2-3 sentences. Existing entry: only the new facts."},
                    "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_TAGS},
                    "rarity": {"enum": list(RARITIES)},
                    "imageHint": {"type": "string"},
                },
                "additionalProperties": False,
            },
        }
    },
    "additionalProperties": False,
}


def title_key(title: str) -> str:
    """Matching key of a title: trimmed, NFKC, case-folded."""
    return unicodedata.normalize("NFKC", title).strip().casefold()


def entry_key(title: str, taken: set[str]) -> str:
    """`codex-<title slug>` (letters of any script kept: codex-west-herb-garden, codex-西侧旧药园),
    with -2, -3... when taken (spec 000: the key is the title itself, no random string)."""
    text = unicodedata.normalize("NFKC", title).strip().lower()
    slug = re.sub(r"[^\w]+", "-", text).strip("-_").replace("_", "-") or "entry"
    base = f"codex-{slug[:60]}"
    key, n = base, 2
    while key in taken:
        key, n = f"{base}-{n}", n + 1
    return key


def _merge_tags(old: list[str], new: list[str]) -> list[str]:
    out = list(old)
    for tag in new:
        if tag not in out:
            out.append(tag)
    return out[:MAX_TAGS]


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    rows = ctx.state.plugin_data_list(ctx.plugin_id, NAMESPACE)
    by_title = {title_key(v.get("title", "")): k for k, v in rows.items() if isinstance(v, dict)}
    working: dict[str, dict[str, Any]] = {}
    created: list[str] = []
    updated: list[str] = []
    skipped: list[str] = []
    for item in args["entries"]:
        match = by_title.get(title_key(item["title"]))
        if match is not None:
            # an entry created or extended earlier in this batch is extended again, in order
            record = working[match] if match in working else copy.deepcopy(rows[match])
            record["content"] = (record.get("content", "").rstrip() + "\n" + item["content"].strip()).strip()
            record["tags"] = _merge_tags(record.get("tags") or [], item.get("tags") or [])
            old_rarity = record.get("rarity", "common")
            new_rarity = item.get("rarity", old_rarity)
            if RARITIES.index(new_rarity) > RARITIES.index(old_rarity if old_rarity in RARITIES else "common"):
                record["rarity"] = new_rarity
            if item.get("imageHint") and not record.get("imageHint"):
                record["imageHint"] = item["imageHint"]
            record["turn"] = ctx.logical_turn
            working[match] = record
            if match not in created and match not in updated:
                updated.append(match)
            continue
        if len(created) >= MAX_NEW_PER_CALL:
            skipped.append(item["title"])
            continue
        key = entry_key(item["title"], set(rows) | set(working))
        record = {
            "key": key,
            "title": item["title"].strip(),
            "category": item["category"],
            "content": item["content"].strip(),
            "tags": _merge_tags([], item.get("tags") or []),
            "rarity": item.get("rarity", "common"),
            "turn": ctx.logical_turn,
        }
        if item.get("imageHint"):
            record["imageHint"] = item["imageHint"]
        working[key] = record
        by_title[title_key(item["title"])] = key
        created.append(key)
    proposals = []
    if working:
        proposals.append(
            Proposal(
                PLUGIN_DATA_BATCH,
                {"entries": [{"namespace": NAMESPACE, "key": k, "value": v} for k, v in working.items()]},
            )
        )
    ui = []
    if working:
        ui.append(
            {
                "parts": [
                    {
                        "id": f"codex-sync-{ctx.call_id}",
                        "type": "codex.entries",
                        "status": "success",
                        "content": {
                            "created": [{"key": k, "title": working[k]["title"], "category": working[k]["category"]} for k in created],
                            "updated": [{"key": k, "title": working[k]["title"], "category": working[k]["category"]} for k in updated],
                        },
                    }
                ]
            }
        )
    content = {"created": created, "updated": updated, "skipped": skipped, "ui": ui}
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"图鉴：新建 {len(created)} 条，补充 {len(updated)} 条。"
        if skipped:
            summary += f"本轮最多新建 {MAX_NEW_PER_CALL} 条，已跳过：{'、'.join(skipped)}。"
    else:
        summary = f"Codex: {len(created)} created, {len(updated)} updated."
        if skipped:
            summary += f" At most {MAX_NEW_PER_CALL} new entries per turn; skipped: {', '.join(skipped)}."
    return ToolResult(content=content, proposals=proposals, summary=summary, data={"created": created, "updated": updated, "skipped": skipped})


def build() -> Tool:
    return tool(
        name=NAME,
        description=(
            "Record this turn's codex changes in one call. Entries are matched by title: an existing title is "
            "extended (write only the new facts), a new title creates an entry (at most 3 new per turn)."
        ),
        parameters=PARAMETERS,
        execute=_execute,
    )
