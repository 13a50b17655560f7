"""Owner-token checks in the demo tier (spec 004 §鉴权：Session owner token).

The route list comes from the URL resolver: every route whose path carries a session id is walked
without a token, so a new session-scoped route cannot escape the check.
"""
from __future__ import annotations

import inspect
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.sessions.support import OPERATOR_TOKEN, session_create

pytestmark = pytest.mark.django_db
SESSION_PARAMS = ("session_id", "sessionId", "id")
METHODS = ("get", "post", "put", "patch", "delete")


def _walk(patterns, prefix=""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def session_scoped_routes() -> list[tuple[str, str]]:
    """(method, path template) of every /api/ route with a session id path parameter."""
    routes = set()
    for template, pattern in _walk(get_resolver().url_patterns):
        if not template.startswith("api/"):
            continue
        params = re.findall(r"<(?:\w+:)?(\w+)>", template)
        session_param = next((p for p in params if p in ("session_id", "sessionId")), None)
        if session_param is None:
            continue
        # ninja's URL view is a closure over its PathView, which lists the operations and methods.
        path_view = inspect.getclosurevars(pattern.callback).nonlocals.get("self")
        operations = getattr(path_view, "operations", None) or []
        methods = sorted({m.lower() for op in operations for m in op.methods}) or list(METHODS)
        for method in methods:
            routes.add((method, template))
    return sorted(routes)


def _fill(template: str, session_id: str) -> str:
    def value(match):
        name = match.group(1)
        return session_id if name in ("session_id", "sessionId") else f"x-{name}"

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", value, template)


def test_route_walker_finds_the_session_routes():
    routes = session_scoped_routes()
    paths = {path for _, path in routes}
    assert "api/sessions/<session_id>" in paths
    assert "api/sessions/<session_id>/plugin-data/<plugin_id>/<namespace>/<key>" in paths
    assert "api/traces/<session_id>" in paths
    assert len(routes) >= 30


def test_every_session_scoped_route_requires_the_owner_token(client, demo_tier):
    # given a session in the demo tier
    session = session_create(client, worldId="tide-test", plugins=["teller"])
    failures = []
    for method, template in session_scoped_routes():
        # when a request carries no token (and an empty JSON body for writes)
        url = _fill(template, session["id"])
        response = getattr(client, method)(url, {}, content_type="application/json") if method != "get" else client.get(url)
        # then it is refused with 401 session_owner_required before any other check
        if response.status_code != 401 or response.json().get("code") != "session_owner_required":
            failures.append((method.upper(), url, response.status_code, response.content[:120]))
    assert failures == []


def test_missing_session_is_404_before_401(client, demo_tier):
    response = client.get("/api/sessions/does-not-exist/messages")
    assert response.status_code == 404 and response.json()["code"] == "session_not_found"


@pytest.mark.parametrize("how", ["bearer", "header", "query"])
def test_owner_token_is_accepted_three_ways(client, demo_tier, how):
    session = session_create(client, worldId="tide-test", plugins=[])
    token = session["ownerToken"]
    url = f"/api/sessions/{session['id']}"
    if how == "bearer":
        response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")
    elif how == "header":
        response = client.get(url, HTTP_X_SESSION_TOKEN=token)
    else:
        response = client.get(f"{url}?session_token={token}")
    assert response.status_code == 200 and response.json()["id"] == session["id"]


def test_wrong_token_and_other_sessions_token_are_refused(client, demo_tier):
    first = session_create(client, plugins=[])
    second = session_create(client, plugins=[])
    response = client.get(f"/api/sessions/{first['id']}", HTTP_X_SESSION_TOKEN=second["ownerToken"])
    assert response.status_code == 401 and response.json()["code"] == "session_owner_required"


def test_operator_token_passes_every_owner_check(client, demo_tier):
    session = session_create(client, plugins=[])
    response = client.get(f"/api/sessions/{session['id']}/messages", HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}")
    assert response.status_code == 200


def test_hosted_create_needs_operator_and_list_is_operator_only(client, demo_tier):
    refused = client.post("/api/sessions", {}, content_type="application/json")
    assert refused.status_code == 401 and refused.json()["code"] == "operator_token_required"
    session = session_create(client, plugins=[])
    assert client.get("/api/sessions", HTTP_X_SESSION_TOKEN=session["ownerToken"]).json() == {"items": []}
    listed = client.get("/api/sessions", HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}").json()["items"]
    assert [i["id"] for i in listed] == [session["id"]]


def test_session_without_stored_hash_is_always_refused(client, demo_tier):
    from sessions.models import Session

    session = session_create(client, plugins=[])
    Session.objects.filter(pk=session["id"]).update(owner_token_hash="")
    response = client.get(f"/api/sessions/{session['id']}", HTTP_X_SESSION_TOKEN=session["ownerToken"])
    assert response.status_code == 401
