"""Setup runtime control (spec 004 §Setup runtime 控制（重试 / 跳过）):
POST /api/sessions/:id/setup/:runtimeId/retry and .../waive. Both return
``{ok, runtimeId, state}``; 409 when the target is not blocked; waive needs ``{confirm: true}``
(400 confirm_required). ``runtimeId`` is the full, URL-encoded ``<pluginId>/<runtimeName>``.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.errors import ApiError, Conflict
from covel.openapi import OWNER, SESSION_ERRORS, contract, errors_merge
from sessions.api_scope import request_json, session_scope
from turns.schemas import SetupRuntimeOut, SetupWaiveIn
from turns.engine.setup import SetupNotBlocked, setup_runtime_retry, setup_runtime_waive

router = Router(tags=["setup"])

CONFIRM_REQUIRED = "confirm_required"


@router.post("/sessions/{session_id}/setup/{path:runtime_id}/retry", auth=session_scope)
@contract(ok=SetupRuntimeOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    409: "the setup runtime is not blocked"}))
def retry_setup_runtime(request: HttpRequest, session_id: str, runtime_id: str):
    """Reset a blocked setup runtime to pending (generation + 1, attempts 0)."""
    try:
        state = setup_runtime_retry(request.auth.id, runtime_id)
    except SetupNotBlocked as exc:
        raise Conflict(message=str(exc)) from None
    return {"ok": True, "runtimeId": runtime_id, "state": state}


@router.post("/sessions/{session_id}/setup/{path:runtime_id}/waive", auth=session_scope)
@contract(ok=SetupRuntimeOut, body=SetupWaiveIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "confirm_required: the body is not {\"confirm\": true}", 409: "the setup runtime is not blocked"}))
def waive_setup_runtime(request: HttpRequest, session_id: str, runtime_id: str):
    """Mark a blocked setup runtime done {resolution: waived} with a degradation warning."""
    if request_json(request).get("confirm") is not True:
        raise ApiError(400, CONFIRM_REQUIRED, "Waiving a setup step needs the body {\"confirm\": true}")
    try:
        state = setup_runtime_waive(request.auth.id, runtime_id)
    except SetupNotBlocked as exc:
        raise Conflict(message=str(exc)) from None
    return {"ok": True, "runtimeId": runtime_id, "state": state}
