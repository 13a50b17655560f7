"""Response shapes of the media endpoints (wire names exactly as spec 004 §媒体管理 writes them)."""
from __future__ import annotations

from ninja import Schema


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
