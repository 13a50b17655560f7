"""Response shapes of the media endpoints (wire names exactly as spec 004 §媒体管理 writes them)."""
from __future__ import annotations

from typing import Any, Literal

from ninja import Schema
from pydantic import Field

from covel.openapi import Wire, WireIn


class MediaUploadOut(Schema):
    """201 body of POST /api/media?sessionId=: content id (SHA-256 hex), sniffed MIME, size in bytes."""

    id: str
    mime: str
    size: int


class MediaTokenOut(Schema):
    """GET /api/sessions/:id/media-token?id=: a one-hour signed token and the download url using it."""

    token: str
    url: str
    expiresAt: str


def media_upload_out(asset) -> dict:
    """MediaUploadOut of a MediaAsset row."""
    return {"id": asset.sha256, "mime": asset.content_type, "size": asset.size_bytes}


class ImageFlow(Wire):
    """Which plugin's runtimes make the session's images (``media.image-flow@1``)."""

    plugin_id: str
    entry_runtime_id: str
    asset_runtime_ids: list[str]


class ImageFlowOut(Wire):
    """GET /api/sessions/:id/media/image-flow."""

    flow: ImageFlow | None = Field(description="null when no provider answered")


class MediaUploadQuery(WireIn):
    session_id: str = Field(description="The session that owns the upload (404 session_not_found)")


class MediaLibraryQuery(WireIn):
    kind: Literal["image", "audio", "video", "other"] | None = None
    usage: Literal["unused", "in-use"] | None = None
    limit: int | None = Field(None, ge=1, description="Default 60, at most 200")
    offset: int | None = Field(None, ge=0)
    scan_limit: int | None = Field(None, ge=1, description="Files scanned at most (default 200000)")
    refresh: Literal["1"] | None = Field(None, description="1: rescan instead of the scan of the last 30 s")


class MediaLibraryOut(Wire):
    items: list[dict[str, Any]]
    total: int
    offset: int
    limit: int
    sessions: list[dict[str, Any]]
    totals: dict[str, Any]
    scan: dict[str, Any]


class MediaLibraryDeleteIn(WireIn):
    """``{ids}`` (1-1000), ``{unused: true}``, or ``{ids: [one id], force: true}``; optional scanLimit."""

    ids: list[str] | None = Field(None, min_length=1, max_length=1000)
    unused: Literal[True] | None = None
    force: Literal[True] | None = None
    scan_limit: int | None = Field(None, ge=1)


class MediaLibraryDeleteOut(Wire):
    deleted_ids: list[str]
    bytes_deleted: int
    skipped: list[dict[str, Any]]


class MediaCleanupIn(WireIn):
    dry_run: bool | None = Field(None, description="Default true: report only. false also needs X-Confirm-Cleanup: yes")
    max_bytes: float | None = Field(None, ge=0)
    max_age_ms: float | None = Field(None, ge=0)
    keep_recent_bytes: float | None = Field(None, ge=0)
    scan_limit: int | None = Field(None, ge=1)


class MediaCleanupOut(Wire):
    ok: bool
    policy: dict[str, Any]
    result: dict[str, Any]


class MediaDownloadQuery(WireIn):
    token: str = Field(description="The signed token of GET /api/sessions/:id/media-token")


class MediaTokenQuery(WireIn):
    id: str = Field(pattern=r"^[0-9a-f]{64}$", description="The media id (SHA-256 hex)")
