"""Plugin data endpoints (spec 004 §插件数据, all seven routes). Thin: authorize, check, delegate.

Reads: kernel namespaces (``_`` prefix, incl. ``_hidden.*``) are invisible; an unknown plugin id is
404. Writes: 403 for a reserved namespace or a plugin not enabled in the session, 404 for an unknown
plugin, 409 session_not_active, 400 without ``value``, 413 over 256 KiB.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.errors import ApiError, Forbidden
from covel.openapi import OWNER, SESSION_ERRORS, Ok, contract, errors_merge
from plugins_app import selectors_plugin_data as selectors
from plugins_app.errors import PluginNotFound
from plugins_app.registry import plugin_registry
from sessions.api_scope import request_json, session_scope
from sessions.selectors import runnable_plugins
from sessions.services import session_check_active
from turns import services_plugin_data as services
from turns.schemas import PluginDataIndexOut, PluginDataItemOut, PluginDataListOut, PluginDataPutIn, PluginDataPutOut

router = Router(tags=["plugin-data"])


def _plugin_known(plugin_id: str) -> None:
    record = plugin_registry().get(plugin_id)
    if record is None or not record.is_loaded:
        raise PluginNotFound(plugin_id)


def _write_checks(session, plugin_id: str, namespace: str) -> None:
    _plugin_known(plugin_id)
    services.namespace_check_writable(namespace)
    session_check_active(session)
    runnable, _ = runnable_plugins(session, plugin_registry())
    if plugin_id not in runnable:
        raise Forbidden(code="plugin_not_enabled", message=f"Plugin is not enabled in this session: {plugin_id}")


@router.get("/sessions/{session_id}/plugin-data", auth=session_scope)
@contract(ok=PluginDataListOut, security=OWNER, errors=SESSION_ERRORS)
def list_session_plugin_data(request: HttpRequest, session_id: str):
    """Visible data of every active, registered plugin; each item carries ``pluginId``."""
    runnable, _ = runnable_plugins(request.auth, plugin_registry())
    return {"items": selectors.plugin_data_visible(request.auth, plugin_ids=runnable)}


@router.get("/sessions/{session_id}/plugin-data/{plugin_id}", auth=session_scope)
@contract(ok=PluginDataListOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "plugin_not_found: unknown plugin"}))
def list_plugin_data(request: HttpRequest, session_id: str, plugin_id: str):
    _plugin_known(plugin_id)
    return {"items": selectors.plugin_data_list(request.auth, plugin_id)}


@router.get("/sessions/{session_id}/plugin-data/{plugin_id}/_index", auth=session_scope)
@contract(ok=PluginDataIndexOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "plugin_not_found: unknown plugin"}))
def index_plugin_data(request: HttpRequest, session_id: str, plugin_id: str):
    _plugin_known(plugin_id)
    return selectors.plugin_data_index(request.auth, plugin_id)


@router.get("/sessions/{session_id}/plugin-data/{plugin_id}/{namespace}", auth=session_scope)
@contract(ok=PluginDataListOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "plugin_not_found: unknown plugin"}))
def list_plugin_data_namespace(request: HttpRequest, session_id: str, plugin_id: str, namespace: str):
    _plugin_known(plugin_id)
    return {"items": selectors.plugin_data_list(request.auth, plugin_id, namespace)}


@router.get("/sessions/{session_id}/plugin-data/{plugin_id}/{namespace}/{key}", auth=session_scope)
@contract(ok=PluginDataItemOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    404: "plugin_not_found / plugin_data_not_found"}))
def get_plugin_data(request: HttpRequest, session_id: str, plugin_id: str, namespace: str, key: str):
    _plugin_known(plugin_id)
    row = selectors.plugin_data_get(request.auth, plugin_id, namespace, key)
    if row is None:
        raise ApiError(404, "plugin_data_not_found", f"Plugin data not found: {plugin_id}/{namespace}/{key}")
    return selectors.plugin_data_out(row)


@router.put("/sessions/{session_id}/plugin-data/{plugin_id}/{namespace}/{key}", auth=session_scope)
@contract(ok=PluginDataPutOut, body=PluginDataPutIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body: the body is not {value}", 403: "plugin_not_enabled / a reserved namespace", 404: "plugin_not_found", 409: "session_not_active", 413: "the value exceeds 256 KiB"}))
def put_plugin_data(request: HttpRequest, session_id: str, plugin_id: str, namespace: str, key: str):
    _write_checks(request.auth, plugin_id, namespace)
    data = request_json(request)
    if "value" not in data:
        raise ApiError(400, "invalid_request_body", "body must be { value: ... }")
    services.plugin_data_put(session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key, value=data["value"])
    return {"ok": True, "namespace": namespace, "key": key}


@router.delete("/sessions/{session_id}/plugin-data/{plugin_id}/{namespace}/{key}", auth=session_scope)
@contract(ok=Ok, security=OWNER, errors=errors_merge(SESSION_ERRORS, {403: "plugin_not_enabled / a reserved namespace", 404: "plugin_not_found", 409: "session_not_active", 413: "the value exceeds 256 KiB"}))
def delete_plugin_data(request: HttpRequest, session_id: str, plugin_id: str, namespace: str, key: str):
    _write_checks(request.auth, plugin_id, namespace)
    services.plugin_data_delete(session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key)
    return {"ok": True}
