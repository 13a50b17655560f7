"""GET|HEAD /plugin-assets/:pluginId/:digest/* (spec 004): public, content-addressed plugin view files;
every refusal is the same JSON 404 with no-store."""
from __future__ import annotations

import os

import pytest
from asgiref.sync import async_to_sync

from tests.sessions.ui_support import ui_plugins  # noqa: F401

NOT_FOUND = {"error": "File not found"}


@pytest.fixture
def view_url(client, ui_plugins, db):
    """The map view's entry URL as GET /api/ui-specs publishes it."""
    body = client.get("/api/ui-specs").json()
    (group,) = [g for g in body["view"] if g["pluginId"] == "ui-panel"]
    return next(s for s in group["specs"] if s["id"] == "map")["webview"]["url"]


def base_of(url: str) -> str:
    return url.rsplit("/", 1)[0]


def assert_not_found(response):
    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert response["Cache-Control"] == "no-store"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_entry_page_carries_the_host_bridge_the_page_csp_and_no_cache(client, view_url, ui_plugins):
    response = client.get(view_url)

    assert response.status_code == 200
    html = response.content.decode()
    original = (ui_plugins / "ui-panel" / "ui" / "app" / "index.html").read_text()
    assert html.startswith("<!doctype html>\n<html>\n<head><script>")
    assert "window.covel = Object.freeze" in html and '<div id="map">Map</div>' in html
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Cache-Control"] == "no-cache"
    assert response["Content-Length"] == str(len(response.content)) and len(response.content) > len(original)
    csp = response["Content-Security-Policy"]
    assert "script-src 'self' 'sha256-" in csp and "connect-src 'none'" in csp and "frame-ancestors 'self'" in csp
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response["X-Frame-Options"] == "SAMEORIGIN"
    assert response["ETag"].startswith('"') and len(response["ETag"]) == 34


def test_other_files_are_immutable_and_sandboxed(client, view_url, ui_plugins):
    response = client.get(base_of(view_url) + "/assets/app.js")

    assert response.status_code == 200
    assert response.content == (ui_plugins / "ui-panel" / "ui" / "app" / "assets" / "app.js").read_bytes()
    assert response["Content-Type"] == "text/javascript; charset=utf-8"
    assert response["Cache-Control"] == "public, max-age=31536000, immutable"
    assert response["Content-Security-Policy"] == "sandbox"
    assert response["Content-Length"] == str(len(response.content))
    assert client.get(base_of(view_url) + "/assets/style.css")["Content-Type"] == "text/css; charset=utf-8"


def test_a_matching_if_none_match_is_304_with_the_same_cache_policy(client, view_url):
    for url, cache in ((view_url, "no-cache"), (base_of(view_url) + "/assets/app.js", "public, max-age=31536000, immutable")):
        etag = client.get(url)["ETag"]

        again = client.get(url, HTTP_IF_NONE_MATCH=etag)

        assert again.status_code == 304 and again.content == b""
        assert again["Cache-Control"] == cache and again["ETag"] == etag


def test_head_answers_the_headers_without_a_body(client, view_url):
    full = client.get(base_of(view_url) + "/assets/app.js")

    head = client.head(base_of(view_url) + "/assets/app.js")

    assert head.status_code == 200 and head.content == b""
    assert head["Content-Length"] == full["Content-Length"] and head["ETag"] == full["ETag"]


def test_public_without_cookies_cors_or_corp_even_from_a_frame_in_a_hosted_tier(client, view_url, settings):
    settings.DEPLOYMENT_TIER = "demo"
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]

    response = client.get(view_url, HTTP_ORIGIN="https://app.example", HTTP_SEC_FETCH_DEST="iframe")

    assert response.status_code == 200
    assert not response.has_header("Access-Control-Allow-Origin")
    assert not response.has_header("Cross-Origin-Resource-Policy")
    assert not response.cookies


@pytest.mark.parametrize("tail", [
    "assets/missing.js",          # not published
    ".hidden",                    # hidden file
    "assets/link.js",             # a link
    "../PLUGIN.md",               # traversal out of the folder
    "assets/../index.html",       # a dot segment
    "assets//app.js",             # an empty segment
    "",                           # no file
])
def test_anything_not_published_is_the_same_404(client, view_url, tail):
    assert_not_found(client.get(base_of(view_url) + "/" + tail))


def test_unknown_plugins_and_digests_are_the_same_404(client, view_url):
    plugin_path, digest = base_of(view_url).rsplit("/", 1)
    assert_not_found(client.get(f"/plugin-assets/teller/{digest}/index.html"))
    assert_not_found(client.get(f"/plugin-assets/nobody/{digest}/index.html"))
    assert_not_found(client.get(f"{plugin_path}/{'0' * 32}/index.html"))
    assert_not_found(client.get(f"{plugin_path}/not-a-digest/index.html"))
    assert_not_found(client.get("/plugin-assets/"))


def test_encoded_separators_and_dots_are_refused_before_decoding(view_url):
    from covel.asgi import application

    for tail in ("assets%2Fapp.js", "assets%5capp.js", "%2e%2e/PLUGIN.md", "assets/app.js%00"):
        raw = (base_of(view_url) + "/" + tail).encode()
        status, body = async_to_sync(_asgi_get)(application, raw)
        assert (status, body) == (404, b'{"error": "File not found"}'), tail


def test_a_file_changed_or_swapped_for_a_link_after_publishing_is_404(client, view_url, ui_plugins):
    assets = ui_plugins / "ui-panel" / "ui" / "app" / "assets"
    base = base_of(view_url)
    (assets / "app.js").write_text("grown: " + (assets / "app.js").read_text())
    (assets / "style.css").write_text("#map { color: gold; }\n")  # same size, other bytes
    assert_not_found(client.get(base + "/assets/app.js"))
    assert_not_found(client.get(base + "/assets/style.css"))

    os.remove(assets / "app.js")
    os.symlink("/etc/hostname", assets / "app.js")

    assert_not_found(client.get(base + "/assets/app.js"))


def test_a_new_registry_publishes_a_new_digest_and_the_old_url_is_404(client, view_url, ui_plugins):
    from plugins_app.registry import registry_reset

    (ui_plugins / "ui-panel" / "ui" / "app" / "assets" / "app.js").write_text("// v2\n")
    registry_reset()

    body = client.get("/api/ui-specs").json()
    (group,) = [g for g in body["view"] if g["pluginId"] == "ui-panel"]
    new_url = next(s for s in group["specs"] if s["id"] == "map")["webview"]["url"]

    assert new_url != view_url
    assert_not_found(client.get(view_url))
    assert client.get(new_url).status_code == 200


def test_other_methods_are_405(client, view_url):
    response = client.post(view_url)

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json()["code"] == "method_not_allowed"


async def _asgi_get(application, raw_path: bytes) -> tuple[int, bytes]:
    import asyncio
    from urllib.parse import unquote_to_bytes

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": unquote_to_bytes(raw_path).decode("latin-1"), "raw_path": raw_path, "query_string": b"",
             "root_path": "", "headers": [(b"host", b"127.0.0.1:3001")], "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 3001)}
    messages = []
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected (Django drops a disconnected request)

    async def send(message):
        messages.append(message)

    await application(scope, receive, send)
    status = next(m["status"] for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return status, body
