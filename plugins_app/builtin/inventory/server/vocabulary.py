"""inventory/vocabulary function runtime: the carried item names as world-ir.vocabulary@1."""

from __future__ import annotations

from typing import Any

from . import bag


def handle(ctx) -> dict[str, Any]:
    items = bag.carried(bag.expand(ctx.plugin_data.list(bag.NAMESPACE))[0])[: bag.VOCABULARY_LIMIT]
    return {"entries": [{"type": "item", "name": str(v["name"])} for v in items if str(v.get("name") or "").strip()]}
