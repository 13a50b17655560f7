"""Guard of world-init/schema-gen: a world that declares its character schema is adopted verbatim
(no model call); its authored dimensions are initialized with it. Returns None (run the agent)
only for a world without a character schema."""

from __future__ import annotations

from typing import Any

from .initialize_world import world_initialize_proposals


def authored_dimensions(ctx) -> dict[str, Any]:
    """The world's declared dimension definitions (`metadata.dimensions`), id → definition."""
    dims = (ctx.world.metadata or {}).get("dimensions")
    return {k: v for k, v in dims.items() if isinstance(v, dict) and "initialValue" in v} if isinstance(dims, dict) else {}


def guard(ctx) -> dict[str, Any] | None:
    schema = ctx.world.character_schema()
    if not isinstance(schema, dict) or not schema.get("attributes"):
        return None
    definitions = {} if ctx.world.dimensions else authored_dimensions(ctx)
    proposals = [
        {"type": p.kind, "payload": p.payload}
        for p in world_initialize_proposals(list(schema.get("types") or []), list(schema["attributes"]), definitions)[1:]
    ]
    return {
        "success": True,
        "attributeCount": len(schema["attributes"]),
        "dimensionCount": len(definitions) or len(ctx.world.dimensions),
        "worldSchema": {"types": list(schema.get("types") or []), "attributes": list(schema["attributes"])},
        "preGameDone": True,
        "proposals": proposals,
    }
