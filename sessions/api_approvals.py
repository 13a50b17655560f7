"""Approval endpoints (spec 004 §RPC Approval 流程): list and revoke a session's approvals, decide one.

GET and DELETE /sessions/{id}/approvals share this router (one router per path, else 405).
Mechanics in ``sessions.approvals`` (writes) and ``sessions.grants`` (reads).
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.openapi import OWNER, SESSION_ERRORS, contract

from sessions import approvals, grants
from sessions.api_scope import request_json, session_scope
from sessions.schemas import (ApprovalDecisionIn, ApprovalDecisionOut, ApprovalsOut, ApprovalsRevokeOut,
                              ApprovalsRevokeQuery)

router = Router(tags=["approvals"])


@router.get("/sessions/{session_id}/approvals", auth=session_scope)
@contract(ok=ApprovalsOut, security=OWNER, errors=SESSION_ERRORS)
def list_session_approvals(request: HttpRequest, session_id: str):
    """``{items: [{approvalId, sessionId, pluginId, action, payload, trustLevel, requestedAt,
    description}]}``: the session's pending requests (a refreshed page rebuilds its dialog queue)."""
    return {"items": grants.approvals_pending(request.auth)}


@router.delete("/sessions/{session_id}/approvals", auth=session_scope)
@contract(ok=ApprovalsRevokeOut, query=ApprovalsRevokeQuery, security=OWNER, errors=SESSION_ERRORS)
def revoke_session_approvals(request: HttpRequest, session_id: str):
    """Revoke the session's grants, once grants and pending requests (``?pluginId=`` only that
    plugin's): ``{ok: true, cleared}``. The persisted generation rotates, so every process refuses
    the old grants; loaded modules stay loaded until restart (spec 004 revoke 边界)."""
    plugin_id = request.GET.get("pluginId") or None
    cleared = approvals.approvals_revoke(session_id, plugin_id=plugin_id)
    return {"ok": True, "cleared": cleared}


@router.post("/approvals/{approval_id}/decision")
@contract(ok=ApprovalDecisionOut, body=ApprovalDecisionIn, security=OWNER, errors={
    400: "invalid_decision / invalid_scope", 401: "session_owner_required / operator_token_required",
    404: "approval_not_found / session_not_found", 409: "approval_scope_changed"})
def decide_approval(request: HttpRequest, approval_id: str):
    """Body ``{decision: "allow" | "deny", scope?: "once" | "session"}`` → ``{ok, decision, scope?,
    pending, runtimeLoadErrors?}``. Errors: 400 invalid_decision / invalid_scope, 401
    session_owner_required / operator_token_required, 404 approval_not_found / session_not_found,
    409 approval_scope_changed (see ``sessions.approvals.approval_decide``)."""
    return approvals.approval_decide(request, approval_id, request_json(request))
