"""World install, validation, SillyTavern import and authoring endpoints (spec 004 插件与世界安装 /
安装世界 / GET /api/framework/authoring). Mounted at /api/ by covel.api; the plugin-side endpoints
are in plugins_app/api.py.
"""
from __future__ import annotations

from ninja import Router
from ninja.responses import Status

from covel.openapi import MULTIPART, OPERATOR, contract, errors_merge
from plugins_app.errors import StImportError
from plugins_app.install_requests import TRUE_VALUES, install_auth, install_request_dispatch, validate_request
from plugins_app.registry import plugin_registry
from plugins_app.schemas_api import INSTALL_BODY, INSTALL_ERRORS, InstallOut, StImportOut, ValidationReportOut
from sessions import st_import, world_install
from sessions.authoring import authoring
from sessions.schemas import AuthoringOut, StImportUpload

router = Router(tags=["worlds"])


@router.get("/framework/authoring")
@contract(ok=AuthoringOut)
def get_framework_authoring(request, locale: str | None = None):
    """World files, kernel destinations, plugin data contracts, the plugin catalogue and packs."""
    return authoring(plugin_registry(), locale=locale)


@router.post("/install/validate/world")
@contract(ok=ValidationReportOut, body=INSTALL_BODY, security=OPERATOR, errors=INSTALL_ERRORS)
def validate_world_package(request):
    """Validate a world package without installing it (spec 004 ZIP 激活前的校验)."""
    return validate_request(request, "world", world_install.world_validate_upload,
                            lambda source, roots: world_install.world_validate_source(source, allowed_roots=roots))


@router.post("/install/world", response={201: dict})
@contract(ok=InstallOut, status=201, body=INSTALL_BODY, security=OPERATOR, errors=errors_merge(INSTALL_ERRORS, {
    400: "package_invalid: error diagnostics, nothing written", 409: "world_already_exists"}))
def install_world(request):
    """Install a world package (spec 004 安装世界): 201 {ok, kind, id, restartRequired: false}."""
    return Status(201, install_request_dispatch(request, "world", world_install.world_install_upload,
                                                world_install.world_install_path))


@router.post("/install/st-import", response={200: dict, 201: dict})
@contract(ok={200: StImportOut, 201: StImportOut}, body=StImportUpload, body_content=MULTIPART, security=OPERATOR,
          errors=errors_merge(INSTALL_ERRORS, {400: "too-many-files / invalid_locale / invalid_name / a file that does not "
                                               "convert", 409: "st_import_id_exhausted / world_already_exists",
                                               413: "file-too-large: a file over 8 MiB"}))
def install_st_import(request):
    """SillyTavern cards / World Info → one world (multipart `file` repeated, `locale`, `name`,
    `preview`). 200 for a preview (nothing written), else 201."""
    install_auth(request)
    uploads = request.FILES.getlist("file")
    if len(uploads) > st_import.MAX_FILES:
        raise StImportError(400, "too-many-files", f"at most {st_import.MAX_FILES} files per import")
    for upload in uploads:
        if upload.size > st_import.MAX_FILE_BYTES:
            raise StImportError(413, "file-too-large", "file exceeds 8 MiB", source=upload.name)
    is_preview = (request.POST.get("preview") or request.GET.get("preview") or "").strip().lower() in TRUE_VALUES
    result = world_install.st_import_run(
        [(upload.name or f"file-{i + 1}", upload.read()) for i, upload in enumerate(uploads)],
        locale=request.POST.get("locale"), name=request.POST.get("name"), is_preview=is_preview,
    )
    return Status(200 if is_preview else 201, result)
