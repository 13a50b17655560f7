"""GET|PATCH /api/sessions/:id/orchestration (spec 004 §会话编排设置). Both methods on this one router
(one URL pattern per path, else ninja answers 405). Mechanics in sessions/orchestration.py."""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.openapi import OWNER, contract
from sessions import orchestration
from sessions.api_scope import request_json, session_scope
from sessions.schemas import OrchestrationOut, OrchestrationPatch

router = Router(tags=["sessions"])

_ERRORS = {401: "session_owner_required (demo/commercial tiers)", 404: "session_not_found"}


@router.get("/sessions/{session_id}/orchestration", auth=session_scope)
@contract(ok=OrchestrationOut, errors=_ERRORS, security=OWNER)
def get_session_orchestration(request: HttpRequest, session_id: str):
    """``{settings, policies, status}``: the saved settings (defaults filled in), the session's
    turn-policy services and whether one is chosen. Runs and imports no plugin code."""
    return orchestration.orchestration_get(request.auth)


@router.patch("/sessions/{session_id}/orchestration", auth=session_scope)
@contract(ok=OrchestrationOut, body=OrchestrationPatch, security=OWNER, errors={
    **_ERRORS, 400: "invalid_orchestration: unknown field, bad number, or a turnPolicy that is not the session's",
    409: "session_deleting / session_ended", 503: "session_busy"})
def update_session_orchestration(request: HttpRequest, session_id: str):
    """Merge ``{turnPolicy?, maxActors?, maxSubagentCalls?}`` into the settings (next execution on)."""
    return orchestration.orchestration_update(session_id, request_json(request))
