"""Every way the media store changes (spec 004 §媒体管理): upload, fork references, cleanup, library delete.

Bytes are written before the row that holds them (write to a temp file, then an atomic rename), so a
failed transaction leaves at most an unreferenced file, which cleanup removes later — never a row
without bytes. Files are content-addressed (id = SHA-256), so rewriting one is a no-op.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable

from django.conf import settings
from django.core import signing
from django.db import DatabaseError, transaction
from django.utils import timezone

from covel.errors import SessionBusy
from media import selectors
from media.errors import (
    MediaInvalid,
    MediaReferenceFailed,
    MediaReferenceForbidden,
    MediaRequestInvalid,
    OperationInProgress,
    ScanIncomplete,
)
from media.models import MediaAsset

logger = logging.getLogger("covel.media")

# Spec §POST /api/media: accepted image signatures; the stored MIME comes from the bytes, not the header.
SVG_MIME = "image/svg+xml"
TOKEN_SALT = "covel.media.token"
TOKEN_MAX_AGE_SECONDS = 3600
LIBRARY_SCOPE = "*"
CLEANUP_LOCK_KEY = "media-cleanup:"
LIBRARY_DELETE_IDS_MAX = 1000


def _bytes_write(media_id: str, data: bytes) -> None:
    path = selectors.media_path(media_id)
    if path.is_file() and path.stat().st_size == len(data):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def media_upload(*, session_id: str, data: bytes, declared_type: str) -> MediaAsset:
    """Store an uploaded image for a session (spec 004 POST /api/media?sessionId=).

    declared_type: the request's Content-Type; must be image/* and never image/svg+xml.
    data: the raw bytes (≤ 20 MiB, enforced before the view). Returns the session's MediaAsset row
    (existing one when the session already holds this content). Raises MediaInvalid (400
    empty_body | unsupported_media_type | invalid_image), SessionDeleting (409).
    """
    from sessions.errors import SessionDeleting
    from sessions.models import Session

    if not data:
        raise MediaInvalid(code="empty_body", message="The upload body is empty")
    mime_declared = (declared_type or "").split(";", 1)[0].strip().lower()
    if mime_declared == SVG_MIME:
        raise MediaInvalid(code="unsupported_media_type", message="image/svg+xml is not accepted")
    if not mime_declared.startswith("image/"):
        raise MediaInvalid(code="unsupported_media_type", message="Only image/* uploads are accepted")
    mime = selectors.mime_sniff(data[:64])
    if mime is None:
        raise MediaInvalid(code="invalid_image", message="Bytes are not a PNG, JPEG, GIF, WebP, AVIF or BMP image")
    media_id = hashlib.sha256(data).hexdigest()
    _bytes_write(media_id, data)
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        if session.deletion_state == Session.DELETION_DELETING:
            raise SessionDeleting()
        existing = selectors.media_session_reference(session_id, media_id)
        if existing is not None:
            return existing
        return MediaAsset.objects.create(
            session_id=session_id, kind=selectors.media_kind(mime), content_type=mime, size_bytes=len(data),
            sha256=media_id, storage_path=selectors.media_relative_path(media_id),
        )


MEDIA_PUT_MAX_BYTES = 20 * 1024 * 1024


def media_put(*, session_id: str, data: bytes, declared_type: str | None = None) -> dict[str, Any]:
    """Store bytes a function runtime produced in the session's media library (spec 004 §图像/媒体生成输出:
    ctx.media.put / ctx.media.ingestUrl). The MIME comes from the bytes (PNG, JPEG, GIF, WebP, AVIF,
    BMP); ``declared_type`` is only a hint and SVG is refused like an upload.

    Returns the MediaRef ``{id, mime, sha256, sizeBytes}`` (the existing row when the session already
    holds the content). Raises MediaInvalid (empty_body | unsupported_media_type | invalid_image |
    too_large: over 20 MiB), SessionDeleting.
    """
    if len(data) > MEDIA_PUT_MAX_BYTES:
        raise MediaInvalid(code="too_large", message="media over 20 MiB is not accepted")
    sniffed = selectors.mime_sniff(data[:64]) if data else None
    asset = media_upload(session_id=session_id, data=data, declared_type=sniffed or declared_type or "image/unknown")
    return {"id": str(asset.id), "mime": asset.content_type, "sha256": asset.sha256, "sizeBytes": asset.size_bytes}


def media_references_copy(*, from_session_id: str, to_session_id: str, media_ids: Iterable[str]) -> int:
    """Give ``to_session_id`` its own reference to each media id that ``from_session_id`` uses (fork).

    Must run inside the caller's transaction. Ids whose bytes are no longer in the store are skipped
    and counted (returned: missingMediaCount, each id once). Existing media not referenced by the
    source session → MediaReferenceForbidden (403 media_reference_forbidden), nothing written.
    A failed write → MediaReferenceFailed (500 fork_media_reference_failed); the caller rolls back.
    (spec 004 §POST /api/sessions/:id/fork 媒体的处理)
    """
    ids = sorted(set(media_ids))
    missing = 0
    sources: list[MediaAsset] = []
    forbidden: list[str] = []
    for media_id in ids:
        if not selectors.media_exists(media_id):
            missing += 1
            continue
        row = selectors.media_session_reference(from_session_id, media_id)
        if row is None:
            forbidden.append(media_id)
        else:
            sources.append(row)
    if forbidden:
        raise MediaReferenceForbidden(forbidden)
    try:
        with transaction.atomic():
            MediaAsset.objects.bulk_create([
                MediaAsset(session_id=to_session_id, kind=r.kind, content_type=r.content_type, size_bytes=r.size_bytes,
                           sha256=r.sha256, storage_path=r.storage_path)
                for r in sources
            ])
    except DatabaseError:
        logger.exception("fork %s -> %s: media references failed", from_session_id, to_session_id)
        raise MediaReferenceFailed() from None
    return missing


# --- download tokens ----------------------------------------------------------------------------


def _token_key() -> str:
    return settings.COVEL_MEDIA_TOKEN_SECRET or settings.SECRET_KEY


def media_token_issue(*, media_id: str, session_id: str) -> dict[str, Any]:
    """A signed download token for ``media_id`` on behalf of ``session_id`` (``"*"`` = the library).

    Returns ``{"token", "url", "expiresAt"}``; valid for one hour (HMAC-SHA256 over id, scope and time).
    """
    from covel.times import iso

    token = signing.dumps({"m": media_id, "s": session_id}, key=_token_key(), salt=TOKEN_SALT, compress=False)
    expires_at = timezone.now() + timedelta(seconds=TOKEN_MAX_AGE_SECONDS)
    return {"token": token, "url": f"/api/media/{media_id}?token={token}", "expiresAt": iso(expires_at)}


def media_token_check(*, media_id: str, token: str) -> str:
    """The scope (session id or ``"*"``) a valid token for ``media_id`` was issued to.

    Raises MediaTokenInvalid (401 media_token_invalid) for a missing, forged or expired token or one
    issued for another media id.
    """
    from media.errors import MediaTokenInvalid

    if not token:
        raise MediaTokenInvalid()
    try:
        data = signing.loads(token, key=_token_key(), salt=TOKEN_SALT, max_age=TOKEN_MAX_AGE_SECONDS)
    except signing.BadSignature:
        raise MediaTokenInvalid() from None
    if not isinstance(data, dict) or data.get("m") != media_id or not isinstance(data.get("s"), str):
        raise MediaTokenInvalid()
    return data["s"]


# --- cleanup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanupPolicy:
    """MediaLifecyclePolicy (spec §POST /api/media/cleanup); 0 disables a bound.

    max_bytes: delete unreferenced files, oldest first, only until the store is at most this big.
    max_age_ms: only unreferenced files at least this old are deleted.
    keep_recent_bytes: the newest unreferenced files up to this many bytes are kept.
    """

    dry_run: bool = True
    max_bytes: int = 0
    max_age_ms: int = 0
    keep_recent_bytes: int = 0
    scan_limit: int = 1000


def cleanup_policy_parse(data: dict[str, Any]) -> CleanupPolicy:
    """Validate a cleanup body; raises MediaRequestInvalid (400 invalid_request)."""
    dry_run = data.get("dryRun", True)
    if not isinstance(dry_run, bool):
        raise MediaRequestInvalid(message="dryRun must be a boolean")
    values: dict[str, Any] = {}
    for wire, name in (("maxBytes", "max_bytes"), ("maxAgeMs", "max_age_ms"), ("keepRecentBytes", "keep_recent_bytes")):
        value = data.get(wire, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise MediaRequestInvalid(message=f"{wire} must be a non-negative number")
        values[name] = int(value)
    scan_limit = data.get("scanLimit", 1000)
    if isinstance(scan_limit, bool) or not isinstance(scan_limit, int) or scan_limit < 1:
        raise MediaRequestInvalid(message="scanLimit must be a positive integer")
    return CleanupPolicy(dry_run=dry_run, scan_limit=scan_limit, **values)


def media_cleanup(policy: CleanupPolicy, *, is_confirmed: bool) -> dict[str, Any]:
    """Delete store files no session uses (spec 004 POST /api/media/cleanup); returns ``{ok, policy, result}``.

    Dry run (default) only reports. A real run needs ``is_confirmed`` (the X-Confirm-Cleanup: yes
    header), else MediaRequestInvalid (400 invalid_request). Protected: files any session holds or
    mentions in messages, plugin_data, runtime_outputs, trace_events, snapshots, turn_results, and
    files with a pin younger than 24 h. Pins at least 24 h old are listed in expiredRefs and, on a
    real run, removed. Raises ScanLimitExceeded (400 limit_exceeded) when a session has more rows
    than ``scan_limit``; OperationInProgress (429) while another cleanup runs.
    """
    from sessions.locks import session_lock

    if not policy.dry_run and not is_confirmed:
        raise MediaRequestInvalid(message="Real deletion requires the header X-Confirm-Cleanup: yes")
    try:
        with session_lock(CLEANUP_LOCK_KEY, timeout_seconds=0):
            return _cleanup_run(policy)
    except SessionBusy:
        raise OperationInProgress() from None


def _cleanup_run(policy: CleanupPolicy) -> dict[str, Any]:
    from covel.times import iso

    scan = selectors.media_scan(scan_limit=policy.scan_limit, strict=True)
    inventory = selectors.media_inventory()
    protected = sorted(m for m in inventory if scan.used_by.get(m) or scan.fresh_pins.get(m))
    protected_set = set(protected)
    candidates = sorted((m for m in inventory if m not in protected_set), key=lambda m: (inventory[m][1], m))
    now = timezone.now()
    if policy.max_age_ms:
        candidates = [m for m in candidates if (now - inventory[m][1]).total_seconds() * 1000 >= policy.max_age_ms]
    if policy.keep_recent_bytes:
        kept, newest_first = 0, list(reversed(candidates))
        keep: set[str] = set()
        for media_id in newest_first:
            if kept + inventory[media_id][0] > policy.keep_recent_bytes:
                break
            kept += inventory[media_id][0]
            keep.add(media_id)
        candidates = [m for m in candidates if m not in keep]
    total_bytes = sum(size for size, _ in inventory.values())
    if policy.max_bytes:
        chosen, remaining = [], total_bytes
        for media_id in candidates:
            if remaining <= policy.max_bytes:
                break
            chosen.append(media_id)
            remaining -= inventory[media_id][0]
        candidates = chosen
    expired = [{"mediaId": p.sha256, "sessionId": f"{selectors.PIN_PREFIX}{p.id}", "pluginId": None,
                "createdAt": iso(p.created_at)} for p in scan.expired_pins]
    deleted = candidates
    if not policy.dry_run:
        MediaAsset.objects.filter(pk__in=[p.pk for p in scan.expired_pins]).delete()
        deleted = [m for m in candidates if _file_delete_if_unheld(m)]
    bytes_deleted = sum(inventory[m][0] for m in deleted)
    return {
        "ok": True,
        "policy": {"dryRun": policy.dry_run, "expireRefs": {"sessionIdPrefix": selectors.PIN_PREFIX,
                                                            "maxAgeMs": int(selectors.PIN_MAX_AGE.total_seconds() * 1000)},
                   "maxBytes": policy.max_bytes, "maxAgeMs": policy.max_age_ms, "keepRecentBytes": policy.keep_recent_bytes},
        "result": {
            "scanned": len(inventory), "protected": len(protected), "retained": len(inventory) - len(deleted),
            "deleted": len(deleted), "totalBytes": total_bytes, "bytesDeleted": bytes_deleted,
            "bytesRetained": total_bytes - bytes_deleted, "protectedIds": protected, "deletedIds": deleted,
            "expiredRefs": expired,
        },
    }


def _file_delete_if_unheld(media_id: str) -> bool:
    """Unlink a file unless a session or a fresh pin took hold of it since the scan; drops stale pin rows."""
    cutoff = timezone.now() - selectors.PIN_MAX_AGE
    with transaction.atomic():
        holders = MediaAsset.objects.select_for_update().filter(sha256=media_id)
        if holders.filter(session__isnull=False).exists() or holders.filter(created_at__gt=cutoff).exists():
            return False
        holders.delete()
        return _unlink(media_id)


def _unlink(media_id: str) -> bool:
    try:
        selectors.media_path(media_id).unlink()
        return True
    except FileNotFoundError:
        return False


# --- library delete -----------------------------------------------------------------------------


def library_delete_parse(data: dict[str, Any]) -> tuple[list[str] | None, bool, bool, int]:
    """(ids, is_unused, is_force, scan_limit) of a library delete body; 400 invalid_request otherwise.

    Accepted: ``{ids: [1..1000 ids]}``, ``{unused: true}``, ``{ids: [one id], force: true}``, each with
    an optional ``scanLimit`` (positive integer, default 200000).
    """
    scan_limit = data.get("scanLimit", 200000)
    if isinstance(scan_limit, bool) or not isinstance(scan_limit, int) or scan_limit < 1:
        raise MediaRequestInvalid(message="scanLimit must be a positive integer")
    keys = set(data) - {"scanLimit"}
    ids = data.get("ids")
    ids_ok = isinstance(ids, list) and 1 <= len(ids) <= LIBRARY_DELETE_IDS_MAX and all(isinstance(i, str) for i in ids)
    if keys == {"ids"} and ids_ok:
        return list(dict.fromkeys(ids)), False, False, scan_limit
    if keys == {"unused"} and data["unused"] is True:
        return None, True, False, scan_limit
    if keys == {"ids", "force"} and data["force"] is True and ids_ok and len(ids) == 1:
        return list(ids), False, True, scan_limit
    raise MediaRequestInvalid(message="body must be {ids}, {unused: true} or {ids: [one id], force: true}")


def media_library_delete(*, ids: list[str] | None, is_unused: bool, is_force: bool, scan_limit: int) -> dict[str, Any]:
    """POST /api/media/library/delete: ``{deletedIds, bytesDeleted, skipped: [{id, reason}]}``.

    Rescans every session (no cached scan). Non-force deletes only files currently unused; others are
    skipped with reason in_use | held | not_found. Force deletes one file and every reference to it.
    Raises ScanIncomplete (409 scan_incomplete) for a non-force request when the scan is incomplete.
    """
    scan = selectors.media_scan(scan_limit=scan_limit, strict=False)
    if not is_force and not scan.is_complete:
        raise ScanIncomplete(scan.incomplete_session_id or "")
    inventory = selectors.media_inventory()
    deleted: list[str] = []
    skipped: list[dict[str, str]] = []
    if is_unused:
        ids = sorted(m for m in inventory if scan.usage(m) == "unused")
    for media_id in ids or []:
        if media_id not in inventory:
            skipped.append({"id": media_id, "reason": "not_found"})
            continue
        if is_force:
            with transaction.atomic():
                MediaAsset.objects.filter(sha256=media_id).delete()
                if _unlink(media_id):
                    deleted.append(media_id)
            continue
        state = scan.usage(media_id)
        if state != "unused":
            skipped.append({"id": media_id, "reason": "in_use" if state == "used" else "held"})
        elif _file_delete_if_unheld(media_id):
            deleted.append(media_id)
        else:
            skipped.append({"id": media_id, "reason": "in_use"})
    selectors.media_scan_cache_clear()
    return {"deletedIds": deleted, "bytesDeleted": sum(inventory[m][0] for m in deleted), "skipped": skipped}
