"""Plugin platform endpoints (spec 004): the session's plugin diagnostics, resuming a plugin the fault
breaker paused, and the dev hot reload of a community plugin. Thin: authorize, parse, delegate to
``sessions.plugin_diagnostics``, ``turns.services_plugin_faults`` and ``sessions.plugin_reload``.
"""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from covel.errors import ApiError, SessionNotFound
from covel.openapi import OPERATOR, OWNER, contract
from plugins_app.install_requests import install_auth
from plugins_app.registry import plugin_registry
from sessions import plugin_reload, selectors
from sessions.api_scope import request_json, session_scope
from sessions.errors import InvalidRequest
from sessions.models import Session
from sessions.plugin_diagnostics import plugin_diagnostics
from turns import services_plugin_faults
from turns.schemas_plugins import DiagnosticsQuery, PluginDiagnosticsOut, PluginReloadIn, PluginReloadOut, SessionPluginsOut

router = Router(tags=["plugins"])

#: ``session_token`` is the owner token's query form (covel.auth.request_tokens), not a filter.
_DIAGNOSTICS_PARAMS = {"pluginId", "session_token"}


@router.get("/sessions/{session_id}/plugin-diagnostics", auth=session_scope)
@contract(ok=PluginDiagnosticsOut, query=DiagnosticsQuery, security=OWNER, headers={"Cache-Control": "no-store"}, errors={
    400: "invalid_query: an unknown or empty query parameter", 401: "session_owner_required (demo/commercial tiers)",
    404: "session_not_found / plugin_not_found", 409: "session_incarnation_changed"})
def get_plugin_diagnostics(request: HttpRequest, session_id: str):
    """PluginDiagnosticsSnapshot ``{sessionId, capturedAt, plugins[], calls[], extensionCalls[],
    history}`` (``?pluginId=`` one package and the calls it took part in). Read-only: no entry is
    imported, no plugin code runs. ``Cache-Control: no-store``. 400 invalid_query (an unknown or
    empty parameter), 404 plugin_not_found, 409 session_incarnation_changed (the session was
    replaced while the snapshot was read)."""
    unknown = sorted(set(request.GET) - _DIAGNOSTICS_PARAMS)
    if unknown:
        raise InvalidRequest(code="invalid_query", message=f"unknown query parameter {unknown[0]}")
    values = request.GET.getlist("pluginId")
    if len(values) > 1 or (values and not values[0]):
        raise InvalidRequest(code="invalid_query", message="pluginId must be one non-empty plugin id")
    session = request.auth
    body = plugin_diagnostics(session, plugin_registry(), plugin_id=values[0] if values else None)
    # Checked again before answering (spec: 响应阶段还会再核对一次会话实例).
    current = Session.objects.filter(pk=session.pk).values_list("incarnation", flat=True).first()
    if current is None:
        raise SessionNotFound(session.pk)
    if current != session.incarnation:
        raise ApiError(409, "session_incarnation_changed", "The session was replaced while the diagnostics were read")
    response = JsonResponse(body, json_dumps_params={"ensure_ascii": False})
    response["Cache-Control"] = "no-store"
    return response


@router.post("/sessions/{session_id}/plugins/{plugin_id}/resume-fault", auth=session_scope)
@contract(ok=SessionPluginsOut, security=OWNER, errors={
    401: "session_owner_required (demo/commercial tiers)", 404: "session_not_found / plugin_not_found",
    409: "plugin_not_paused", 503: "session_busy"})
def resume_plugin_fault(request: HttpRequest, session_id: str, plugin_id: str):
    """Re-enable a plugin the fault breaker paused in this session and reset its count; no body.
    Answers the GET /api/sessions/:id/plugins view (``{items, commands, unavailable}``), the plugin
    without ``paused``. 404 session_not_found / plugin_not_found, 409 plugin_not_paused."""
    session = services_plugin_faults.plugin_fault_resume(session_id, plugin_id)
    return selectors.session_plugins(session, plugin_registry())


@router.post("/plugins/{plugin_id}/reload")
@contract(ok=PluginReloadOut, body=PluginReloadIn, body_required=False, security=OPERATOR, errors={
    400: "invalid_request_body", 401: "operator_token_required / unauthorized",
    403: "plugin_reload_disabled / install_api_disabled / server_code_not_approved",
    404: "plugin_not_found / session_not_found", 409: "plugin_reload_failed"})
def reload_plugin(request: HttpRequest, plugin_id: str):
    """Dev hot reload of a community plugin; body ``{sessionId?}`` → ``{ok: true, pluginId,
    generation}``. Install-API auth. 400 invalid_request_body (sessionId not a string), 403
    plugin_reload_disabled (off, or builtin) / server_code_not_approved, 404 plugin_not_found /
    session_not_found, 409 plugin_reload_failed (the old generation stays)."""
    install_auth(request)
    body = request_json(request)
    session_id = body.get("sessionId")
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise InvalidRequest(code="invalid_request_body", message="sessionId must be a session id")
    return plugin_reload.plugin_reload(plugin_id, session_id=session_id)
