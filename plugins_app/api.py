"""Plugin and framework endpoints (spec 004 插件管理 / 插件与世界安装).

GET /plugins, GET /plugins/:id, GET /framework/capabilities, GET /framework/schemas/{name},
GET /plugin-flows, POST /install/validate/plugin and POST /install/plugin (plugins_app/install.py).
Mounted at /api/ by covel.api. World installs, st-import and GET /framework/authoring are in
sessions/api_install.py; session plugin data endpoints in turns/api_plugin_data.py.
"""
from __future__ import annotations

import hashlib

from django.http import HttpResponse
from ninja import Router
from ninja.responses import Status

from covel.errors import NotFound
from covel.openapi import OPERATOR, contract, errors_merge
from plugins_app import install
from plugins_app import plugin_services as services
from plugins_app.errors import PluginNotFound
from plugins_app.install_requests import install_request_dispatch, validate_request
from plugins_app.registry import plugin_registry
from plugins_app.install_requests import install_auth
from plugins_app.schemas_api import (INSTALL_BODY, INSTALL_ERRORS, SCHEMA_CONTENT, CapabilitiesOut, InstallOut,
                                     PluginDetailOut, PluginFlowsOut, PluginsOut, UninstallOut, ValidationReportOut)
from plugins_app.validation import SCHEMA_NAMES, schema_bytes

router = Router(tags=["plugins"])


@router.get("/plugins")
@contract(ok=PluginsOut)
def list_plugins(request):
    return {"items": [record.summary() for record in plugin_registry().all()]}


@router.get("/plugins/{plugin_id}")
@contract(ok=PluginDetailOut, errors={404: "plugin_not_found"})
def get_plugin(request, plugin_id: str):
    record = plugin_registry().get(plugin_id)
    if record is None:
        raise PluginNotFound(plugin_id)
    return record.detail()


@router.delete("/plugins/{plugin_id}")
@contract(ok=UninstallOut, security=OPERATOR, errors=errors_merge(INSTALL_ERRORS, {
    400: "invalid_plugin_id", 404: "plugin_not_installed", 409: "plugin_builtin / package_busy",
    500: "install_failed: the package could not be moved out (it stays whole)"}))
def uninstall_plugin(request, plugin_id: str):
    """Uninstall a community plugin (spec 004 全局插件): {ok, id, restartRequired: true}; every
    process's registry drops it at its next read, code already imported stays until a restart."""
    install_auth(request)
    return install.plugin_uninstall(plugin_id)


@router.get("/framework/capabilities")
@contract(ok=CapabilitiesOut)
def get_framework_capabilities(request):
    return services.capabilities()


@router.get("/framework/schemas/{name}")
@contract(content=SCHEMA_CONTENT, errors={404: "not_found: no schema of that name"},
          headers={"ETag": "The schema's digest (304 for a matching If-None-Match)", "Cache-Control": "no-cache"})
def get_framework_schema(request, name: str):
    """A published manifest schema (Draft 2020-12): plugin.json (PLUGIN.md frontmatter),
    runtime.json (RUNTIME.md frontmatter), world.json (world.yaml, world data descriptor).

    The loaders validate with these same files, so an editor pointed at this URL flags what the
    server reports. 200 application/schema+json with an ETag and `Cache-Control: no-cache` (the URL
    is stable across server versions, the content is not), 304 for a matching If-None-Match;
    404 `{error, code: "not_found"}` for any other name (spec 004 §响应格式约定).
    """
    if name not in SCHEMA_NAMES:
        raise NotFound(code="not_found", message=f"Unknown schema: {name}")
    body = schema_bytes(name)
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("If-None-Match") == etag:
        return HttpResponse(status=304, headers=headers)
    return HttpResponse(body, content_type="application/schema+json", headers=headers)


@router.get("/plugin-flows")
@contract(ok=PluginFlowsOut)
def get_plugin_flows(request):
    return services.plugin_flows(plugin_registry())


@router.post("/install/validate/plugin")
@contract(ok=ValidationReportOut, body=INSTALL_BODY, security=OPERATOR, errors=INSTALL_ERRORS)
def validate_plugin_package(request):
    """Validate a plugin package without installing it (spec 004 ZIP 激活前的校验)."""
    return validate_request(
        request, "plugin", services.plugin_validate_upload,
        lambda source, roots: services.plugin_validate_source(source, registry=plugin_registry(), allowed_roots=roots))


@router.post("/install/plugin", response={201: dict})
@contract(ok=InstallOut, status=201, body=INSTALL_BODY, security=OPERATOR, errors=errors_merge(INSTALL_ERRORS, {
    400: "package_invalid: error diagnostics, nothing written", 409: "plugin_reserved_id / plugin_already_exists"}))
def install_plugin(request):
    """Install a plugin package: 201 {ok, kind, id, restartRequired: true, hasServerCode}."""
    return Status(201, install_request_dispatch(request, "plugin", install.plugin_install_upload, install.plugin_install_path))
