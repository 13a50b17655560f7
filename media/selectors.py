"""Reads of the media store (spec 004 §媒体管理): where bytes live, who uses a file, the library view.

A media id is the lowercase SHA-256 hex of the content. Bytes live at
``MEDIA_ROOT/<id[:2]>/<id>`` (MEDIA_ROOT = COVEL_HOME/media). Each ``MediaAsset`` row is one holder of
a file: a row with a session is that session's ownership/reference; a row without one is a temporary
pin (``media-pin:<row id>``) that protects the file for 24 hours.

"Used by a session" (spec §GET /api/media/library): the session holds a row for the file, or the id
appears in any of its messages, plugin_data, runtime_outputs, trace_events, snapshots or turn_results.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any, Iterable

from django.apps import apps as django_apps
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from media.models import MediaAsset
from plugins_app.extensions import ExtensionFailed, extension_call, extension_providers
from sessions.grants import plugins_code_granted
from sessions.selectors import runnable_plugins

MEDIA_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_MENTION_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
PIN_PREFIX = "media-pin:"
# Fixed by the spec (§POST /api/media/cleanup): temporary references expire after 24 hours.
PIN_MAX_AGE = timedelta(hours=24)
LIBRARY_SCAN_REUSE_SECONDS = 30

# MIME prefix → library kind.
KINDS = ("image", "audio", "video", "other")


def media_root() -> Path:
    return Path(settings.MEDIA_ROOT)


def media_relative_path(media_id: str) -> str:
    """``"<id[:2]>/<id>"``: the storage path of a media id, relative to MEDIA_ROOT."""
    return f"{media_id[:2]}/{media_id}"


def media_path(media_id: str) -> Path:
    return media_root() / media_relative_path(media_id)


def media_exists(media_id: str) -> bool:
    """True when the bytes of ``media_id`` are in the store."""
    return bool(MEDIA_ID_RE.match(media_id)) and media_path(media_id).is_file()


def media_kind(mime: str) -> str:
    """image | audio | video | other, from a MIME type."""
    major = (mime or "").split("/", 1)[0]
    return major if major in ("image", "audio", "video") else "other"


def media_ids_in(value: Any) -> set[str]:
    """Every media id (64 lowercase hex characters) mentioned anywhere in a JSON-able value or string."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return set(_MENTION_RE.findall(text))


def media_session_reference(session_id: str, media_id: str) -> MediaAsset | None:
    """The session's own row for ``media_id`` (its ownership or reference), or None."""
    return MediaAsset.objects.filter(session_id=session_id, sha256=media_id).order_by("created_at").first()


def media_session_ids(session_id: str) -> set[str]:
    """Media ids the session holds a row for."""
    return set(MediaAsset.objects.filter(session_id=session_id).values_list("sha256", flat=True))


def media_inventory() -> dict[str, tuple[int, datetime]]:
    """Every file in the store: ``{id: (size_bytes, modified_at)}`` (files not named by a media id are ignored)."""
    out: dict[str, tuple[int, datetime]] = {}
    root = media_root()
    if not root.is_dir():
        return out
    for shard in root.iterdir():
        if not shard.is_dir() or len(shard.name) != 2:
            continue
        for path in shard.iterdir():
            if MEDIA_ID_RE.match(path.name) and path.name[:2] == shard.name and path.is_file():
                stat = path.stat()
                out[path.name] = (stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=dt_timezone.utc))
    return out


# --- usage scan ---------------------------------------------------------------------------------


def media_reference_tables() -> list[tuple[Any, tuple[str, ...]]]:
    """[(model, JSON field names)] of every table whose rows may mention media ids, collected from the
    ``media_reference_fields`` declaration of each installed app's AppConfig (``{model name: fields}``).
    Each app declares its own tables, so the scan covers apps above this one without importing them.
    Every declared model has a ``session`` foreign key."""
    tables: list[tuple[Any, tuple[str, ...]]] = []
    for config in django_apps.get_app_configs():
        for model_name, fields in sorted(getattr(config, "media_reference_fields", {}).items()):
            tables.append((config.get_model(model_name), tuple(fields)))
    return tables


@dataclass
class MediaScan:
    """Result of one scan of every session.

    used_by: media id → ids of existing sessions using it. fresh_pins: media id → pins younger than
    24 h. expired_pins: pin rows at least 24 h old. incomplete_session_id: the first session whose row
    count in some scanned table exceeds the scan limit (its mentions were not collected).
    """

    used_by: dict[str, set[str]] = field(default_factory=dict)
    fresh_pins: dict[str, list[MediaAsset]] = field(default_factory=dict)
    expired_pins: list[MediaAsset] = field(default_factory=list)
    incomplete_session_id: str | None = None
    scanned_sessions: int = 0
    scanned_at: datetime = field(default_factory=timezone.now)

    @property
    def is_complete(self) -> bool:
        return self.incomplete_session_id is None

    def usage(self, media_id: str) -> str:
        """used | held | unknown | unused (spec §GET /api/media/library usage)."""
        if self.used_by.get(media_id):
            return "used"
        if self.fresh_pins.get(media_id):
            return "held"
        return "unknown" if not self.is_complete else "unused"


def media_scan(*, scan_limit: int, strict: bool) -> MediaScan:
    """Collect who uses which media id.

    scan_limit: the most rows of one session one table may have. Over it, ``strict`` raises
    ScanLimitExceeded (400 limit_exceeded, cleanup); otherwise that session is skipped and the scan is
    marked incomplete (library).
    """
    from media.errors import ScanLimitExceeded
    from sessions.models import Session

    scan = MediaScan()
    now = timezone.now()
    for row in MediaAsset.objects.all().only("id", "session_id", "sha256", "created_at"):
        if row.session_id:
            scan.used_by.setdefault(row.sha256, set()).add(row.session_id)
        elif now - row.created_at >= PIN_MAX_AGE:
            scan.expired_pins.append(row)
        else:
            scan.fresh_pins.setdefault(row.sha256, []).append(row)
    tables = media_reference_tables()
    over: set[str] = set()
    for model, _ in tables:
        counts = model.objects.values("session_id").annotate(n=Count("id")).filter(n__gt=scan_limit)
        for item in counts.order_by("session_id"):
            if strict:
                raise ScanLimitExceeded(item["session_id"], scan_limit)
            over.add(item["session_id"])
            if scan.incomplete_session_id is None or item["session_id"] < scan.incomplete_session_id:
                scan.incomplete_session_id = item["session_id"]
    for model, fields in tables:
        rows = model.objects.exclude(session_id__in=over).values_list("session_id", *fields)
        for session_id, *values in rows.iterator(chunk_size=500):
            for media_id in media_ids_in(values):
                scan.used_by.setdefault(media_id, set()).add(session_id)
    scan.scanned_sessions = Session.objects.count()
    return scan


_library_cache: dict[int, tuple[float, MediaScan]] = {}


def media_scan_cached(*, scan_limit: int, refresh: bool) -> MediaScan:
    """The library's scan: reused for 30 s unless ``refresh`` (spec: refresh=1 重新扫描)."""
    cached = _library_cache.get(scan_limit)
    if not refresh and cached and time.monotonic() - cached[0] < LIBRARY_SCAN_REUSE_SECONDS:
        return cached[1]
    scan = media_scan(scan_limit=scan_limit, strict=False)
    _library_cache.clear()
    _library_cache[scan_limit] = (time.monotonic(), scan)
    return scan


def media_scan_cache_clear() -> None:
    _library_cache.clear()


def mime_sniff(head: bytes) -> str | None:
    """The image MIME type the first bytes announce (PNG, JPEG, GIF, WebP, AVIF, BMP), else None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if len(head) >= 12 and head[4:8] == b"ftyp":
        box_size = int.from_bytes(head[:4], "big")
        brands = head[8:max(12, min(box_size, len(head)))]
        if any(brands[i:i + 4] in (b"avif", b"avis") for i in range(0, len(brands) - 3, 4)):
            return "image/avif"
    if head.startswith(b"BM") and len(head) >= 14:
        return "image/bmp"
    return None



# --- library ------------------------------------------------------------------------------------


def _mime_of(media_id: str, rows_by_id: dict[str, list[MediaAsset]]) -> str:
    for row in rows_by_id.get(media_id, []):
        if row.content_type:
            return row.content_type
    try:
        with media_path(media_id).open("rb") as handle:
            return mime_sniff(handle.read(64)) or "application/octet-stream"
    except OSError:
        return "application/octet-stream"


def media_library(*, kind: str | None, usage: str | None, limit: int, offset: int, scan: MediaScan,
                  url_for) -> dict[str, Any]:
    """GET /api/media/library body: ``{items, total, offset, limit, sessions, totals, scan}``.

    kind: image|audio|video|other filter; usage: "unused" | "in-use" filter (in-use = every other state).
    Items newest first. ``url_for(media_id) -> str`` builds each signed url. totals cover the whole
    library regardless of filters; ``sessions`` only those the page mentions.
    """
    from sessions.models import Session
    from covel.times import iso

    inventory = media_inventory()
    rows_by_id: dict[str, list[MediaAsset]] = {}
    for row in MediaAsset.objects.filter(sha256__in=list(inventory)).order_by("created_at"):
        rows_by_id.setdefault(row.sha256, []).append(row)
    live = set(Session.objects.values_list("id", flat=True))
    entries = []
    totals: dict[str, Any] = {"count": 0, "bytes": 0, "unusedCount": 0, "unusedBytes": 0, "byKind": {}}
    for media_id, (size, modified_at) in inventory.items():
        mime = _mime_of(media_id, rows_by_id)
        item_kind = media_kind(mime)
        used_by = sorted(scan.used_by.get(media_id, set()) & live)
        state = "used" if used_by else ("held" if scan.fresh_pins.get(media_id) or scan.used_by.get(media_id)
                                        else ("unknown" if not scan.is_complete else "unused"))
        rows = rows_by_id.get(media_id)
        created_at = rows[0].created_at if rows else modified_at
        by_kind = totals["byKind"].setdefault(item_kind, {"count": 0, "bytes": 0, "unusedCount": 0, "unusedBytes": 0})
        for bucket in (totals, by_kind):
            bucket["count"] += 1
            bucket["bytes"] += size
            if state == "unused":
                bucket["unusedCount"] += 1
                bucket["unusedBytes"] += size
        entries.append({"id": media_id, "mime": mime, "kind": item_kind, "size": size, "createdAt": iso(created_at),
                        "usage": state, "usedBy": used_by, "_created": created_at})
    if kind:
        entries = [e for e in entries if e["kind"] == kind]
    if usage == "unused":
        entries = [e for e in entries if e["usage"] == "unused"]
    elif usage == "in-use":
        entries = [e for e in entries if e["usage"] != "unused"]
    entries.sort(key=lambda e: (e["_created"], e["id"]), reverse=True)
    page = entries[offset:offset + limit]
    mentioned = sorted({s for e in page for s in e["usedBy"]})
    sessions = [
        {"id": s.id, "worldId": s.world_id or None, "status": s.status, "completedPlayerTurns": s.completed_player_turns,
         "createdAt": iso(s.created_at), "updatedAt": iso(s.updated_at)}
        for s in Session.objects.filter(id__in=mentioned).order_by("id")
    ]
    items = []
    for entry in page:
        entry.pop("_created")
        entry["url"] = url_for(entry["id"])
        items.append(entry)
    scan_out: dict[str, Any] = {"complete": scan.is_complete, "scannedAt": iso(scan.scanned_at)}
    if not scan.is_complete:
        scan_out["incompleteSessionId"] = scan.incomplete_session_id
    return {"items": items, "total": len(entries), "offset": offset, "limit": limit, "sessions": sessions,
            "totals": totals, "scan": scan_out}


def media_rows(media_ids: Iterable[str]) -> dict[str, list[MediaAsset]]:
    """Rows (holders) per media id."""
    out: dict[str, list[MediaAsset]] = {}
    for row in MediaAsset.objects.filter(sha256__in=list(media_ids)).order_by("created_at"):
        out.setdefault(row.sha256, []).append(row)
    return out


# ---------------------------------------------------------------------------------------------
# Image flow (spec 004 §Session UI projections: GET /api/sessions/:id/media/image-flow)

IMAGE_FLOW_POINT = "media.image-flow@1"


def image_flow_get(session: Any, registry: Any) -> dict[str, Any] | None:
    """``{pluginId, entryRuntimeId, assetRuntimeIds}`` of the first ``media.image-flow@1`` provider
    that answers, or None. Providers are the session's active plugins whose code is granted
    (builtins need no grant; a granted community entry is loaded first), in extension order; each
    gets PROVIDER_TIMEOUT_MS and is skipped when it fails, is late, or names a runtime that is not
    its own plugin's. The host binds ``pluginId`` to the provider (it never comes from the answer)."""
    runnable, _ = runnable_plugins(session, registry)
    granted = plugins_code_granted(session, registry, runnable)
    context = {"sessionId": session.pk, "point": IMAGE_FLOW_POINT, "activePlugins": list(runnable)}
    for provider in extension_providers(registry, granted, IMAGE_FLOW_POINT):
        try:
            answer = extension_call(provider, {**context, "pluginId": provider.plugin_id})
        except ExtensionFailed:
            continue
        own = set(registry.get(provider.plugin_id).manifest.runtime_ids)
        entry, assets = answer.get("entryRuntimeId"), answer.get("assetRuntimeIds")
        if not isinstance(entry, str) or entry not in own:
            continue
        if not isinstance(assets, list) or not all(isinstance(a, str) and a in own for a in assets):
            continue
        return {"pluginId": provider.plugin_id, "entryRuntimeId": entry, "assetRuntimeIds": list(dict.fromkeys(assets))}
    return None
