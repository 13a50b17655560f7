"""core-quest/log function runtime: apply this turn's `quest_change` events (WorldIR input
`worldIR`) to the `quests` namespace and show what changed (rules in PLUGIN.md)."""

from __future__ import annotations

from typing import Any

from . import quests


def handle(ctx) -> dict[str, Any] | None:
    facts = ctx.inputs.get("worldIR")
    if not isinstance(facts, dict):
        return None
    rows = ctx.plugin_data.list(quests.NAMESPACE)
    records, seeded = quests.expand(rows)
    working: dict[str, dict[str, Any]] = {}
    changes: list[dict[str, Any]] = []
    unresolved: list[str] = []
    for event in facts.get("events") or []:
        if not isinstance(event, dict) or event.get("type") != "quest_change":
            continue
        attrs = event.get("attributes") or {}
        name = str(attrs.get("quest") or "").strip()
        signal = attrs.get("status")
        if not name or signal not in quests.SIGNALS:
            continue
        merged = {**records, **working}
        key = quests.resolve(merged, name)
        if key is None and signal != "accepted":
            unresolved.append(name)  # progress on a quest the log never had: no new quest from it
            continue
        if key is None:
            key = quests.quest_id(name, set(merged))
            record = quests.created(name, key, attrs, str(event.get("description") or ""), ctx.logical_turn)
            tags = ["accepted"]
        else:
            record, tags = quests.apply(merged[key], attrs, ctx.logical_turn)
        if not tags:
            continue
        working[key] = record
        changes.append({"questId": key, "name": record["name"], "status": record["status"], "change": ", ".join(tags),
                        "objectives": [{"text": o["text"], "done": bool(o.get("done"))} for o in record.get("objectives") or []]})
    if not working:
        return {"changes": [], "unresolved": unresolved} if unresolved else None
    for key in seeded:  # the seeded list becomes one record per quest, in the same commit
        ctx.plugin_data.delete(quests.NAMESPACE, key)
    for key, record in {**records, **working}.items():
        if key in working or seeded:
            ctx.plugin_data.set(quests.NAMESPACE, key, record)
    block = {"parts": [{"id": f"quest-turn-{ctx.logical_turn}", "type": "quest.changes", "status": "success",
                        "content": {"changes": changes}}]}
    return {"changes": changes, "unresolved": unresolved, "proposals": [{"type": "ui.render", "payload": block}]}
