"""inventory entry module: the panel's actions. `open-bag` (also /bag) returns the carried items
and asks the client to open the inventory panel; `item-op` equips, unequips or drops one item."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import INVALID_INPUT, NOT_FOUND, ToolError

from . import bag

PANEL_ID = "inventory.panel"
PANEL_OPS = ("equip", "unequip", "drop")


def open_bag(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    items = bag.carried(bag.expand(ctx.store.listPluginData(bag.NAMESPACE))[0])
    return {"open": {"slot": "right", "id": PANEL_ID}, "items": items, "count": len(items)}


def item_op(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = payload or {}
    op, key = payload.get("op"), payload.get("itemId")
    if op not in PANEL_OPS:
        raise ToolError(INVALID_INPUT, f"op: one of {', '.join(PANEL_OPS)}")
    records, _ = bag.expand(ctx.store.listPluginData(bag.NAMESPACE))
    record = records.get(key) if isinstance(key, str) and key else None
    if not isinstance(record, dict) or int(record.get("quantity") or 0) <= 0:
        raise ToolError(NOT_FOUND, f"itemId: no carried item {key!r}")
    quantity = int(record.get("quantity") or 0) if op == "drop" else 1
    updated = bag.apply(record, key=key, name=record.get("name", key), operation={"drop": "lose"}.get(op, op),
                        quantity=quantity, turn=record.get("turn"))
    ctx.store.setPluginData(bag.NAMESPACE, key, updated)
    return {"item": updated}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_rpc("open-bag", open_bag)
    api.register_rpc("item-op", item_op)
