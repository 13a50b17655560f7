"""Client-visible errors of the media app (spec 004 §媒体管理, §Snapshot / Fork 媒体的处理)."""
from __future__ import annotations

from covel.errors import ApiError


class MediaInvalid(ApiError):
    """400: an upload that is not an accepted image (codes: empty_body, unsupported_media_type, invalid_image)."""

    status = 400


class MediaNotFound(ApiError):
    """404 not_found: no such media, or it is not referenced by the caller's session."""

    status = 404
    code = "not_found"

    def __init__(self, media_id: str) -> None:
        super().__init__(message=f"Media not found: {media_id}")


class MediaTokenInvalid(ApiError):
    """401 media_token_invalid: the download token is missing, forged, expired or for another media id."""

    status = 401
    code = "media_token_invalid"

    def __init__(self) -> None:
        super().__init__(message="Invalid or expired media token")


class MediaUnavailable(ApiError):
    """503 unavailable: the endpoint is not offered in this deployment tier."""

    status = 503
    code = "unavailable"


class MediaRequestInvalid(ApiError):
    """400 invalid_request: a malformed cleanup / library request."""

    status = 400
    code = "invalid_request"


class ScanLimitExceeded(ApiError):
    """400 limit_exceeded: a session has more rows to scan than ``scanLimit`` (cleanup refuses, never truncates)."""

    status = 400
    code = "limit_exceeded"

    def __init__(self, session_id: str, scan_limit: int) -> None:
        super().__init__(message=f"scan limit exceeded for session {session_id} (scanLimit {scan_limit})",
                         details={"sessionId": session_id, "scanLimit": scan_limit})


class ScanIncomplete(ApiError):
    """409 scan_incomplete: a non-force library delete while some session exceeded the scan limit."""

    status = 409
    code = "scan_incomplete"

    def __init__(self, session_id: str) -> None:
        super().__init__(message=f"Media scan incomplete (session {session_id} exceeds scanLimit); nothing deleted",
                         details={"incompleteSessionId": session_id})


class OperationInProgress(ApiError):
    """429 operation_in_progress: another cleanup is still running."""

    status = 429
    code = "operation_in_progress"

    def __init__(self) -> None:
        super().__init__(message="Operation already in progress")


class MediaReferenceForbidden(ApiError):
    """403 media_reference_forbidden: a fork uses existing media that is not authorized to the parent session."""

    status = 403
    code = "media_reference_forbidden"

    def __init__(self, media_ids: list[str]) -> None:
        super().__init__(message="Media used by the session is not authorized to it", details={"mediaIds": media_ids})


class MediaReferenceFailed(ApiError):
    """500 fork_media_reference_failed: writing the child's media references failed (fixed message)."""

    status = 500
    code = "fork_media_reference_failed"

    def __init__(self) -> None:
        super().__init__(message="Failed to reference media for fork")
