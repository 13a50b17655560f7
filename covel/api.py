"""The one NinjaAPI mounted at /api/: routers of every app, and the error handlers of the envelope."""
from __future__ import annotations

import json
import logging

import psycopg
from django.core.exceptions import SuspiciousOperation
from django.db.utils import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.http.multipartparser import MultiPartParserError
from ninja import NinjaAPI
from ninja.parser import Parser
from ninja.renderers import JSONRenderer
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from covel.errors import ApiEarlyResponse, ApiError, error_response
from covel.jsonbody import json_body_load
from covel.openapi import openapi_document

logger = logging.getLogger("covel.api")
SERVICE_UNAVAILABLE_RETRY_AFTER_SECONDS = 5

class _JsonParser(Parser):
    """Schema-bound bodies go through covel.jsonbody whatever their Content-Type (ninja parses the
    body as JSON even for text/plain): no NUL, no unpaired surrogate, bounded depth."""

    def parse_body(self, request):
        cached = getattr(request, "covel_json", None)
        return cached if cached is not None else json_body_load(request.body)


class _CompactJsonRenderer(JSONRenderer):
    """Bodies as compact UTF-8 JSON: no spaces after separators and non-ASCII text as itself (a
    Chinese world's text is 3 bytes a character instead of a 6-byte escape). A body holding text
    UTF-8 cannot carry (a lone surrogate from a model's output) is written with ASCII escapes
    instead, which JSON can carry."""

    def render(self, request, data, *, response_status: int):
        text = json.dumps(data, cls=self.encoder_class, separators=(",", ":"), ensure_ascii=False)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(data, cls=self.encoder_class, separators=(",", ":")).encode("ascii")


class CovelNinjaAPI(NinjaAPI):
    """NinjaAPI whose document carries each route's ``@contract`` (covel/openapi.py) and whose
    operation ids are the endpoint function names (``create_session``), as STYLE.md promises."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        return openapi_document(self, path_prefix=path_prefix)

    def get_openapi_operation_id(self, operation) -> str:
        return operation.view_func.__name__


api = CovelNinjaAPI(
    parser=_JsonParser(),
    renderer=_CompactJsonRenderer(),
    title="Covel API",
    version="0.1.0",
    description="AI-driven interactive fiction server (spec 004).",
    urls_namespace="api",
    docs_url="/docs",
)


@api.exception_handler(ApiError)
def _api_error(request, exc: ApiError):
    response = error_response(exc.status, exc.message, exc.code, exc.details)
    for name, value in (getattr(exc, "headers", None) or {}).items():  # e.g. Retry-After of a 429
        response[name] = value
    return response


@api.exception_handler(ApiEarlyResponse)
def _early_response(request, exc: ApiEarlyResponse):
    return JsonResponse(exc.body, status=exc.status, json_dumps_params={"ensure_ascii": False})


@api.exception_handler(NinjaValidationError)
def _validation_error(request, exc: NinjaValidationError):
    issues = []
    for err in exc.errors:
        loc = [str(part) for part in err.get("loc", ())]
        issues.append({"path": loc, "message": err.get("msg", ""), "type": err.get("type", "")})
    return error_response(400, "Invalid request", "invalid_request", {"issues": issues})


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    return error_response(exc.status_code, str(exc))


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return error_response(401, "Unauthorized", "unauthorized")


@api.exception_handler(Http404)
def _not_found(request, exc):
    return error_response(404, str(exc) or "Not found", "not_found")


@api.exception_handler(MultiPartParserError)
def _multipart_error(request, exc):
    # A malformed multipart body (bad boundary, undecodable part) is bad input, not a server fault.
    return error_response(400, f"Malformed multipart body: {exc}", "invalid_request_body")


@api.exception_handler(SuspiciousOperation)
def _suspicious_request(request, exc):
    # Django's request-shape refusals (too many fields/files, ...): 400 as Django itself answers them.
    return error_response(400, "Bad request", "bad_request")


def _database_unavailable(request, exc):
    # The database (or its connection) is gone: a retryable outage, not a server bug. Django raises
    # OperationalError / InterfaceError for refused, dropped and shut-down connections.
    logger.warning("database unavailable on %s %s: %s", request.method, request.path, exc.__class__.__name__)
    response = error_response(503, "The database is unavailable; retry shortly", "service_unavailable")
    response["Retry-After"] = str(SERVICE_UNAVAILABLE_RETRY_AFTER_SECONDS)
    return response


# Django wraps the driver's errors in these; the session lock's own psycopg connection raises
# psycopg's (AdminShutdown, connection refused) unwrapped. Integrity and programming errors stay 500s.
for _outage in (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError):
    api.add_exception_handler(_outage, _database_unavailable)


@api.exception_handler(Exception)
def _unexpected(request, exc: Exception):
    # The stack goes to the log, never to the client (spec 004: 生产环境对未知异常只返回 500).
    logger.exception("unhandled error on %s %s", request.method, request.path)
    return error_response(500, "Internal server error")


def _mount_routers() -> None:
    from covel.health import router as health_router
    from covel.model_relay_api import router as model_relay_router

    api.add_router("/", health_router)
    api.add_router("/", model_relay_router)
    # Each app contributes one router (STYLE.md). Imported here so the app registry is ready.
    from sessions.api import router as sessions_router
    from turns.api import router as turns_router
    from plugins_app.api import router as plugins_router
    from jobs.api import router as jobs_router
    from jobs.api_model_db import router as model_db_router
    from media.api import router as media_router
    from sessions.api_worlds import router as worlds_router
    from sessions.api_install import router as install_router
    from turns.api_plugin_data import router as plugin_data_router
    from turns.api_records import router as records_router
    from turns.api_session import router as session_turns_router
    from turns.api_events import router as events_router
    from turns.api_setup import router as setup_router
    from jobs.api_config import router as config_router
    from turns.api_snapshots import router as snapshots_router
    from sessions.api_approvals import router as approvals_router
    from turns.api_plugin_rpc import router as plugin_rpc_router
    from turns.api_suspensions import router as suspensions_router
    from turns.api_plugins import router as plugin_platform_router
    from sessions.api_ui import router as ui_router
    from sessions.api_orchestration import router as orchestration_router
    from turns.api_memory import router as memory_index_router
    from turns.api_browser import router as browser_router

    for router in (
        worlds_router, sessions_router, session_turns_router, turns_router, records_router, events_router, setup_router,
        plugins_router, install_router, plugin_data_router, jobs_router, model_db_router, media_router, config_router,
        snapshots_router, approvals_router, plugin_rpc_router, suspensions_router, plugin_platform_router, ui_router, orchestration_router,
        memory_index_router, browser_router,
    ):
        api.add_router("/", router)


_mount_routers()
