"""Session endpoints that read or write through the turn layer (spec 004 §状态查询 GET /view,
§角色数据 GET|POST /characters). Thin: authorize, parse, delegate. ``auth=session_scope`` (404 before 401).
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.openapi import BUSY_ERRORS, OWNER, SESSION_ERRORS, contract, errors_merge
from plugins_app.registry import plugin_registry
from sessions.api_scope import request_json, session_scope
from sessions.schemas import CharacterIn, CharacterOut, CharactersOut
from sessions.selectors import character_out, characters_list
from turns.schemas import UiSlotsOut, UiSlotsQuery, ViewOut
from turns.selectors_ui import ui_slots
from turns.selectors_view import session_view
from turns.services_characters import character_upsert_commit

router = Router(tags=["sessions"])


@router.get("/sessions/{session_id}/view", auth=session_scope)
@contract(ok=ViewOut, security=OWNER, errors=SESSION_ERRORS)
def get_session_view(request: HttpRequest, session_id: str):
    """SessionSnapshot: the session, latest messages, characters, plugins, traces, event cursor."""
    return session_view(request.auth, plugin_registry())


@router.get("/sessions/{session_id}/characters", auth=session_scope)
@contract(ok=CharactersOut, security=OWNER, errors=SESSION_ERRORS)
def list_characters(request: HttpRequest, session_id: str):
    return {"items": characters_list(request.auth)}


# Same path as list_characters: one router must hold both methods (one URL pattern per path).
@router.post("/sessions/{session_id}/characters", auth=session_scope)
@contract(ok=CharacterOut, body=CharacterIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    400: "character_rejected: invalid, or refused by the schema or the applier", 409: "session_not_active"}))
def upsert_character(request: HttpRequest, session_id: str):
    """Create or update by id through one committed ``character.upsert`` proposal."""
    character = character_upsert_commit(session_id, request_json(request))
    return character_out(character, session_id)


@router.get("/sessions/{session_id}/ui-slots", auth=session_scope)
@contract(ok=UiSlotsOut, query=UiSlotsQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "unknown_ui_slot: `slot` names no slot the host knows"}))
def list_session_ui_slots(request: HttpRequest, session_id: str):
    """``{items: UiSlotSnapshot[]}``: what each UI slot shows now, from committed data (turns/selectors_ui.py)."""
    return {"items": ui_slots(request.auth, plugin_registry(), prefix=request.GET.get("prefix") or None,
                              slot=request.GET.get("slot") or None, key=request.GET.get("key") or None)}
