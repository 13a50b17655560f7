"""World install, validation, SillyTavern import and authoring endpoints (spec 004 插件与世界安装 /
安装世界 / GET /api/framework/authoring), the GitHub install and update routes of both package kinds,
batches, collections and the installed package listings. Mounted at /api/ by covel.api; the other
plugin-side endpoints (zip install, validate, DELETE /api/plugins/:id) are in plugins_app/api.py.
"""
from __future__ import annotations

from ninja import Router
from ninja.responses import Status

from covel.errors import ApiError
from covel.jsonbody import json_body_load
from covel.openapi import MULTIPART, OPERATOR, contract, errors_merge
from plugins_app import github_install
from plugins_app.errors import StImportError
from plugins_app.install import plugins_installed_list
from plugins_app.install_requests import MAX_UPLOAD_BYTES, TRUE_VALUES, install_auth, install_request_dispatch, validate_request
from plugins_app.registry import plugin_registry
from plugins_app.schemas_api import (
    GITHUB_ERRORS, INSTALL_BODY, INSTALL_ERRORS, BatchInstallOut, GithubBatchIn, GithubConfirmIn,
    GithubPackagesPreviewOut, GithubPreviewOut, GithubUpdatePreviewIn, GithubUpdatePreviewOut, GithubUrlIn,
    InstalledPackagesOut, InstallOut, InstallUpload, OkOut, StImportOut, ValidationReportOut,
)
from sessions import package_install, st_import, world_install
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


# ------------------------------------------------------------------------------- GitHub, listings


def _json(request) -> object:
    install_auth(request)
    return json_body_load(request.body or b"null")


def _url(request) -> object:
    body = _json(request)
    return body.get("url") if isinstance(body, dict) else None


@router.post("/install/plugin/github/preview")
@contract(ok=GithubPreviewOut, body=GithubUrlIn, security=OPERATOR, errors=GITHUB_ERRORS)
def preview_plugin_github(request):
    """Resolve a public GitHub link to one commit and preview the plugin there (nothing written or run)."""
    return github_install.plugin_github_preview(_url(request))


@router.post("/install/plugin/github", response={201: dict})
@contract(ok=InstallOut, status=201, body=GithubConfirmIn, security=OPERATOR, errors=GITHUB_ERRORS)
def install_plugin_github(request):
    """Install a previewed plugin: 201 {ok, kind: "plugin", id, restartRequired: true}."""
    return Status(201, github_install.plugin_github_install(_json(request)))


@router.post("/install/world/github/preview")
@contract(ok=GithubPreviewOut, body=GithubUrlIn, security=OPERATOR, errors=GITHUB_ERRORS)
def preview_world_github(request):
    """Preview the world package a public GitHub link names (nothing written)."""
    return package_install.world_github_preview(_url(request))


@router.post("/install/world/github", response={201: dict})
@contract(ok=InstallOut, status=201, body=GithubConfirmIn, security=OPERATOR, errors=GITHUB_ERRORS)
def install_world_github(request):
    """Install a previewed world: 201 {ok, kind: "world", id, restartRequired: false}."""
    return Status(201, package_install.world_github_install(_json(request)))


@router.post("/install/plugin/github/update/preview")
@contract(ok=GithubUpdatePreviewOut, body=GithubUpdatePreviewIn, security=OPERATOR, errors=GITHUB_ERRORS)
def preview_plugin_github_update(request):
    """{status: current | pinned} or {status: available, preview} for a plugin installed from GitHub."""
    return github_install.plugin_github_update_preview(_json(request))


@router.post("/install/plugin/github/update", response={201: dict})
@contract(ok=InstallOut, status=201, body=GithubConfirmIn, security=OPERATOR, errors=GITHUB_ERRORS)
def update_plugin_github(request):
    """Stage a previewed plugin update (applied at the next start): 201 {ok, kind, id, restartRequired: true}."""
    return Status(201, github_install.plugin_github_update(_json(request)))


@router.delete("/install/plugin/github/update/{plugin_id}")
@contract(ok=OkOut, security=OPERATOR, errors=GITHUB_ERRORS)
def cancel_plugin_github_update(request, plugin_id: str):
    """Cancel a staged plugin update that is not applied yet: {ok: true}."""
    install_auth(request)
    return github_install.plugin_github_update_cancel(plugin_id)


@router.post("/install/world/github/update/preview")
@contract(ok=GithubUpdatePreviewOut, body=GithubUpdatePreviewIn, security=OPERATOR, errors=GITHUB_ERRORS)
def preview_world_github_update(request):
    """{status: current | pinned} or {status: available, preview} for a world installed from GitHub."""
    return package_install.world_github_update_preview(_json(request))


@router.post("/install/world/github/update", response={201: dict})
@contract(ok=InstallOut, status=201, body=GithubConfirmIn, security=OPERATOR, errors=GITHUB_ERRORS)
def update_world_github(request):
    """Apply a previewed world update now: 201 {ok, kind: "world", id, restartRequired: false}."""
    return Status(201, package_install.world_github_update(_json(request)))


@router.delete("/install/world/github/update/{world_id}")
@contract(ok=OkOut, security=OPERATOR, errors=GITHUB_ERRORS)
def cancel_world_github_update(request, world_id: str):
    """World updates apply at once: there is never one waiting (404 no_pending_update)."""
    install_auth(request)
    return package_install.world_github_update_cancel(world_id)


@router.post("/install/github/preview")
@contract(ok=GithubPackagesPreviewOut, body=GithubUrlIn, security=OPERATOR, errors=GITHUB_ERRORS)
def preview_github_packages(request):
    """Every plugin, world or collection member below a GitHub link: {collection, items, problems}."""
    return package_install.github_preview(_url(request))


@router.post("/install/github/batch", response={201: dict})
@contract(ok=BatchInstallOut, status=201, body=GithubBatchIn, security=OPERATOR, errors=GITHUB_ERRORS)
def install_github_batch(request):
    """Install previewed packages as one whole (rolled back on failure): 201 {ok, installed, restartRequired}."""
    return Status(201, package_install.github_batch(_json(request)))


@router.post("/install/collection", response={201: dict})
@contract(ok=BatchInstallOut, status=201, body=InstallUpload, body_content=MULTIPART, security=OPERATOR,
          errors=errors_merge(INSTALL_ERRORS, {400: "collection_invalid / package_invalid", 409:
                                               "plugin_already_exists / world_already_exists / plugin_reserved_id"}))
def install_collection(request):
    """Import a packed collection .zip (multipart `file`): 201 as the batch."""
    install_auth(request)
    upload = request.FILES.get("file")
    if upload is None:
        raise ApiError(400, "invalid_request", "Send the collection .zip in the multipart field `file`")
    if upload.size > MAX_UPLOAD_BYTES:
        raise ApiError(413, "payload_too_large", "Upload exceeds 20 MiB")
    return Status(201, package_install.collection_install_upload(upload.read()))


@router.get("/install/plugins")
@contract(ok=InstalledPackagesOut, security=OPERATOR, errors=errors_merge(INSTALL_ERRORS, {}))
def list_installed_plugins(request):
    """Packages in the user plugin directory, loaded or not yet, with integrity, trustedSource and pendingUpdate."""
    install_auth(request)
    registry = plugin_registry()
    return {"items": plugins_installed_list(registry.get)}


@router.get("/install/worlds")
@contract(ok=InstalledPackagesOut, security=OPERATOR, errors=errors_merge(INSTALL_ERRORS, {}))
def list_installed_worlds(request):
    """Packages in the user world directory with their install records (a package that fails to load has status "error")."""
    install_auth(request)
    return {"items": package_install.worlds_installed_list()}
