"""The spec's error envelope and the exception every client-visible error is raised as.

Envelope (spec 004 §响应格式约定): ``{"error": str, "code"?: snake_case, "details"?: object}`` for every
non-2xx response. Services raise ``ApiError`` (or an app subclass in ``<app>/errors.py``); the
handlers registered in ``covel.api`` render it.
"""
from __future__ import annotations

import json
from typing import Any

from django.http import JsonResponse


class ApiError(Exception):
    """A failure a client may see: HTTP ``status``, stable ``code`` (or None), human ``message``.

    ``details`` is an optional JSON object of structured diagnostics.
    Subclasses may fix ``status``/``code`` as class attributes and take only the message.
    """

    status: int = 400
    code: str | None = None

    def __init__(
        self,
        status: int | None = None,
        code: str | None = None,
        message: str = "",
        details: dict[str, Any] | list | None = None,
    ) -> None:
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.message = message or self.__class__.__doc__ or "Request failed"
        self.details = details
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """The envelope dict for this error."""
        return error_body(self.message, self.code, self.details)


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Forbidden(ApiError):
    status = 403


class Unauthorized(ApiError):
    status = 401


class SessionNotFound(ApiError):
    """404 session_not_found, identical for every session-scoped route (spec 004 §响应格式约定)."""

    status = 404
    code = "session_not_found"

    def __init__(self, session_id: str) -> None:
        super().__init__(message=f"Session not found: {session_id}")


class SessionBusy(ApiError):
    """503 session_busy: the session's execution lock was not acquired in time. Retryable."""

    status = 503
    code = "session_busy"

    def __init__(self) -> None:
        super().__init__(message="Session is busy, please retry")


class ApiEarlyResponse(Exception):
    """Not an error: a 2xx JSON answer that ends a request before its normal response, raised from
    deep inside a service (e.g. 202 ``{status: "approval-required", ...}`` before any stream or
    write, spec 004 §社区插件授权). ``covel.api`` renders ``body`` with ``status``."""

    status: int = 202

    def __init__(self, body: dict[str, Any], status: int | None = None) -> None:
        if status is not None:
            self.status = status
        self.body = body
        super().__init__(str(body.get("status") or "early response"))


def error_body(message: str, code: str | None = None, details: Any = None) -> dict[str, Any]:
    """Build ``{"error", "code"?, "details"?}`` leaving out absent optional keys."""
    body: dict[str, Any] = {"error": message}
    if code:
        body["code"] = code
    if details is not None:
        body["details"] = details
    return body


def error_response(status: int, message: str, code: str | None = None, details: Any = None) -> JsonResponse:
    """A JsonResponse carrying the envelope with the given HTTP status."""
    return JsonResponse(error_body(message, code, details), status=status, json_dumps_params={"ensure_ascii": False})


def is_envelope(content: bytes) -> bool:
    """True when ``content`` is a JSON object with a string ``error`` key."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), str)
