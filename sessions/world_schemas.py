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


# World data (spec 004 world-data/preflight, sync-data, sync-dimensions) -----------------------

from covel.openapi import Wire, WireIn  # noqa: E402  (documented shapes; the routes parse the body themselves)


class WorldDataPreflightIn(WireIn):
    """Either sessionId (its activePlugins; plugins ignored) or plugins (before creating a session)."""

    session_id: str | None = None
    plugins: list[str] | None = None
    locale: str | None = None


class WorldDataSyncIn(WireIn):
    session_id: str
    dry_run: bool | None = Field(None, description="Default true; false writes (the session must be active)")
    force: bool | None = Field(None, description="Override modified / missing conflicts of ordinary rows (never dimensions)")


class WorldDimensionsSyncIn(WireIn):
    session_id: str


class WorldDataPreflightOut(Wire):
    imported: bool
    planned: int
    diagnostics: list[dict[str, Any]]
    targets: list[dict[str, Any]]


class WorldDataSyncOut(Wire):
    ok: bool
    imported: bool
    dry_run: bool
    diagnostics: list[dict[str, Any]]
    planned: int
    upserted: int
    deleted: int
    unchanged: int
    conflicts: list[dict[str, Any]]
    media_refs: list[Any]


class WorldRestoreIn(WireIn):
    """An empty object."""
