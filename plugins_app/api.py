"""Plugin, framework and package-validation endpoints (spec 004 插件管理 / 插件与世界安装).

GET /plugins, GET /plugins/:id, GET /framework/capabilities, GET /framework/authoring,
GET /plugin-flows, POST /install/validate/plugin|world, and (appended, plugins_app/install.py)
POST /install/world, /install/plugin, /install/st-import. Mounted at /api/ by covel.api.
Other plugin_app endpoints (plugin data) live in api_plugin_data.py.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from ninja import Router
from ninja.responses import Status

from covel.errors import ApiError
from covel.jsonbody import json_body_load
from plugins_app import install, st_import
from plugins_app import plugin_services as services
from plugins_app.errors import StImportError
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
    if request.content_type == "multipart/form-data":
        # The multipart parser consumed the stream: there is no JSON body to fall back to.
        raise ApiError(400, "invalid_request", "Send the package .zip in the multipart field `file`")
    body = json_body_load(request.body or b"null")
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


# ------------------------------------------------------------------------------- install (plugins_app/install.py)

_TRUE = ("1", "true", "yes", "on")


def _install_source(request, kind: str, install_upload, install_path) -> dict:
    """Dispatch an install request: multipart field `file` (.zip) or JSON {source: {kind: "path", path}}."""
    _install_auth(request)
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ApiError(413, "payload_too_large", "Upload exceeds 20 MiB")
        return install_upload(upload.read())
    if request.content_type == "multipart/form-data":
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`")
    try:
        body = json_body_load(request.body or b"null")
    except ApiError as exc:
        if exc.code != "invalid_json_body":
            raise
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`") from None
    source = body.get("source") if isinstance(body, dict) else None
    if not isinstance(source, dict) or source.get("kind") != "path":
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`, or JSON {{source: {{kind: path, path}}}}")
    return install_path(source.get("path"))


@router.post("/install/world", response={201: dict})
def install_world(request):
    """Install a world package (spec 004 安装世界): 201 {ok, kind, id, restartRequired: false}."""
    return Status(201, _install_source(request, "world", install.world_install_upload, install.world_install_path))


@router.post("/install/plugin", response={201: dict})
def install_plugin(request):
    """Install a plugin package: 201 {ok, kind, id, restartRequired: true, hasServerCode}."""
    return Status(201, _install_source(request, "plugin", install.plugin_install_upload, install.plugin_install_path))


@router.post("/install/st-import", response={200: dict, 201: dict})
def install_st_import(request):
    """SillyTavern cards / World Info → one world (multipart `file` repeated, `locale`, `name`,
    `preview`). 200 for a preview (nothing written), else 201."""
    _install_auth(request)
    uploads = request.FILES.getlist("file")
    if len(uploads) > st_import.MAX_FILES:
        raise StImportError(400, "too-many-files", f"at most {st_import.MAX_FILES} files per import")
    for upload in uploads:
        if upload.size > st_import.MAX_FILE_BYTES:
            raise StImportError(413, "file-too-large", "file exceeds 8 MiB", source=upload.name)
    is_preview = (request.POST.get("preview") or request.GET.get("preview") or "").strip().lower() in _TRUE
    result = install.st_import_run(
        [(upload.name or f"file-{i + 1}", upload.read()) for i, upload in enumerate(uploads)],
        locale=request.POST.get("locale"), name=request.POST.get("name"), is_preview=is_preview,
    )
    return Status(200 if is_preview else 201, result)
