"""Authorization of session-scoped endpoints as a django-ninja ``auth`` callable.

Used as ``auth=session_scope`` on every operation whose path carries ``{session_id}``: ninja runs
auth before it parses the query and body, so a request without the owner token gets 401
session_owner_required even when its body is invalid, and a missing session gets 404
session_not_found first (spec 004 §鉴权). The authorized Session is ``request.auth``.
"""
from __future__ import annotations

from sessions.auth import session_get_authorized

SESSION_PATH_PARAM = "session_id"


def session_scope(request):
    """Return the Session named by the ``session_id`` path parameter, or raise 404 / 401."""
    match = getattr(request, "resolver_match", None)
    session_id = (match.kwargs if match else {}).get(SESSION_PATH_PARAM)
    return session_get_authorized(request, session_id or "")


def request_json(request) -> dict:
    """The JSON object body already parsed by covel.middleware.JsonBodyMiddleware ({} when empty)."""
    return getattr(request, "covel_json", None) or {}
