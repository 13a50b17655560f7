"""Session endpoints that read or write through the turn layer (spec 004 §状态查询 GET /view,
§角色数据 GET|POST /characters). Thin: authorize, parse, delegate. ``auth=session_scope`` (404 before 401).
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from plugins_app.registry import plugin_registry
from sessions.api_scope import request_json, session_scope
from sessions.selectors import character_out, characters_list
from turns.selectors_view import session_view
from turns.services_characters import character_upsert_commit

router = Router(tags=["sessions"])


@router.get("/sessions/{session_id}/view", auth=session_scope)
def get_session_view(request: HttpRequest, session_id: str):
    """SessionSnapshot: the session, latest messages, characters, plugins, traces, event cursor."""
    return session_view(request.auth, plugin_registry())


@router.get("/sessions/{session_id}/characters", auth=session_scope)
def list_characters(request: HttpRequest, session_id: str):
    return {"items": characters_list(request.auth)}


# Same path as list_characters: one router must hold both methods (one URL pattern per path).
@router.post("/sessions/{session_id}/characters", auth=session_scope)
def upsert_character(request: HttpRequest, session_id: str):
    """Create or update by id through one committed ``character.upsert`` proposal."""
    character = character_upsert_commit(session_id, request_json(request))
    return character_out(character, session_id)
