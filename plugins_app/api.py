"""Plugin, framework and package-validation endpoints (spec 004 插件管理 / 插件与世界安装).

GET /plugins, GET /plugins/:id, GET /framework/capabilities, GET /framework/authoring,
GET /plugin-flows, POST /install/validate/plugin|world. Mounted at /api/ by covel.api.
Other plugin_app endpoints (plugin data) live in api_plugin_data.py.
"""
from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from ninja import Router

from covel.errors import ApiError
from plugins_app import plugin_services as services
from sessions.auth import is_operator, require_operator
from sessions.catalog import plugin_registry
from sessions.errors import PluginNotFound

router = Router(tags=["plugins"])
MAX_UPLOAD_BYTES = 20 * 1024 * 1024


@router.get("/plugins")
def list_plugins(request):
    return {"items": [record.summary() for record in plugin_registry().all()]}


@router.get("/plugins/{plugin_id}")
def get_plugin(request, plugin_id: str):
    record = plugin_registry().get(plugin_id)
    if record is None:
        raise PluginNotFound(plugin_id)
    return record.detail()


@router.get("/framework/capabilities")
def get_framework_capabilities(request):
    return services.capabilities()


@router.get("/framework/authoring")
def get_framework_authoring(request, locale: str | None = None):
    return services.authoring(plugin_registry(), locale=locale)


@router.get("/plugin-flows")
def get_plugin_flows(request):
    return services.plugin_flows(plugin_registry())


def _install_auth(request) -> None:
    """Hosted tiers: operator token. Self tier: the operator/desktop token when one is configured,
    else the install API must not be disabled (COVEL_INSTALL_API_ENABLED, default on)."""
    require_operator(request)
    if settings.COVEL_OPERATOR_TOKEN and not is_operator(request):
        raise ApiError(401, "unauthorized", "Install API requires the bearer token")
    if not settings.COVEL_INSTALL_API_ENABLED:
        raise ApiError(403, "install_api_disabled", "The install API is disabled")


def _validate(request, kind: str) -> dict:
    _install_auth(request)
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ApiError(413, "payload_too_large", "Upload exceeds 20 MiB")
        return services.validate_upload(kind, upload.read()).as_dict()
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "invalid_json_body", "Body is not valid JSON")
    if not isinstance(body, dict) or "source" not in body:
        raise ApiError(400, "invalid_request", "Send a multipart field `file` or JSON {source}")
    home = Path(settings.COVEL_HOME)
    roots = [home / "plugins", home / "worlds", *[Path(p) for p in settings.COVEL_PACKAGE_ROOTS]]
    return services.validate_source(kind, body["source"], registry=plugin_registry(), covel_home=home, allowed_roots=roots).as_dict()


@router.post("/install/validate/plugin")
def validate_plugin_package(request):
    return _validate(request, "plugin")


@router.post("/install/validate/world")
def validate_world_package(request):
    return _validate(request, "world")
