"""Cross-cutting HTTP rules of spec 004 applied before any route runs.

All middleware here is sync- and async-capable so that long-lived SSE responses stay on the event
loop (a sync-only middleware would pin one thread per open stream).
"""
from __future__ import annotations

import logging
import re
import time
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError

from covel import metrics
from covel.errors import ApiError, error_response, is_envelope
from covel.jsonbody import INVALID_JSON_BODY, json_body_load
from covel.limits import PAYLOAD_TOO_LARGE, body_limit_bytes

logger = logging.getLogger("covel.request")

_WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
_FOREIGN_DESTS = {"iframe", "frame", "embed", "object"}


class _BaseMiddleware:
    """Runs ``check(request)`` first; a returned response short-circuits the route."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self._is_async = iscoroutinefunction(get_response)
        if self._is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self._is_async:
            return self._acall(request)
        early = self.check(request)
        if early is not None:
            return self.finish(request, early)
        return self.finish(request, self.get_response(request))

    async def _acall(self, request: HttpRequest):
        early = self.check(request)
        if early is not None:
            return self.finish(request, early)
        return self.finish(request, await self.get_response(request))

    def check(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def finish(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def _host_only(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class HostCheckMiddleware(_BaseMiddleware):
    """Self tier only: 403 host_not_allowed unless Host is loopback or in COVEL_ALLOWED_HOSTS. The
    browser-private profile is a public site: no Host check (spec 004 §生产 MemoryStore 例外)."""

    def check(self, request):
        from covel.auth import browser_private

        if settings.DEPLOYMENT_TIER != "self" or browser_private():
            return None
        host = _host_only(request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", ""))
        allowed = _LOOPBACK_HOSTS | {h.lower() for h in settings.COVEL_ALLOWED_HOSTS}
        if host in allowed:
            return None
        return error_response(403, "Host not allowed", "host_not_allowed")


class OriginCheckMiddleware(_BaseMiddleware):
    """Browser write-origin and foreign-embedding checks (spec 004 §鉴权, CORS note).

    - Any method on /api*: Origin ``null`` or Sec-Fetch-Dest iframe/frame/embed/object → 403
      foreign_request_refused.
    - POST/PUT/PATCH/DELETE carrying Origin that is neither in CORS_ORIGIN (settings.CORS_ALLOWED_ORIGINS) nor the requested host
      (Host or X-Forwarded-Host) → 403 origin_not_allowed.
    """

    def check(self, request):
        origin = request.META.get("HTTP_ORIGIN")
        if _is_api(request.path):
            dest = request.META.get("HTTP_SEC_FETCH_DEST", "").strip().lower()
            if (origin is not None and origin.strip().lower() == "null") or dest in _FOREIGN_DESTS:
                return error_response(403, "Foreign request refused", "foreign_request_refused")
        if origin is None or request.method not in _WRITE_METHODS:
            return None
        origin = origin.strip()
        if origin in settings.CORS_ALLOWED_ORIGINS:
            return None
        origin_host = (urlsplit(origin).netloc or "").lower()
        targets = {(request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", "")).lower(), request.META.get("HTTP_X_FORWARDED_HOST", "").lower()}
        if origin_host and origin_host in targets:
            return None
        return error_response(403, "Origin not allowed", "origin_not_allowed")


class BodyLimitMiddleware(_BaseMiddleware):
    """413 ``{"error": "Payload Too Large"}`` before any route reads an oversized body.

    Chunked bodies under ASGI are cut off earlier by ``covel.asgi_limits.BodyLimitASGI``; this layer
    covers Content-Length and bodies already read (WSGI, test client).
    """

    def check(self, request):
        limit = body_limit_bytes(request.path, request.method or "GET")
        length = request.META.get("CONTENT_LENGTH") or ""
        if length.isascii() and length.isdigit() and int(length) > limit:
            return JsonResponse(PAYLOAD_TOO_LARGE, status=413)
        return None


# Routes whose body is raw bytes whatever its Content-Type (their @contract documents no JSON body;
# tests/covel/test_request_bodies.py checks this list against the OpenAPI document).
_RAW_BODY_PATHS = re.compile(r"^/api/(?:media|model-relay/requests/[^/]+/chunk)/?$")


def _raw_body_route(path: str, content_type: str) -> bool:
    """The only bodies under /api/ that are not JSON: POST /api/media takes the image's raw bytes
    (spec 004 §媒体: Content-Type is the file's MIME), a model-relay chunk the next piece of an
    answer, and the /api/install upload forms take multipart/form-data (their JSON variants still go
    through JsonBodyMiddleware)."""
    if _RAW_BODY_PATHS.match(path):
        return True
    return content_type == "multipart/form-data" and (path == "/api/install" or path.startswith("/api/install/"))


class JsonBodyMiddleware(_BaseMiddleware):
    """One body rule for every JSON write route on /api/ (spec 004 在本机怎么调用: 请求体是 JSON).

    A non-empty POST/PUT/PATCH/DELETE body is parsed as JSON whatever its Content-Type: absent,
    application/json, text/plain, application/x-www-form-urlencoded (what ``curl -d`` sends) or any
    other; a body is never silently ignored (an empty multipart form counts as no body, one with
    parts is 400 invalid_json_body). Malformed → 400 invalid_json_body; not an object or
    not storable (covel.jsonbody: no NUL / unpaired surrogate, finite numbers, bounded depth) →
    400 invalid_request_body. The parsed object is ``request.covel_json``. Only the raw-body routes
    of _raw_body_route are left alone. Cross-origin "simple" text/plain writes from refused
    origins never get here: OriginCheckMiddleware answers them 403 first.
    """

    def check(self, request):
        if not _is_api(request.path) or request.method not in _WRITE_METHODS:
            return None
        content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if _raw_body_route(request.path, content_type):
            return None
        body = request.body  # read first: the route may still read request.body after request.POST
        if not body.strip():
            return None
        if content_type == "multipart/form-data":
            # A form with no parts (what a bare test-client or form POST sends) carries nothing;
            # any field or file on a JSON route would otherwise be silently ignored.
            try:
                empty = not request.POST and not request.FILES
            except MultiPartParserError:
                empty = False
            if empty:
                return None
            return error_response(400, "This route takes a JSON body (Content-Type: application/json), not "
                                  "multipart/form-data", INVALID_JSON_BODY)
        try:
            data = json_body_load(body)
        except ApiError as exc:
            return error_response(exc.status, exc.message, exc.code, exc.details)
        if not isinstance(data, dict):
            return error_response(400, "Request body must be a JSON object", "invalid_request_body")
        request.covel_json = data
        return None


_SESSION_SEGMENT_RE = re.compile(r"^/api/(?:sessions|traces)/([^/]*)")


class UrlNulMiddleware(_BaseMiddleware):
    """NUL in the URL under /api/ (PostgreSQL text cannot hold it; spec 004 §响应格式约定: bad input
    is a 4xx, never a 500). JSON bodies are checked by JsonBodyMiddleware / covel.jsonbody.

    - NUL in the path: no resource can have such an id → 404 (``session_not_found`` when it is the
      session segment of /api/sessions/:id… or /api/traces/:id…, else ``not_found``).
    - NUL in a query parameter name or value → 400 ``invalid_query`` (``invalid_cursor`` for ``cursor``).
    """

    def check(self, request):
        if not _is_api(request.path):
            return None
        if "\x00" in request.path:
            match = _SESSION_SEGMENT_RE.match(request.path)
            if match and "\x00" in match.group(1):
                return error_response(404, f"Session not found: {match.group(1)!r}", "session_not_found")
            return error_response(404, f"Not found: {request.method} {request.path!r}", "not_found")
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                if key == "cursor":  # no cursor we issue holds NUL: the spec's code for foreign cursors
                    return error_response(400, "Invalid cursor", "invalid_cursor")
                return error_response(400, "Query parameters must not contain NUL characters", "invalid_query")
        return None


class ApiEnvelopeMiddleware(_BaseMiddleware):
    """Every non-2xx under /api/ leaves in the error envelope (unknown routes, 405, framework errors)."""

    def finish(self, request, response):
        if not _is_api(request.path) or response.status_code < 400 or response.streaming:
            return response
        if response.get("Content-Type", "").startswith("application/json") and is_envelope(response.content):
            return response
        if response.status_code == 404:
            return error_response(404, f"Not found: {request.method} {request.path}", "not_found")
        if response.status_code == 405:
            envelope = error_response(405, f"Method not allowed: {request.method} {request.path}", "method_not_allowed")
            if response.has_header("Allow"):  # RFC 9110 §15.5.6: a 405 lists the methods the route has
                envelope["Allow"] = response["Allow"]
            return envelope
        if response.status_code >= 500:
            return error_response(response.status_code, "Internal server error")
        return error_response(response.status_code, response.reason_phrase or "Request failed")


class RequestLogMiddleware(_BaseMiddleware):
    """One log line per request: method, path (no query string: it may carry tokens), status, ms;
    and the request-latency histogram (covel.metrics), labelled by URL pattern."""

    def check(self, request):
        request.covel_started = time.perf_counter()
        return None

    def finish(self, request, response):
        elapsed_ms = round((time.perf_counter() - getattr(request, "covel_started", time.perf_counter())) * 1000, 2)
        fields = {
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "duration_ms": elapsed_ms,
            "remote": request.META.get("REMOTE_ADDR"),
        }
        logger.info("%s %s %s %sms", request.method, request.path, response.status_code, elapsed_ms, extra={"fields": fields})
        match = getattr(request, "resolver_match", None)
        metrics.request_observe(method=request.method or "", route=getattr(match, "route", "") or "",
                                status=response.status_code, seconds=elapsed_ms / 1000)
        return response


class JsonGzipMiddleware:
    """gzip for large JSON GET responses (a session view of 600 trace events is ~0.5 MB of JSON,
    ~40 KB compressed), through Django's own GZipMiddleware.

    Only 200 answers to GET/HEAD (errors are small), only non-streaming ``application/json`` bodies,
    only when the client sends
    ``Accept-Encoding: gzip``: SSE streams are never compressed (a gzip stream would hold frames back
    in its buffer), and no response to a write is (those can carry secrets, e.g. an ownerToken,
    next to what the request echoed — the BREACH pattern)."""

    def __init__(self, get_response):
        from django.middleware.gzip import GZipMiddleware

        self._gzip = GZipMiddleware(get_response)
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _wanted(self, request: HttpRequest, response: HttpResponse) -> bool:
        return (request.method in ("GET", "HEAD") and response.status_code == 200 and not response.streaming
                and response.get("Content-Type", "").startswith("application/json"))

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        response = self.get_response(request)
        return self._gzip.process_response(request, response) if self._wanted(request, response) else response

    async def __acall__(self, request: HttpRequest):
        response = await self.get_response(request)
        return self._gzip.process_response(request, response) if self._wanted(request, response) else response
