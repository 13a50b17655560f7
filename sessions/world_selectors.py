"""Reads of worlds for the world endpoints (spec 004 世界管理). Owned by the packages issue.

A world comes from one of three places: a builtin package (`sessions/worlds`, or
settings.COVEL_BUILTIN_WORLDS_DIR; metadata.source "file", read-only), a user package
(`COVEL_HOME/worlds`, "user-file"), or a `World` row (metadata.source "store"). A row also
exists for a package world when it was edited in the app (metadata.packageModified) or while it
is being deleted (state "deleting"); an edited row wins over the package files.
"""
from __future__ import annotations

import copy
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from django.conf import settings

from sessions import world_packages as wp
from sessions.models import World

logger = logging.getLogger("covel.worlds")
#: (package root, digest) pairs already logged as failing to load (one log line per broken version).
_logged_broken: set[tuple[str, str]] = set()
STATUS_ERROR = "error"

SUMMARY_METADATA_KEYS = ("source", "storage", "packageManaged", "generated", "cover", "accentColor",
                         "supportedLocales", "packageInfo", "defaultViewMode", "pluginSettings")


def builtin_worlds_dir() -> Path:
    configured = settings.COVEL_BUILTIN_WORLDS_DIR
    return Path(configured) if configured else wp.BUILTIN_WORLDS_DIR


def world_packages_all(*, shared: bool = False) -> list[wp.WorldPackage]:
    """Every package folder of the builtin and user world directories, loadable or not (builtin
    first). ``shared``: the cached read-only packages (sessions.world_packages.world_package_load)."""
    return wp.world_packages_discover(builtin_dir=builtin_worlds_dir(), user_dir=wp.user_worlds_dir(settings.COVEL_HOME),
                                      shared=shared)


def world_packages_list() -> list[wp.WorldPackage]:
    """Every loadable package world (builtin first). Packages with errors are left out."""
    return [w for w in world_packages_all() if w.ok]


def package_errors(package: wp.WorldPackage) -> list[dict[str, Any]]:
    """The error issues of a package that does not load, as `{severity, code, message, file?, field?}`."""
    return [i.as_dict() for i in package.issues if i.severity == "error"]


def package_broken_log(package: wp.WorldPackage) -> None:
    """Log a package that fails to load once per version (root + digest), with its first errors."""
    key = (str(package.root), package.digest)
    if key in _logged_broken:
        return
    _logged_broken.add(key)
    errors = package_errors(package)
    logger.warning("world package %s (%s) does not load: %d error(s): %s", package.id, package.root, len(errors),
                   "; ".join(f"{e.get('file') or ''} {e.get('field') or ''}: {e['code']} {e['message']}" for e in errors[:5]))


def broken_summary(package: wp.WorldPackage) -> dict[str, Any]:
    """The GET /api/worlds item of a package that does not load (spec 004 status: "error" style,
    as GET /api/plugins lists a plugin that failed): `status: "error"`, `error` (first reason) and
    `diagnostics` (every error issue). Paths are package-relative, never the server's."""
    errors = package_errors(package)
    first = errors[0] if errors else {"code": "package-invalid", "message": "the package does not load"}
    return {"id": package.id, "name": package.name or package.id, "description": package.summary or "",
            "locale": package.default_locale, "status": STATUS_ERROR,
            "error": f"{first.get('file') or 'world.yaml'}: {first['message']}",
            "diagnostics": errors, "metadata": {"source": package.source, "storage": "package", "packageManaged": True},
            "createdAt": None, "updatedAt": None}


def world_package_broken(world_id: str) -> wp.WorldPackage | None:
    """The package folder ``world_id`` when it exists but does not load (None otherwise)."""
    if not isinstance(world_id, str) or not wp.WORLD_ID_RE.match(world_id):
        return None
    for directory, source in ((builtin_worlds_dir(), wp.SOURCE_FILE), (wp.user_worlds_dir(settings.COVEL_HOME), wp.SOURCE_USER)):
        root = Path(directory) / world_id
        if (root / wp.WORLD_FILE).is_file():
            package = wp.world_package_load(root, source=source, expected_id=world_id)
            if package.ok:
                return None
            package_broken_log(package)
            return package
    return None


def update_available(record: dict[str, Any], package: wp.WorldPackage | None) -> bool | None:
    """spec 004 GET /api/worlds `updateAvailable`: the package's digest differs from the one the
    record saved at import (metadata.packageDigest). None (omitted) without a package or a saved digest."""
    saved = (record.get("metadata") or {}).get("packageDigest")
    if package is None or not saved or not package.digest:
        return None
    return package.digest != saved


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
        record = row_record(row)
        flag = update_available(record, package)
        if flag is not None:
            record["updateAvailable"] = flag
        return WorldView(world_id, record, package, row)
    if package is not None:
        record = _package_record(package)
        record["updateAvailable"] = False
        if row is not None and row.state == World.STATE_DELETING:
            record["metadata"]["worldDeletion"] = dict((row.metadata or {}).get("worldDeletion") or {"state": "deleting"})
        return WorldView(world_id, record, package, row)
    return None


def world_summary(record: dict[str, Any]) -> dict[str, Any]:
    """WorldSummary: no lore, no dimensions; metadata reduced to the listed keys (spec 004)."""
    meta = record.get("metadata") or {}
    summary_meta = {k: copy.deepcopy(meta[k]) for k in SUMMARY_METADATA_KEYS if k in meta}
    localized = meta.get("localizedText") or {}
    summary_meta["localizedText"] = {k: localized[k] for k in ("name", "description") if k in localized}
    out = {"id": record["id"], "name": record["name"], "description": record.get("description", ""),
           "locale": record.get("locale"), "metadata": summary_meta,
           "createdAt": record.get("createdAt"), "updatedAt": record.get("updatedAt")}
    if record.get("updateAvailable") is not None:
        out["updateAvailable"] = record["updateAvailable"]
    return out


#: (root, source, digest, world.yaml mtime) → the WorldSummary of an untouched package world. The
#: summary of a cached package is built once instead of per GET /api/worlds (record() deep-copies
#: every embedded character and lorebook entry, and the summary keeps none of them).
_summaries: dict[tuple[str, str, str, int], dict[str, Any]] = {}
SUMMARIES_KEPT = 256
_summaries_lock = threading.Lock()


def _package_summary(package: wp.WorldPackage) -> dict[str, Any]:
    key = (str(package.root), package.source, package.digest, (package.root / wp.WORLD_FILE).stat().st_mtime_ns)
    with _summaries_lock:
        summary = _summaries.get(key)
    if summary is None:
        record = _package_record(package)
        record["updateAvailable"] = False
        summary = world_summary(record)
        with _summaries_lock:
            _summaries[key] = summary
            while len(_summaries) > SUMMARIES_KEPT:
                del _summaries[next(iter(_summaries))]
    return copy.deepcopy(summary)


def world_list() -> list[dict[str, Any]]:
    """Summaries of every world: package worlds (edited rows override) then store rows, by id."""
    rows = {row.id: row for row in World.objects.all()}
    out = []
    seen = set()
    for package in world_packages_all(shared=True):
        row = rows.get(package.id)
        if not package.ok:
            # Listed with its diagnostics and logged, never silently absent (issue 21).
            package_broken_log(package)
            if package.id not in seen:
                out.append(broken_summary(package))
                seen.add(package.id)
            continue
        if package.id in seen:
            continue
        if row is not None and (row.metadata or {}).get("packageModified"):
            record = row_record(row)
            flag = update_available(record, package)
            if flag is not None:
                record["updateAvailable"] = flag
            out.append(world_summary(record))
        else:
            out.append(_package_summary(package))
        seen.add(package.id)
    for world_id in sorted(rows):
        if world_id not in seen and (rows[world_id].metadata or {}).get("source") == "store":
            out.append(world_summary(row_record(rows[world_id])))
    return out
