"""core-quest/vocabulary function runtime: active quests and their open objectives as
world-ir.vocabulary@1 entries (type `quest`, objectives as `details`)."""

from __future__ import annotations

from typing import Any

from . import quests


def handle(ctx) -> dict[str, Any]:
    records, _ = quests.expand(ctx.plugin_data.list(quests.NAMESPACE))
    entries = []
    for record in quests.active(records)[: quests.VOCABULARY_LIMIT]:
        entry: dict[str, Any] = {"type": "quest", "name": str(record["name"])}
        details = [str(o["text"]) for o in record.get("objectives") or []
                   if isinstance(o, dict) and not o.get("done") and str(o.get("text") or "").strip()]
        if details:
            entry["details"] = details[: quests.DETAILS_LIMIT]
        entries.append(entry)
    return {"entries": entries}
