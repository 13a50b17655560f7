"""Suspend / Resume endpoints (spec 004 §Suspend / Resume). Thin: authorize, parse, delegate to
turns/suspensions.py (its module docstring lists the rules and error codes).

Routes: GET /sessions/:id/suspensions, POST /sessions/:id/suspensions/:suspensionId/resume,
DELETE /sessions/:id/suspensions/:suspensionId.
"""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from covel.headers import plugin_user_settings_from_request, provider_keys_from_request
from covel.openapi import BUSY_ERRORS, OWNER, SESSION_ERRORS, contract, errors_merge
from sessions.api_scope import request_json, session_scope
from turns import suspensions
from turns.schemas import ApprovalRequiredOut, SuspensionAbandonOut, SuspensionListOut, SuspensionResumeIn, SuspensionResumeOut

router = Router(tags=["suspensions"])


@router.get("/sessions/{session_id}/suspensions", auth=session_scope)
@contract(ok=SuspensionListOut, security=OWNER, errors=SESSION_ERRORS)
def list_suspensions(request: HttpRequest, session_id: str):
    """``{items: SuspensionSummary[]}`` oldest first: id, sessionId, turnId, runtimeId, pluginId,
    reason, resumeSchema, createdAt. Errors: 404 session_not_found, 401 session_owner_required."""
    return {"items": suspensions.suspensions_list(request.auth)}


@router.post("/sessions/{session_id}/suspensions/{suspension_id}/resume", auth=session_scope, response={200: dict, 202: dict})
@contract(ok={200: SuspensionResumeOut, 202: ApprovalRequiredOut}, body=SuspensionResumeIn, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
              400: "resume_data_invalid / resume_schema_invalid / invalid_plugin_user_settings, or a body that is not {data}",
              404: "no such suspension, or its runtime is not active", 409: "already processed / suspension_outdated (details.reason)",
              500: "Resume failed / Resume commit failed (the suspension stays resumable)"}))
def resume_suspension(request: HttpRequest, session_id: str, suspension_id: str):
    """Body ``{data}`` matching the suspension's resumeSchema. 200 ``{result: {status: success |
    suspended, runtimeId, pluginId, suspensionId, turnId, output}, events}``. Errors: 400 (body),
    400 resume_data_invalid / resume_schema_invalid, 404 (no such suspension or runtime), 409
    (already processed), 409 suspension_outdated (details.reason), 500 Resume failed / Resume
    commit failed (the suspension stays resumable), 503 session_busy."""
    status, body = suspensions.suspension_resume(request.auth, suspension_id, request_json(request),
                                                 provider_keys=provider_keys_from_request(request),
                                                 plugin_settings=plugin_user_settings_from_request(request))
    return JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})


@router.delete("/sessions/{session_id}/suspensions/{suspension_id}", auth=session_scope)
@contract(ok=SuspensionAbandonOut, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {404: "no such pending suspension", 409: "being resumed"}))
def abandon_suspension(request: HttpRequest, session_id: str, suspension_id: str):
    """Abandon (delete) a pending suspension: ``{ok: true, suspensionId}``; the turn counts when it
    was the last one its logical turn waited on. Errors: 404, 409 while being resumed, 503 session_busy."""
    return suspensions.suspension_abandon(request.auth, suspension_id)
