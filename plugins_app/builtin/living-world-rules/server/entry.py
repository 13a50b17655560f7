"""living-world-rules entry module: the `list-rules` action (the panel's flattened rule list)."""

from __future__ import annotations

from typing import Any

from . import rules as R


def list_rules(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{rules: [rule], count}`: every rule of the session, world files unwrapped."""
    items = R.flatten(ctx.store.listPluginData(R.NAMESPACE))
    return {"rules": items, "count": len(items)}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_rpc("list-rules", list_rules)
