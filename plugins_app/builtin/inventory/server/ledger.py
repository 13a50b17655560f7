"""inventory/ledger function runtime: apply this turn's `inventory_change` events of the player
character (WorldIR input `worldIR`) to the `items` namespace and show what changed."""

from __future__ import annotations

from typing import Any

from . import bag


def _hero(ctx) -> dict[str, Any] | None:
    return next((c for c in ctx.world.characters() if c.get("type") == "player"), None)


def handle(ctx) -> dict[str, Any] | None:
    facts = ctx.inputs.get("worldIR")
    hero = _hero(ctx)
    if not isinstance(facts, dict) or hero is None:
        return None
    holders = {hero["id"], bag.norm(hero["name"])}
    entities = {e.get("id"): e for e in facts.get("entities") or [] if isinstance(e, dict)}
    rows, seeded = bag.expand(ctx.plugin_data.list(bag.NAMESPACE))
    working: dict[str, dict[str, Any]] = {}
    changes: list[dict[str, Any]] = []
    for event in facts.get("events") or []:
        if not isinstance(event, dict) or event.get("type") != "inventory_change":
            continue
        attrs = event.get("attributes") or {}
        holder = attrs.get("holder")
        operation = attrs.get("operation")
        if operation not in bag.OPERATIONS or (holder not in holders and bag.norm(holder or "") not in holders):
            continue
        entity = entities.get(attrs.get("item")) or {}
        name = str(entity.get("name") or str(attrs.get("item") or "").replace("-", " ")).strip()
        if not name:
            continue
        quantity = attrs.get("quantity") if isinstance(attrs.get("quantity"), int) and attrs["quantity"] > 0 else 1
        merged = {**rows, **working}
        key = bag.find(merged, name) or bag.item_id(name, set(merged))
        record = bag.apply(merged.get(key), key=key, name=name, operation=operation, quantity=quantity, turn=ctx.logical_turn)
        if entity.get("description") and not record.get("description"):
            record["description"] = str(entity["description"])
        working[key] = record
        changes.append({"itemId": key, "name": record["name"], "operation": operation, "quantity": quantity,
                        "now": record["quantity"]})
    if not working:
        return None
    for key in seeded:  # the seeded list becomes one record per item, in the same commit
        ctx.plugin_data.delete(bag.NAMESPACE, key)
    for key, record in {**rows, **working}.items():
        if key in working or seeded:
            ctx.plugin_data.set(bag.NAMESPACE, key, record)
    block = {"parts": [{"id": f"inventory-turn-{ctx.logical_turn}", "type": "inventory.changes", "status": "success",
                        "content": {"changes": changes}}]}
    return {"changes": changes, "proposals": [{"type": "ui.render", "payload": block}]}
