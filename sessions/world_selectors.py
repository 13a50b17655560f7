"""Reads of worlds for the world endpoints (spec 004 世界管理). Owned by the packages issue.

A world comes from one of three places: a builtin package (`sessions/worlds`, or
settings.COVEL_BUILTIN_WORLDS_DIR; metadata.source "file", read-only), a user package
(`COVEL_HOME/worlds`, "user-file"), or a `World` row (metadata.source "store"). A row also
exists for a package world when it was edited in the app (metadata.packageModified) or while it
is being deleted (state "deleting"); an edited row wins over the package files.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from django.conf import settings

from sessions import world_packages as wp
from sessions.models import World

SUMMARY_METADATA_KEYS = ("source", "storage", "packageManaged", "generated", "cover", "accentColor",
                         "supportedLocales", "packageInfo", "defaultViewMode", "pluginSettings")


def builtin_worlds_dir() -> Path:
    configured = settings.COVEL_BUILTIN_WORLDS_DIR
    return Path(configured) if configured else wp.BUILTIN_WORLDS_DIR


def world_packages_list() -> list[wp.WorldPackage]:
    """Every loadable package world (builtin first). Packages with errors are left out."""
    return [w for w in wp.world_packages_discover(builtin_dir=builtin_worlds_dir(), user_dir=wp.user_worlds_dir(settings.COVEL_HOME)) if w.ok]


def world_package_get(world_id: str) -> wp.WorldPackage | None:
    """The loadable package world ``world_id`` (builtin first, then user), or None.

    Ids that are not world ids (``..``, over-long, path characters) name no package and never
    reach the file system."""
    if not isinstance(world_id, str) or not wp.WORLD_ID_RE.match(world_id):
        return None
    for directory, source in ((builtin_worlds_dir(), wp.SOURCE_FILE), (wp.user_worlds_dir(settings.COVEL_HOME), wp.SOURCE_USER)):
        root = Path(directory) / world_id
        if (root / wp.WORLD_FILE).is_file():
            package = wp.world_package_load(root, source=source, expected_id=world_id)
            return package if package.ok else None
    return None


@dataclass
class WorldView:
    """A world as the endpoints show it. package is None for store worlds; row is None for
    untouched package worlds."""

    id: str
    record: dict[str, Any]
    package: wp.WorldPackage | None
    row: World | None

    @property
    def source(self) -> str:
        return self.record["metadata"].get("source", "store")

    @property
    def is_deleting(self) -> bool:
        return bool(self.row and self.row.state == World.STATE_DELETING)


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _package_record(package: wp.WorldPackage) -> dict[str, Any]:
    record = package.record()
    stamp = datetime.fromtimestamp((package.root / wp.WORLD_FILE).stat().st_mtime, tz=timezone.utc)
    record["createdAt"] = record["updatedAt"] = _iso(stamp)
    return record


def row_record(row: World) -> dict[str, Any]:
    """WorldRecord of a row: {id, name, description, locale, lore, metadata, createdAt, updatedAt}."""
    package = row.package or {}
    meta = copy.deepcopy(row.metadata or {})
    return {"id": row.id, "name": row.name, "description": package.get("description", ""),
            "locale": package.get("locale") or meta.get("defaultLocale") or "en-US", "lore": package.get("lore", ""),
            "metadata": meta, "createdAt": _iso(row.created_at), "updatedAt": _iso(row.updated_at)}


def world_get(world_id: str) -> WorldView | None:
    """The world `world_id` or None (→ 404 world_not_found)."""
    row = World.objects.filter(pk=world_id).first()
    package = world_package_get(world_id)
    if row is not None and (package is None or (row.metadata or {}).get("packageModified")):
        return WorldView(world_id, row_record(row), package, row)
    if package is not None:
        record = _package_record(package)
        if row is not None and row.state == World.STATE_DELETING:
            record["metadata"]["worldDeletion"] = {"state": "deleting"}
        return WorldView(world_id, record, package, row)
    return None


def world_summary(record: dict[str, Any]) -> dict[str, Any]:
    """WorldSummary: no lore, no dimensions; metadata reduced to the listed keys (spec 004)."""
    meta = record.get("metadata") or {}
    summary_meta = {k: copy.deepcopy(meta[k]) for k in SUMMARY_METADATA_KEYS if k in meta}
    localized = meta.get("localizedText") or {}
    summary_meta["localizedText"] = {k: localized[k] for k in ("name", "description") if k in localized}
    return {"id": record["id"], "name": record["name"], "description": record.get("description", ""),
            "locale": record.get("locale"), "metadata": summary_meta,
            "createdAt": record.get("createdAt"), "updatedAt": record.get("updatedAt")}


def world_list() -> list[dict[str, Any]]:
    """Summaries of every world: package worlds (edited rows override) then store rows, by id."""
    rows = {row.id: row for row in World.objects.all()}
    out = []
    seen = set()
    for package in world_packages_list():
        row = rows.get(package.id)
        record = row_record(row) if row is not None and (row.metadata or {}).get("packageModified") else _package_record(package)
        out.append(world_summary(record))
        seen.add(package.id)
    for world_id in sorted(rows):
        if world_id not in seen and (rows[world_id].metadata or {}).get("source") == "store":
            out.append(world_summary(row_record(rows[world_id])))
    return out
