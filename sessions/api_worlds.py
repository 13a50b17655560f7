"""World endpoints (spec 004 世界管理), mounted at /api/ by covel.api.

GET/POST /worlds, GET/PATCH/DELETE /worlds/:id, GET /worlds/:id/dimensions/export,
POST /worlds/:id/dimensions/import, GET /worlds/:id/plugin-plan, GET /worlds/:id/gallery and
GET /worlds/:id/gallery/:source/:file. Logic lives in sessions/world_services.py and
sessions/world_selectors.py.
"""
from __future__ import annotations

from django.http import FileResponse, HttpResponse, HttpResponseNotModified
from ninja import Router
from ninja.responses import Status

from covel.errors import ApiError
from covel.jsonbody import json_body_load
from sessions import world_selectors as selectors
from sessions import world_services as services
from covel.auth import require_operator
from covel.openapi import BINARY, OPERATOR, OPERATOR_ERRORS, contract, errors_merge
from plugins_app.registry import plugin_registry
from sessions.errors import WorldNotFound
from sessions.schemas import (GalleryFileQuery, WorldDeleteOut, WorldDimensionsIn, WorldGalleryOut, WorldOut,
                              WorldPluginPlanOut, WorldsOut)
from sessions import world_data_sync
from sessions.world_schemas import (WorldDataPreflightIn, WorldDataPreflightOut, WorldDataSyncIn, WorldDataSyncOut,
                                    WorldDimensionsSyncIn, WorldIn, WorldPatch, WorldRestoreIn)
from sessions.worldpkg.dimensions import dimensions_export

router = Router(tags=["worlds"])


@router.get("/worlds")
@contract(ok=WorldsOut)
def list_worlds(request):
    return {"items": selectors.world_list()}


@router.post("/worlds", response={201: dict})
@contract(ok=WorldOut, status=201, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid world fields", 409: "world_already_exists"}))
def create_world(request, payload: WorldIn):
    require_operator(request)  # hosted tiers: global world writes need the operator token
    return Status(201, services.world_create(payload=payload.model_dump(exclude_none=True)))


@router.get("/worlds/{world_id}")
@contract(ok=WorldOut, errors={404: "world_not_found", 422: "world_package_invalid: the package folder does not load"})
def get_world(request, world_id: str):
    view = selectors.world_get(world_id)
    if view is None:
        broken = selectors.world_package_broken(world_id)
        if broken is not None:  # the folder is there but does not load: say why (issue 21)
            raise ApiError(422, "world_package_invalid", "World package does not load",
                           {"diagnostics": selectors.package_errors(broken)})
        raise WorldNotFound(world_id)
    return view.record


@router.patch("/worlds/{world_id}")
@contract(ok=WorldOut, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid world fields", 403: "world_read_only", 404: "world_not_found", 409: "world_deleting"}))
def update_world(request, world_id: str, payload: WorldPatch):
    require_operator(request)  # hosted tiers: global world writes need the operator token
    return services.world_update(world_id=world_id, patch=payload.model_dump(exclude_none=True))


@router.delete("/worlds/{world_id}")
@contract(ok=WorldDeleteOut, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    403: "world_read_only: a builtin world", 404: "world_not_found", 409: "world_deleting"}))
def delete_world(request, world_id: str):
    require_operator(request)  # hosted tiers: global world writes need the operator token
    return services.world_delete(world_id=world_id)


@router.get("/worlds/{world_id}/dimensions/export")
@contract(content={"application/yaml": {"schema": {"type": "string"}}, "application/json": {"schema": {
    "type": "object", "additionalProperties": True}}}, errors={400: "invalid_format", 404: "world_not_found"},
          headers={"Content-Disposition": "attachment; filename=\"<worldId>-dimensions.<format>\""})
def export_world_dimensions(request, world_id: str, format: str = "yaml"):
    if format not in ("yaml", "json"):
        raise ApiError(400, "invalid_format", "format must be yaml or json")
    text, content_type = dimensions_export(services.world_dimensions_get(world_id=world_id), format)
    response = HttpResponse(text, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{world_id}-dimensions.{format}"'
    return response


@router.post("/worlds/{world_id}/dimensions/import")
@contract(ok=WorldOut, body=WorldDimensionsIn, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid_request: no object `dimensions`", 403: "world_read_only", 404: "world_not_found",
    409: "world_deleting", 422: "invalid_dimensions"}))
def import_world_dimensions(request, world_id: str):
    require_operator(request)  # hosted tiers: global world writes need the operator token
    payload = json_body_load(request.body or b"null")
    return services.world_dimensions_replace(world_id=world_id, payload=payload)


@router.post("/worlds/{world_id}/restore-package")
@contract(ok=WorldOut, body=WorldRestoreIn, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    404: "world_not_found", 409: "world_not_from_package | world_package_missing | world_deleting",
    422: "world_package_invalid"}))
def restore_world_package(request, world_id: str):
    require_operator(request)  # hosted tiers: global world writes need the operator token
    return services.world_restore_package(world_id=world_id)


@router.post("/worlds/{world_id}/world-data/preflight")
@contract(ok=WorldDataPreflightOut, body=WorldDataPreflightIn, errors={
    400: "invalid_request", 404: "world_not_found | session_not_found", 409: "dimension_provider_conflict"})
def preflight_world_data(request, world_id: str):
    payload = json_body_load(request.body or b"{}")
    return world_data_sync.world_data_preflight(world_id=world_id, payload=payload, registry=plugin_registry())


@router.post("/worlds/{world_id}/sync-data")
@contract(ok=WorldDataSyncOut, body=WorldDataSyncIn, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid_request: no sessionId, or not this world's session", 404: "world_not_found | session_not_found",
    409: "world_data_sync_plan_stale | dimension_provider_conflict | world_deleting | session_not_active"}))
def sync_world_data(request, world_id: str):
    require_operator(request)  # an author's tool: the operator token in hosted tiers
    payload = json_body_load(request.body or b"{}")
    return world_data_sync.world_data_sync(world_id=world_id, payload=payload, registry=plugin_registry())


@router.post("/worlds/{world_id}/sync-dimensions")
@contract(ok=WorldDataSyncOut, body=WorldDimensionsSyncIn, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid_request: no sessionId, or not this world's session", 404: "world_not_found | session_not_found",
    409: "world_data_sync_plan_stale | dimension_provider_conflict | world_deleting | session_not_active"}))
def sync_world_dimensions(request, world_id: str):
    require_operator(request)  # an author's tool: the operator token in hosted tiers
    payload = json_body_load(request.body or b"{}")
    return world_data_sync.world_data_sync(world_id=world_id, payload=payload, registry=plugin_registry(),
                                           dimensions_only=True)


@router.get("/worlds/{world_id}/plugin-plan")
@contract(ok=WorldPluginPlanOut, errors={404: "world_not_found"})
def get_world_plugin_plan(request, world_id: str):
    return services.world_plugin_plan(world_id=world_id, registry=plugin_registry())


@router.get("/worlds/{world_id}/gallery")
@contract(ok=WorldGalleryOut, errors={404: "world_not_found"})
def list_world_gallery(request, world_id: str):
    gallery = services.world_gallery(world_id=world_id)
    items = [{k: v for k, v in item.items() if k != "_path"} for item in gallery["items"]]
    out = {"items": items}
    if "themeMusic" in gallery:
        out["themeMusic"] = {k: v for k, v in gallery["themeMusic"].items() if k != "_path"}
    return out


@router.get("/worlds/{world_id}/gallery/{source}/{file}")
@contract(query=GalleryFileQuery, content={"image/*": BINARY, "audio/*": BINARY}, errors={404: "not_found"},
          headers={"ETag": "The file's version", "Cache-Control": "immutable for a year with ?v=<version>, else no-cache"})
def get_world_gallery_file(request, world_id: str, source: str, file: str):
    path, version = services.world_gallery_file(world_id=world_id, source=source, file=file)
    etag = f'"{version}"'
    cache = "public, max-age=31536000, immutable" if request.GET.get("v") == version else "no-cache"
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponseNotModified()
    else:
        response = FileResponse(open(path, "rb"))
    response["ETag"] = etag
    response["Cache-Control"] = cache
    response["X-Content-Type-Options"] = "nosniff"
    return response
