"""Media endpoints (spec 004 §媒体管理, §GET /api/media/library, §POST /api/media/cleanup). Thin:
authorize, parse, delegate to media.services / media.selectors.

Specific paths (/media/library, /media/cleanup) are declared before /media/{media_id} so that the
id pattern never shadows them.
"""
from __future__ import annotations

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse
from ninja import Router
from ninja.responses import Status

from covel.errors import Forbidden
from media import selectors, services
from media.errors import MediaNotFound, MediaRequestInvalid, MediaUnavailable
from covel.openapi import BINARY, OPERATOR, OWNER, SESSION_ERRORS, contract, errors_merge
from media.schemas import (ImageFlowOut, MediaCleanupIn, MediaCleanupOut, MediaDownloadQuery, MediaLibraryDeleteIn,
                           MediaLibraryDeleteOut, MediaLibraryOut, MediaLibraryQuery, MediaTokenOut, MediaTokenQuery,
                           MediaUploadOut, MediaUploadQuery, media_upload_out)
from plugins_app.registry import plugin_registry
from sessions.api_scope import request_json, session_scope
from covel.auth import require_operator
from sessions.auth import session_get_authorized

router = Router(tags=["media"])

CONFIRM_HEADER_VALUE = "yes"
LIBRARY_LIMIT_DEFAULT, LIBRARY_LIMIT_MAX = 60, 200
LIBRARY_SCAN_LIMIT_DEFAULT = 200000


def _library_available() -> None:
    # Only where one player owns all data (spec: DEPLOYMENT_TIER=self); hosted tiers share media.
    if settings.DEPLOYMENT_TIER != "self":
        raise MediaUnavailable(message="The media library is not available in this deployment")


def _query_int(request: HttpRequest, name: str, default: int, *, minimum: int) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    # isdigit() alone admits "²" and other digits int() refuses.
    if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum:
        raise MediaRequestInvalid(message=f"{name} must be an integer >= {minimum}")
    return int(raw)


@router.post("/media", response={201: MediaUploadOut})
@contract(ok=MediaUploadOut, status=201, body={"image/*": BINARY["schema"]}, query=MediaUploadQuery, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, {400: "invalid_request (no sessionId) / unsupported_media_type / empty_body "
                                                    "/ invalid_image (SVG is always refused)", 413: "over 20 MiB"}))
def upload_media(request: HttpRequest):
    """Upload an image: raw bytes, Content-Type image/* (never SVG), ``?sessionId=`` required.

    400 invalid_request (no sessionId) | unsupported_media_type | empty_body | invalid_image;
    404 session_not_found; 401 session_owner_required (hosted tiers); 413 over 20 MiB.
    """
    session_id = request.GET.get("sessionId", "")
    if not session_id:
        raise MediaRequestInvalid(message="sessionId query parameter is required")
    session = session_get_authorized(request, session_id)
    asset = services.media_upload(session_id=session.id, data=request.body,
                                  declared_type=request.META.get("CONTENT_TYPE", ""))
    return Status(201, media_upload_out(asset))


@router.get("/media/library")
@contract(ok=MediaLibraryOut, query=MediaLibraryQuery, errors={400: "invalid_request", 503: "unavailable: the library exists only in the personal tier"})
def list_media_library(request: HttpRequest):
    """The player's media library (self tier only: 503 unavailable elsewhere, operator token or not)."""
    _library_available()
    kind = request.GET.get("kind") or None
    if kind is not None and kind not in selectors.KINDS:
        raise MediaRequestInvalid(message="kind must be image, audio, video or other")
    usage = request.GET.get("usage") or None
    if usage is not None and usage not in ("unused", "in-use"):
        raise MediaRequestInvalid(message="usage must be unused or in-use")
    limit = min(_query_int(request, "limit", LIBRARY_LIMIT_DEFAULT, minimum=1), LIBRARY_LIMIT_MAX)
    offset = _query_int(request, "offset", 0, minimum=0)
    scan_limit = _query_int(request, "scanLimit", LIBRARY_SCAN_LIMIT_DEFAULT, minimum=1)
    scan = selectors.media_scan_cached(scan_limit=scan_limit, refresh=request.GET.get("refresh") == "1")
    return selectors.media_library(
        kind=kind, usage=usage, limit=limit, offset=offset, scan=scan,
        url_for=lambda media_id: services.media_token_issue(media_id=media_id, session_id=services.LIBRARY_SCOPE)["url"],
    )


@router.post("/media/library/delete")
@contract(ok=MediaLibraryDeleteOut, body=MediaLibraryDeleteIn, errors={400: "invalid_request", 503: "unavailable: the library exists only in the personal tier"})
def delete_media_library_items(request: HttpRequest):
    """Delete chosen media, or every unused one (self tier only)."""
    _library_available()
    ids, is_unused, is_force, scan_limit = services.library_delete_parse(request_json(request))
    return services.media_library_delete(ids=ids, is_unused=is_unused, is_force=is_force, scan_limit=scan_limit)


@router.post("/media/cleanup")
@contract(ok=MediaCleanupOut, body=MediaCleanupIn, body_required=False, security=OPERATOR, errors={
    400: "invalid_request (a bad body; dryRun false without X-Confirm-Cleanup: yes) / limit_exceeded",
    401: "operator_token_required (demo)", 403: "forbidden: COVEL_MEDIA_CLEANUP_ENABLED is off",
    429: "operation_in_progress", 503: "unavailable (commercial)"})
def cleanup_media(request: HttpRequest):
    """Destructive maintenance: remove unreferenced files (spec 004 POST /api/media/cleanup).

    503 unavailable (commercial), 401 operator_token_required (demo), 403 forbidden (not enabled),
    400 invalid_request (bad body; dryRun false without X-Confirm-Cleanup: yes), 400 limit_exceeded,
    429 operation_in_progress.
    """
    if settings.DEPLOYMENT_TIER == "commercial":
        raise MediaUnavailable(message="cleanup endpoint not available in this deployment tier")
    require_operator(request)
    if not settings.COVEL_MEDIA_CLEANUP_ENABLED:
        raise Forbidden(code="forbidden", message="cleanup endpoint disabled")
    policy = services.cleanup_policy_parse(request_json(request))
    is_confirmed = request.headers.get("X-Confirm-Cleanup", "").strip().lower() == CONFIRM_HEADER_VALUE
    return services.media_cleanup(policy, is_confirmed=is_confirmed)


@router.get("/media/{media_id}")
@contract(query=MediaDownloadQuery, content={"*/*": BINARY}, errors={
    401: "media_token_invalid", 404: "not_found: the token's session no longer references the file, or it is gone"},
          headers={"ETag": "The media id", "Cache-Control": "private, max-age=3600"})
def download_media(request: HttpRequest, media_id: str):
    """The bytes of one media file, with ``?token=`` from GET /api/sessions/:id/media-token.

    401 media_token_invalid; 404 not_found when the token's session no longer references the file or
    the bytes are gone. Library tokens (self tier) need no session reference.
    """
    if not selectors.MEDIA_ID_RE.match(media_id):
        raise MediaNotFound(media_id)
    scope = services.media_token_check(media_id=media_id, token=request.GET.get("token", ""))
    if scope == services.LIBRARY_SCOPE:
        _library_available()
        rows = selectors.media_rows([media_id]).get(media_id, [])
        asset = rows[0] if rows else None
    else:
        asset = selectors.media_session_reference(scope, media_id)
        if asset is None:
            raise MediaNotFound(media_id)
    path = selectors.media_path(media_id)
    if not path.is_file():
        raise MediaNotFound(media_id)
    etag = f'"{media_id}"'
    headers = {"ETag": etag, "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=3600",
               "Referrer-Policy": "no-referrer", "Content-Security-Policy": "sandbox"}
    if request.headers.get("If-None-Match", "").strip() == etag:
        response = HttpResponse(status=304)
    else:
        content_type = asset.content_type if asset else "application/octet-stream"
        response = FileResponse(path.open("rb"), content_type=content_type)
    for name, value in headers.items():
        response[name] = value
    return response


@router.get("/sessions/{session_id}/media-token", auth=session_scope, response=MediaTokenOut)
@contract(ok=MediaTokenOut, query=MediaTokenQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request: id is not a media id", 404: "not_found: the session does not reference the file"}))
def issue_media_token(request: HttpRequest, session_id: str):
    """A one-hour download token for ``?id=<mediaId>``; 404 not_found unless the session references it."""
    media_id = request.GET.get("id", "")
    if not selectors.MEDIA_ID_RE.match(media_id):
        raise MediaRequestInvalid(message="id must be a media id (SHA-256 hex)")
    if selectors.media_session_reference(session_id, media_id) is None:
        raise MediaNotFound(media_id)
    return services.media_token_issue(media_id=media_id, session_id=session_id)


@router.get("/sessions/{session_id}/media/image-flow", auth=session_scope)
@contract(ok=ImageFlowOut, security=OWNER, errors=SESSION_ERRORS)
def get_session_image_flow(request: HttpRequest, session_id: str):
    """``{flow: null | {pluginId, entryRuntimeId, assetRuntimeIds}}``: which plugin's runtimes
    generate the session's images (the first ``media.image-flow@1`` provider to answer in 500 ms)."""
    return {"flow": selectors.image_flow_get(request.auth, plugin_registry())}
