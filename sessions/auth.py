"""Session owner token checks (spec 004 §鉴权：Session owner token); tiers and the operator token
are in ``covel.auth``.

Tier ``self`` checks nothing (loopback bind + Host check protect it). Tiers ``demo``/``commercial``
require, on every session-scoped endpoint, the session's owner token or the operator token
(``COVEL_DESKTOP_REST_TOKEN``), sent as ``Authorization: Bearer``, ``X-Session-Token`` or
``?session_token=``. A missing session is 404 before any 401.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from covel.auth import is_operator, request_tokens, session_owner_checks_enabled
from covel.errors import SessionNotFound, Unauthorized


def token_hash(token: str) -> str:
    """SHA-256 hex digest of a token; only this is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_owner_token() -> str:
    """A fresh unguessable owner token (URL-safe, 256 bits)."""
    return secrets.token_urlsafe(32)


def session_owner_check(request, session) -> None:
    """Raise 401 session_owner_required unless the tier is self (and the profile is not
    browser-private), the request is the operator, or it presents the session's owner token.
    Sessions with no stored hash are always refused."""
    if not session_owner_checks_enabled() or is_operator(request):
        return
    stored = session.owner_token_hash
    if stored and any(hmac.compare_digest(token_hash(t), stored) for t in request_tokens(request)):
        return
    raise Unauthorized(code="session_owner_required", message="Session owner token required")


def session_and_players_get_authorized(request, session_id: str) -> tuple[Any, list[str]]:
    """``session_get_authorized`` for POST /api/actions: the Session row and the ids of its
    ``type: player`` characters in creation order (what a seat with ``characters: "auto"`` binds,
    sessions.selectors.seat_bound_character_ids), read by one statement (issue 18: two per turn).
    Raises SessionNotFound (404) / Unauthorized (401)."""
    from covel.sqlrows import RowsQuery, model_from_row, rows_select_many
    from sessions.models import Character, Session

    fields = tuple(f.name for f in Session._meta.concrete_fields)
    session_rows, player_rows = rows_select_many([
        RowsQuery(Session, fields, "id = %s", [session_id], "id"),
        RowsQuery(Character, ("character_id",), "session_id = %s AND type = %s", [session_id, "player"], "created_at, id"),
    ])
    if not session_rows:
        raise SessionNotFound(session_id)
    session = model_from_row(Session, fields, session_rows[0])
    session_owner_check(request, session)
    return session, [row[0] for row in player_rows]


def session_get_authorized(request, session_id: str, *, for_update: bool = False):
    """Load a session for a session-scoped endpoint: 404 session_not_found first, then the owner check.

    Returns the Session model instance. Raises SessionNotFound (404) / Unauthorized (401).
    """
    from sessions.models import Session

    queryset = Session.objects.select_for_update() if for_update else Session.objects
    session = queryset.filter(pk=session_id).first()
    if session is None:
        raise SessionNotFound(session_id)
    session_owner_check(request, session)
    return session
