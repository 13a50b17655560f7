"""Browser-private workspace endpoints (spec 004 §浏览器私有工作区): the internal sync protocol of the
Web LocalDataService, served only by a server on the in-memory store (STORE_BACKEND=memory); any
other server answers 409 browser_private_profile_required. Thin: authorize, parse, delegate to
turns/browser_workspace.py.

Routes: PUT /sessions/:id/browser-checkpoint (body up to 64 MiB, covel.limits), POST
/sessions/:id/browser-commit. Both check the owner token in every tier.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.openapi import BUSY_ERRORS, OWNER, contract, errors_merge
from sessions.api_scope import SESSION_PATH_PARAM, request_json
from turns import browser_workspace as bw
from turns.schemas_browser import (
    BrowserCheckpointIn,
    BrowserCheckpointOut,
    BrowserCommitIn,
    SessionCommitOut,
)

router = Router(tags=["browser-private"])

_MISSING = object()


def browser_route_scope(request: HttpRequest):
    """ninja ``auth``: 409 browser_private_profile_required, then 401 for an existing session without
    its owner token. ``request.auth`` is the Session, or ``_MISSING`` when there is none yet."""
    match = getattr(request, "resolver_match", None)
    session_id = (match.kwargs if match else {}).get(SESSION_PATH_PARAM) or ""
    session = bw.browser_scope(request, session_id)
    return session if session is not None else _MISSING


_COMMON_ERRORS = {
    401: "session_owner_required: no valid owner token (checked in every tier here; also when the owner changed "
         "while the request waited for the session lock)",
    409: f"{bw.CODE_PROFILE_REQUIRED}: the server's store is not the in-memory one / session_incarnation_changed / "
         f"session_deleting / {bw.CODE_REVISION_CONFLICT} (details.reason stale | fork | base)",
}


@router.put("/sessions/{session_id}/browser-checkpoint", auth=browser_route_scope)
@contract(ok=BrowserCheckpointOut, body=BrowserCheckpointIn, security=OWNER, errors=errors_merge(_COMMON_ERRORS, BUSY_ERRORS, {
    400: f"invalid_json_body / invalid_request (unknown field) / {bw.CODE_INVALID} (structure, schemaVersion not 2, "
         f"duplicate messages[i].id, credentials inside; details.issues or details.path) / {bw.CODE_SCOPE} (sessionId, "
         f"profile, a record of another session, world.id) / {bw.CODE_RECORD_SCOPE} (a snapshot or suspension id of "
         "another session; nothing is written)",
    401: "operator_token_required: the checkpoint names a world this server does not have",
    404: "world_not_found: the operator's checkpoint names a missing world without its content",
    409: f"world_deleting / {bw.CODE_UNSUPPORTED_MUTATION}: a background job runs and the upload changes more than "
         "new user messages, the status and model overrides",
    413: "the request body is larger than 64 MiB"}))
def put_browser_checkpoint(request: HttpRequest, session_id: str):
    """Replace the session's temporary workspace with the browser's checkpoint, in one transaction.
    A session this process does not have (after a restart) is rebuilt, owned by the presented token."""
    data = request_json(request)
    unknown = sorted(set(data) - {"checkpoint"})
    if unknown:
        raise bw.ApiError(400, "invalid_request", f"Unknown field: {unknown[0]}", {"issues": [{"path": unknown[0]}]})
    if "checkpoint" not in data:
        raise bw.InvalidCheckpoint(message="checkpoint is required", details={"path": "checkpoint"})
    seen = request.auth if request.auth is not _MISSING else None
    return bw.browser_checkpoint_put(request, session_id, data["checkpoint"], seen=seen).out()


@router.post("/sessions/{session_id}/browser-commit", auth=browser_route_scope)
@contract(ok=SessionCommitOut, body=BrowserCommitIn, security=OWNER, errors=errors_merge(_COMMON_ERRORS, BUSY_ERRORS, {
    400: "invalid_json_body / invalid_request: actionId not a string of 1-256 characters, baseRevision not an integer ≥ 0",
    404: "session_not_found",
    409: f"{bw.CODE_CHECKPOINT_REQUIRED}: no checkpoint uploaded and not a new save's first export"}))
def create_browser_commit(request: HttpRequest, session_id: str):
    """Export the next revision as a SessionCommit; the same ``actionId`` returns the same commit."""
    if request.auth is _MISSING:
        raise bw.SessionNotFound(session_id)
    action_id, base_revision = bw.commit_request_validate(request_json(request))
    return bw.browser_commit_export(request, session_id, action_id=action_id, base_revision=base_revision,
                                    seen=request.auth)
