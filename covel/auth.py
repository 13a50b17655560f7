"""Deployment tiers and the operator token (spec 004 §鉴权).

Tier ``self`` checks nothing (loopback bind + Host check protect it). Tiers ``demo``/``commercial``
require the operator token (``COVEL_DESKTOP_REST_TOKEN``) on operator routes, sent as
``Authorization: Bearer``, ``X-Session-Token`` or ``?session_token=``. Session owner tokens are
checked in ``sessions.auth``; this module is the part every app may use.
"""
from __future__ import annotations

import hmac

from django.conf import settings

from covel.errors import Unauthorized


def owner_checks_enabled() -> bool:
    """True in the tiers that enforce owner tokens (demo, commercial)."""
    return settings.DEPLOYMENT_TIER in ("demo", "commercial")


def browser_private() -> bool:
    """True in the browser-private profile (STORE_BACKEND=memory, covel.memory_store).

    That profile is the public, shared form of spec 004 §生产 MemoryStore 例外: session owner tokens
    are checked on every session-scoped route even in the self tier (``session_owner_checks_enabled``).
    """
    from covel.memory_store import store_is_memory

    return store_is_memory()


def session_owner_checks_enabled() -> bool:
    """True where session-scoped routes check owner tokens: demo, commercial, and browser-private."""
    return owner_checks_enabled() or browser_private()


def deployment_form() -> str:
    """spec 004 deployment.form: ``personal`` (self tier, sqlite/pg), ``browser-private``
    (STORE_BACKEND=memory) or ``hosted`` (demo / commercial)."""
    if owner_checks_enabled():
        return "hosted"
    return "browser-private" if browser_private() else "personal"


def request_tokens(request) -> list[str]:
    """Every token the request presents: Bearer header, X-Session-Token, ?session_token= (in that order)."""
    tokens: list[str] = []
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        tokens.append(auth[7:].strip())
    header = request.headers.get("X-Session-Token", "").strip()
    if header:
        tokens.append(header)
    query = request.GET.get("session_token", "").strip()
    if query:
        tokens.append(query)
    return tokens


def is_operator(request) -> bool:
    """True when the request carries the configured operator token."""
    expected = settings.COVEL_OPERATOR_TOKEN
    if not expected:
        return False
    return any(hmac.compare_digest(t.encode(), expected.encode()) for t in request_tokens(request))


def require_operator(request, *, open_in_browser_private: bool = False) -> None:
    """Raise 401 operator_token_required unless the operator token is presented, where the route
    needs it: in the hosted tiers (demo, commercial), and in the browser-private profile even in the
    self tier (spec 004 §生产 MemoryStore 例外: global world writes, dimension import, saving a
    generated world, community code approval/activation, diagnostics incl. provider keys, model
    database refresh, host configuration and media cleanup). Without a configured operator token
    those routes stay closed there. ``open_in_browser_private``: the route is open to everyone in
    that profile (creating and forking sessions, listing a provider's models)."""
    if is_operator(request):
        return
    if owner_checks_enabled() or (browser_private() and not open_in_browser_private):
        raise Unauthorized(code="operator_token_required", message="Operator token required")
