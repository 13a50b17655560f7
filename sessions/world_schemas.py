"""Request shapes of the world endpoints (spec 004 世界管理). Responses are WorldRecord dicts."""
from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict, Field

# World.name is a varchar(256): longer names are a 400, not a database error.
WORLD_NAME_MAX = 256


class WorldIn(Schema):
    """POST /api/worlds body. id is generated (world-<uuid8>) when omitted."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    name: str = Field(max_length=WORLD_NAME_MAX)
    description: str | None = None
    locale: str | None = None
    lore: str | None = None
    metadata: dict[str, Any] | None = None
    dimensions: dict[str, Any] | None = None


class WorldPatch(Schema):
    """PATCH /api/worlds/:id body: every field optional; metadata merges, dimensions replace."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, max_length=WORLD_NAME_MAX)
    description: str | None = None
    locale: str | None = None
    lore: str | None = None
    metadata: dict[str, Any] | None = None
    dimensions: dict[str, Any] | None = None
