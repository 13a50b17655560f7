"""Conventions that only the ASGI stack (daphne's view of the app) can show: chunked bodies, 500s."""
from __future__ import annotations

import asyncio
import json

import pytest
from django.test import Client, override_settings


async def _call(app, scope, chunks):
    sent = []
    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.Event().wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _scope(path, method="POST", headers=()):
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1:3001"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 3001),
    }


@pytest.mark.django_db(transaction=True)
async def test_oversized_chunked_body_is_413_without_content_length():
    from covel.asgi import application

    chunk = b"x" * (256 * 1024)
    sent = await _call(application, _scope("/api/anything"), [b'{"a":"'] + [chunk] * 5 + [b'"}'])
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"]) == {"error": "Payload Too Large"}


@pytest.mark.django_db(transaction=True)
async def test_install_route_accepts_bodies_between_1_and_20_mib_past_the_limit_layer():
    from covel.asgi import application

    chunk = b"x" * (1024 * 1024)
    sent = await _call(application, _scope("/api/install/validate/nothing"), [b'{"a":"'] + [chunk] * 2 + [b'"}'])
    # Not cut off by the body limit: the request reached routing (unknown route → 404 envelope).
    assert sent[0]["status"] == 404


@pytest.mark.django_db(transaction=True)
async def test_chunked_small_body_reaches_the_route():
    from covel.asgi import application

    sent = await _call(application, _scope("/api/health", method="GET"), [b"", b""])
    assert sent[0]["status"] == 200


@pytest.mark.django_db
@override_settings(ROOT_URLCONF="tests.covel.boom_urls")
def test_unexpected_exception_is_a_bare_500_envelope():
    response = Client(raise_request_exception=False).get("/api/boom")
    assert response.status_code == 500
    assert response.json() == {"error": "Internal server error"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path,raw", [
    ("/static/../../x", b"/static/..%2f..%2fx"),
    ("/static/admin/../../../../settings.py", b"/static/admin/../../../../settings.py"),
    ("/static/no-such-file.css", b"/static/no-such-file.css"),
])
async def test_static_refusals_are_404_envelopes_not_500_pages(path, raw):
    # given the ASGI application daphne serves (static assets on, the default)
    from covel.asgi import application

    scope = {**_scope(path, method="GET"), "raw_path": raw}
    # when a path outside the static roots, or a missing file, is asked for
    sent = await _call(application, scope, [b""])
    # then the answer is the error envelope, 404, never a 500 page
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = dict(start["headers"])
    assert start["status"] == 404
    assert headers[b"Content-Type"].startswith(b"application/json") and headers[b"Cache-Control"] == b"no-store"
    assert json.loads(body) == {"error": f"Not found: {path}", "code": "not_found"}
