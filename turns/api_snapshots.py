"""Snapshot and fork endpoints (spec 004 §Snapshot / Fork). Thin: authorize, parse, delegate to
turns/snapshots.py.

Routes: POST/GET /sessions/:id/snapshots, GET/DELETE /sessions/:id/snapshots/:snapshotId,
POST /sessions/:id/snapshots/:snapshotId/restore (restore is this server's addition; the spec's
clients restore through the view), POST /sessions/:id/fork.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from covel.errors import error_response
from covel.jsonbody import unknown_fields_check
from covel.openapi import BUSY_ERRORS, OWNER, SESSION_ERRORS, contract, errors_merge
from turns import snapshots
from sessions.api_scope import request_json, session_scope
from covel.auth import require_operator
from sessions.errors import InvalidRequest
from turns.schemas import (ForkIn, ForkOut, SnapshotDeleteOut, SnapshotIn, SnapshotListOut, SnapshotOut,
                           SnapshotPageQuery, SnapshotRestoreOut)

router = Router(tags=["snapshots"])


def _limit_param(request: HttpRequest) -> int:
    raw = request.GET.get("limit")
    if raw is None or raw == "":
        return snapshots.LIST_LIMIT_DEFAULT
    # isdigit() alone admits "²" and other digits int() refuses.
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise InvalidRequest(code="invalid_query", message="limit must be a positive integer")
    return min(int(raw), snapshots.LIST_LIMIT_MAX)


def fork_scope(request: HttpRequest):
    """Fork creates a session (spec 004 §鉴权). Like every session-scoped route: 404 session_not_found,
    then 401 session_owner_required without a valid token; then, in hosted tiers, the owner token
    alone is not enough: 401 operator_token_required."""
    session = session_scope(request)
    require_operator(request, open_in_browser_private=True)  # the owner forks their own session there
    return session


@router.post("/sessions/{session_id}/snapshots", auth=session_scope, response={201: dict})
@contract(ok=SnapshotOut, status=201, body=SnapshotIn, body_required=False, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {400: "invalid_json_body / invalid_request: unknown field (details.issues), label not a string of at most 256"}))
def create_snapshot(request: HttpRequest, session_id: str):
    """Save the current state as a ``kind: manual`` snapshot; optional body ``{label}``. 201 SnapshotRecord."""
    data = request_json(request)
    unknown_fields_check(data, SnapshotIn)
    snapshot = snapshots.snapshot_create(session_id, label=data.get("label", ""))
    return Status(201, snapshots.snapshot_out(snapshot))


@router.get("/sessions/{session_id}/snapshots", auth=session_scope)
@contract(ok=SnapshotListOut, query=SnapshotPageQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_query / invalid_cursor"}))
def list_snapshots(request: HttpRequest, session_id: str):
    """Snapshot metadata pages: ``?limit`` (default 50, max 500), ``?cursor`` (400 invalid_cursor)."""
    return snapshots.snapshot_list(session_id, limit=_limit_param(request), cursor=request.GET.get("cursor") or None)


@router.get("/sessions/{session_id}/snapshots/{snapshot_id}", auth=session_scope)
@contract(ok=SnapshotOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "snapshot_not_found"}))
def get_snapshot(request: HttpRequest, session_id: str, snapshot_id: str):
    return snapshots.snapshot_out(snapshots.snapshot_get(session_id, snapshot_id))


@router.delete("/sessions/{session_id}/snapshots/{snapshot_id}", auth=session_scope)
@contract(ok=SnapshotDeleteOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "snapshot_not_found"}))
def delete_snapshot(request: HttpRequest, session_id: str, snapshot_id: str):
    snapshots.snapshot_delete(session_id, snapshot_id)
    return {"ok": True, "snapshotId": snapshot_id}


@router.post("/sessions/{session_id}/snapshots/{snapshot_id}/restore", auth=session_scope)
@contract(ok=SnapshotRestoreOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    404: "snapshot_not_found", 409: "session_not_active / session_deleting / a turn is running"}))
def restore_snapshot(request: HttpRequest, session_id: str, snapshot_id: str):
    """Put the session back to the snapshot's state: ``{ok, sessionId, snapshotId, completedPlayerTurns}``."""
    snapshot = snapshots.snapshot_restore(session_id, snapshot_id)
    return {"ok": True, "sessionId": session_id, "snapshotId": snapshot.snapshot_id,
            "completedPlayerTurns": snapshot.completed_player_turns}


@router.post("/sessions/{session_id}/fork", auth=fork_scope, response={201: dict})
@contract(ok=ForkOut, status=201, body=ForkIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    400: "fromSnapshotId is required (no code, spec 004) / invalid_json_body / invalid_request (unknown field)", 401: "operator_token_required (demo/commercial: the owner "
    "token alone cannot fork)", 404: "not_found: no such snapshot in this session (spec 004)", 429: "rate_limit_exceeded (10 a minute per parent and "
    "client address; Retry-After)"}))
def fork_session(request: HttpRequest, session_id: str):
    """Body ``{fromSnapshotId}`` (400 when missing). 201 ``{sessionId, parentSessionId, fromSnapshotId,
    forkSnapshotId, missingMediaCount, ownerToken}``; the child's owner token appears only here.
    10 requests a minute per parent and client address (429 rate_limit_exceeded + Retry-After),
    counted before the body is checked."""
    try:
        snapshots.fork_rate_limiter.hit(session_id, request.META.get("REMOTE_ADDR") or "unknown")
    except snapshots.ForkRateLimited as exc:
        response = error_response(exc.status, exc.message, exc.code, exc.details)
        response["Retry-After"] = str(exc.retry_after_seconds)
        return response
    data = request_json(request)
    unknown_fields_check(data, ForkIn)
    from_snapshot_id = data.get("fromSnapshotId")
    if not isinstance(from_snapshot_id, str) or not from_snapshot_id:
        raise InvalidRequest(message="fromSnapshotId is required")
    result = snapshots.session_fork(session_id, from_snapshot_id=from_snapshot_id)
    return Status(201, {
        "sessionId": result.session.id, "parentSessionId": result.parent_session_id,
        "fromSnapshotId": result.from_snapshot_id, "forkSnapshotId": result.fork_snapshot_id,
        "missingMediaCount": result.missing_media_count, "ownerToken": result.owner_token,
    })
