"""Session endpoints (spec 004 §会话管理, §会话座位, §行动类型目录, §会话插件管理, §状态查询,
§消息历史, §角色数据, §Lorebook). Thin: authorize, parse, delegate to services/selectors. The view and
the character upsert need the turn layer and are in turns/api_session.py.

Every operation with ``{session_id}`` in its path uses ``auth=session_scope`` (404 before 401).
"""
from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from sessions import selectors, services
from sessions.api_scope import request_json, session_scope
from covel.auth import browser_private, is_operator, owner_checks_enabled, require_operator
from covel.jsonbody import unknown_fields_check
from covel.openapi import BUSY_ERRORS, OPERATOR, OPERATOR_ERRORS, OWNER, SESSION_ERRORS, Ok, contract, errors_merge
from covel.ratelimit import rate_limit_hit
from plugins_app.registry import plugin_registry
from sessions.errors import InvalidRequest
from sessions.schemas import (ActionKindsOut, LorebookEnabledPatch, LorebookEntryIn, LorebookEntryOut, LorebookOut,
                              LorebookToggleOut, MessagesOut, MessagesPageOut, MessagesPageQuery, MessagesSyncIn,
                              MessagesSyncOut, SeatPatch, SeatsOut, SessionCreatedOut, SessionIn, SessionListQuery,
                              SessionOut, SessionPatch, SessionPluginSetOut, SessionPluginListOut, SessionsOut,
                              SessionStateOut, seat_patch_parse)

router = Router(tags=["sessions"])

def _read_limit(request: HttpRequest) -> None:
    # Spec 004 §状态查询 / §消息历史: the same client on the same path, per minute.
    rate_limit_hit(request, "session-read", per_minute=settings.COVEL_READ_RATE_LIMIT_RPM, key=request.path)


def _int_param(request: HttpRequest, name: str, default: int, maximum: int) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(code="invalid_query", message=f"{name} must be an integer") from None
    if value < 1:
        raise InvalidRequest(code="invalid_query", message=f"{name} must be at least 1")
    return min(value, maximum)


@router.get("/sessions")
@contract(ok=SessionsOut, query=SessionListQuery, security=OPERATOR)
def list_sessions(request: HttpRequest):
    """Sessions, newest first (``?worldId=``). Hosted tiers list only for the operator (others get []);
    the browser-private profile lists nothing unless ENABLE_DEBUG_PAGE (spec 004 隐私门禁)."""
    if owner_checks_enabled() and not is_operator(request):
        return {"items": []}
    if browser_private() and not settings.ENABLE_DEBUG_PAGE:
        return {"items": []}
    sessions = selectors.session_list(world_id=request.GET.get("worldId") or None)
    return {"items": [selectors.session_out(s, brief=True) for s in sessions]}


@router.post("/sessions", response={201: dict})
@contract(ok=SessionCreatedOut, status=201, body=SessionIn, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    400: "invalid_json_body / invalid_request (unknown field, details.issues) / invalid_world_id / invalid_locale / invalid_plugins / invalid_seat_role / invalid_auto_advance_limit / "
         "invalid_session_id / lore override too long / plugin selection errors (missing-provider, ...)",
    404: "world_not_found", 409: "session_already_exists / world_deleting"}))
def create_session(request: HttpRequest):
    """Create a session; the response carries ``ownerToken`` once (hosted tiers: operator token;
    open to everyone in the browser-private profile)."""
    require_operator(request, open_in_browser_private=True)
    data = request_json(request)
    unknown_fields_check(data, SessionIn)
    for name in ("plugins",):
        if name in data and (not isinstance(data[name], list) or not all(isinstance(p, str) for p in data[name])):
            raise InvalidRequest(code="invalid_plugins", message="plugins must be an array of plugin ids")
    if "seatRole" in data and not isinstance(data["seatRole"], str):
        raise InvalidRequest(code="invalid_seat_role", message="seatRole must be player, host or spectator")
    if "autoAdvanceLimit" in data and data["autoAdvanceLimit"] is None:
        raise InvalidRequest(code="invalid_auto_advance_limit", message="autoAdvanceLimit must be an integer 0-10")
    created = services.session_create(
        world_id=data.get("worldId"), locale=data.get("locale"), plugins=data.get("plugins"), session_id=data.get("id"),
        lore_override=data.get("loreOverride"), auto_advance_limit=data.get("autoAdvanceLimit"), seat_role=data.get("seatRole"),
    )
    body = selectors.session_out(created.session)
    body.update(created.extras)
    body["ownerToken"] = created.owner_token
    return Status(201, body)


@router.get("/sessions/{session_id}", auth=session_scope)
@contract(ok=SessionOut, security=OWNER, errors=SESSION_ERRORS)
def get_session(request: HttpRequest, session_id: str):
    return selectors.session_out(request.auth)


@router.patch("/sessions/{session_id}", auth=session_scope)
@contract(ok=SessionOut, body=SessionPatch, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_json_body / invalid_request (unknown field, details.issues) / invalid_status / "
         "invalid_runtime_model_overrides / invalid_auto_advance_limit",
    409: "session_ended / session_deleting / session_lifecycle_busy"}))
def update_session(request: HttpRequest, session_id: str):
    """status / runtimeModelOverrides / autoAdvanceLimit (absent fields stay unchanged; 400
    invalid_request for any other key)."""
    data = request_json(request)
    unknown_fields_check(data, SessionPatch)
    kwargs = {}
    for wire, name in (("status", "status"), ("runtimeModelOverrides", "runtime_model_overrides"),
                       ("autoAdvanceLimit", "auto_advance_limit")):
        if wire in data:
            kwargs[name] = data[wire]
    session = services.session_update(session_id, **kwargs)
    return selectors.session_out(session)


@router.delete("/sessions/{session_id}", auth=session_scope)
@contract(ok=Ok, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {409: "session_deleting"}))
def delete_session(request: HttpRequest, session_id: str):
    services.session_delete(session_id)
    return {"ok": True}


@router.get("/sessions/{session_id}/state", auth=session_scope)
@contract(ok=SessionStateOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {429: "rate_limit_exceeded: 120 requests a minute per client and path (Retry-After)"}))
def get_session_state(request: HttpRequest, session_id: str):
    """``{tables}``. 120 requests a minute per client and path (429 rate_limit_exceeded)."""
    _read_limit(request)
    return selectors.session_state(request.auth)


@router.patch("/sessions/{session_id}/seats/{seat_id}", auth=session_scope)
@contract(ok=SeatsOut, body=SeatPatch, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_body: not exactly {currentCharacterId}", 404: "seat_not_found",
    409: "seat_not_human / seat_character_unbound / session_not_active"}))
def update_seat(request: HttpRequest, session_id: str, seat_id: str):
    """Body exactly ``{currentCharacterId}`` (400 invalid_body otherwise)."""
    patch = seat_patch_parse(request_json(request))
    if patch is None:
        raise InvalidRequest(code="invalid_body", message="body must be { currentCharacterId: string }")
    seats = services.seat_update(session_id, seat_id, current_character_id=patch.current_character_id)
    return {"seats": seats}


@router.get("/sessions/{session_id}/action-kinds", auth=session_scope)
@contract(ok=ActionKindsOut, security=OWNER, errors=SESSION_ERRORS)
def list_action_kinds(request: HttpRequest, session_id: str):
    return selectors.action_kinds(request.auth, plugin_registry())


# --- session plugins ---------------------------------------------------------------------------


@router.get("/sessions/{session_id}/plugins", auth=session_scope)
@contract(ok=SessionPluginListOut, security=OWNER, errors=SESSION_ERRORS)
def list_session_plugins(request: HttpRequest, session_id: str):
    return selectors.session_plugins(request.auth, plugin_registry())


@router.put("/sessions/{session_id}/plugins/{plugin_id}", auth=session_scope)
@contract(ok=SessionPluginSetOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    404: "plugin_not_found", 409: "session_not_active / dimension_provider_required / dimension_provider_conflict"}))
def enable_session_plugin(request: HttpRequest, session_id: str, plugin_id: str):
    return services.session_plugin_set(session_id, plugin_id, is_enabled=True)


@router.delete("/sessions/{session_id}/plugins/{plugin_id}", auth=session_scope)
@contract(ok=SessionPluginSetOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    403: "plugin_locked: a core plugin", 404: "plugin_not_found",
    409: "session_not_active / dimension_provider_required / dimension_provider_conflict"}))
def disable_session_plugin(request: HttpRequest, session_id: str, plugin_id: str):
    return services.session_plugin_set(session_id, plugin_id, is_enabled=False)


# --- messages ----------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/messages", auth=session_scope)
@contract(ok=MessagesOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {429: "rate_limit_exceeded: 120 requests a minute per client and path (Retry-After)"}))
def list_messages(request: HttpRequest, session_id: str):
    """``{items}``, oldest first. 120 requests a minute per client and path (429 rate_limit_exceeded)."""
    _read_limit(request)
    return {"items": selectors.messages_all(request.auth)}


@router.get("/sessions/{session_id}/messages/page", auth=session_scope)
@contract(ok=MessagesPageOut, query=MessagesPageQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_query / invalid_cursor", 429: "rate_limit_exceeded: 120 requests a minute per client and path (Retry-After)"}))
def list_messages_page(request: HttpRequest, session_id: str):
    """Keyset page: ``?limit`` (default 80, max 500), ``?cursor`` (opaque; 400 invalid_cursor).
    120 requests a minute per client and path (429 rate_limit_exceeded)."""
    _read_limit(request)
    limit = _int_param(request, "limit", selectors.MESSAGES_PAGE_DEFAULT, selectors.MESSAGES_PAGE_MAX)
    return selectors.messages_page(request.auth, limit=limit, cursor=request.GET.get("cursor") or None)


@router.post("/sessions/{session_id}/messages/sync", auth=session_scope)
@contract(ok=MessagesSyncOut, body=MessagesSyncIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body / invalid_messages", 409: "session_not_active / session_deleting",
    429: "rate_limit_exceeded: 60 requests a minute per client and path"}))
def sync_messages(request: HttpRequest, session_id: str):
    """``{ok}``. 60 requests a minute per client and path (429 rate_limit_exceeded)."""
    rate_limit_hit(request, "messages-sync", per_minute=settings.COVEL_SYNC_RATE_LIMIT_RPM, key=request.path)
    data = request_json(request)
    if "messages" not in data:
        raise InvalidRequest(code="invalid_request_body", message="body must be { messages: [...] }")
    appended = services.messages_sync(session_id, data["messages"])
    return {"ok": True, "appended": appended}


# --- characters --------------------------------------------------------------------------------


# --- lorebook ----------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/lorebook", auth=session_scope)
@contract(ok=LorebookOut, security=OWNER, errors=SESSION_ERRORS)
def list_lorebook(request: HttpRequest, session_id: str):
    return {"items": selectors.lorebook_list(request.auth)}


@router.post("/sessions/{session_id}/lorebook", auth=session_scope, response={201: dict})
@contract(ok=LorebookEntryOut, status=201, body=LorebookEntryIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body / invalid_lorebook_entry", 409: "lorebook_entry_exists / session_not_active"}))
def create_lorebook_entry(request: HttpRequest, session_id: str):
    entry = services.lorebook_create(session_id, request_json(request))
    return Status(201, selectors.lorebook_out(entry, session_id))


@router.put("/sessions/{session_id}/lorebook/{entry_id}", auth=session_scope)
@contract(ok=LorebookEntryOut, body=LorebookEntryIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body / invalid_lorebook_entry", 404: "lorebook_entry_not_found", 409: "session_not_active"}))
def replace_lorebook_entry(request: HttpRequest, session_id: str, entry_id: str):
    entry = services.lorebook_replace(session_id, entry_id, request_json(request))
    return selectors.lorebook_out(entry, session_id)


@router.patch("/sessions/{session_id}/lorebook/{entry_id}", auth=session_scope)
@contract(ok=LorebookToggleOut, body=LorebookEnabledPatch, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body: not exactly {enabled: boolean}", 404: "lorebook_entry_not_found", 409: "session_not_active"}))
def toggle_lorebook_entry(request: HttpRequest, session_id: str, entry_id: str):
    data = request_json(request)
    if set(data) != {"enabled"}:
        raise InvalidRequest(code="invalid_request_body", message="body must be { enabled: boolean }")
    services.lorebook_set_enabled(session_id, entry_id, data["enabled"])
    return {"ok": True, "entryId": entry_id, "enabled": data["enabled"]}


@router.delete("/sessions/{session_id}/lorebook/{entry_id}", auth=session_scope)
@contract(ok=Ok, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    404: "lorebook_entry_not_found", 409: "session_not_active"}))
def delete_lorebook_entry(request: HttpRequest, session_id: str, entry_id: str):
    services.lorebook_delete(session_id, entry_id)
    return {"ok": True}


