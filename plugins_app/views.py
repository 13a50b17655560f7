"""GET|HEAD /plugin-assets/:pluginId/:digest/* (spec 004 §GET /plugin-assets/:pluginId/:digest/*).

Public in every host configuration: no session, token or cookie is read, and the /api foreign
request check does not apply. Only files of a current, non-error plugin's published view folder
(plugins_app/ui_specs.py) are served, checked in this order: plugin id and digest, the raw and the
decoded path segments, the published index, then the real path and size at read time. Every
refusal is the same ``404 {"error": "File not found"}`` with ``Cache-Control: no-store`` and
``nosniff``, so a probe learns nothing about which files exist.

A success carries the published MIME, nosniff, an ETag, Content-Length, ``Referrer-Policy:
no-referrer`` and ``X-Frame-Options: SAMEORIGIN``. The entry HTML of a view gets the host bridge
(plugins_app/ui_bridge.js) injected, the page CSP and ``Cache-Control: no-cache``; its ETag
includes the bridge's digest, so a host upgrade refreshes the page on the same URL. Every other
file is ``public, max-age=31536000, immutable`` with ``Content-Security-Policy: sandbox``. An exact
If-None-Match is a 304 with no body and the same caching headers. No CORS allow headers, no
Set-Cookie, no Cross-Origin-Resource-Policy.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import re
from pathlib import Path
from urllib.parse import unquote

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from plugins_app.registry import plugin_registry
from plugins_app.ui_specs import DIGEST_RE, PLUGIN_ID_RE, asset_index_get, published_file_read

NOT_FOUND_BODY = {"error": "File not found"}
CACHE_IMMUTABLE = "public, max-age=31536000, immutable"
CACHE_ENTRY = "no-cache"
BRIDGE_PATH = Path(__file__).resolve().parent / "ui_bridge.js"
# Raw-path spellings refused before decoding: encoded separators, dots, NUL and backslashes.
_ENCODED_REFUSED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)
_HEAD_OPEN = re.compile(rb"<head(\s[^>]*)?>", re.IGNORECASE)
_HTML_OPEN = re.compile(rb"<html(\s[^>]*)?>", re.IGNORECASE)


def _not_found() -> JsonResponse:
    response = JsonResponse(NOT_FOUND_BODY, status=404)
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@functools.lru_cache(maxsize=1)
def bridge_script() -> tuple[bytes, str, str]:
    """(the bridge script, its SHA-256 hex, its CSP hash source ``'sha256-…'``)."""
    script = BRIDGE_PATH.read_bytes()
    digest = hashlib.sha256(script)
    return script, digest.hexdigest(), "'sha256-" + base64.b64encode(digest.digest()).decode("ascii") + "'"


def entry_csp() -> str:
    """The page CSP of a view entry: its own files and the bridge, no network, framed by the app only."""
    _, _, bridge_hash = bridge_script()
    return ("default-src 'none'; script-src 'self' " + bridge_hash + "; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; font-src 'self' data:; media-src 'self' data: blob:; connect-src 'none'; "
            "form-action 'none'; base-uri 'none'; frame-ancestors 'self'")


def _bridged(html: bytes) -> bytes:
    script, _, _ = bridge_script()
    tag = b"<script>" + script + b"</script>"
    for pattern in (_HEAD_OPEN, _HTML_OPEN):
        match = pattern.search(html)
        if match:
            return html[: match.end()] + tag + html[match.end():]
    return tag + html


def _raw_path(request: HttpRequest) -> str:
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and isinstance(scope.get("raw_path"), (bytes, bytearray)):
        return bytes(scope["raw_path"]).decode("latin-1")
    return request.META.get("RAW_URI") or request.META.get("REQUEST_URI") or ""


@csrf_exempt  # GET and HEAD only; any other method is a JSON 405 rather than Django's CSRF page
def plugin_asset(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Serve one published plugin view file (see the module docstring). ``rest`` is everything
    after /plugin-assets/."""
    if request.method not in ("GET", "HEAD"):
        response = JsonResponse({"error": f"Method not allowed: {request.method}", "code": "method_not_allowed"}, status=405)
        response["Allow"] = "GET, HEAD"
        response["Cache-Control"] = "no-store"
        return response
    raw = _raw_path(request).split("?", 1)[0]
    if _ENCODED_REFUSED.search(raw) or "\\" in raw or "\\" in unquote(raw):
        return _not_found()
    plugin_id, _, tail = rest.partition("/")
    digest, _, name = tail.partition("/")
    if not PLUGIN_ID_RE.match(plugin_id) or not DIGEST_RE.match(digest) or not name:
        return _not_found()
    index = asset_index_get(plugin_registry(), plugin_id, digest)
    if index is None:
        return _not_found()
    found = published_file_read(index, name)
    if found is None:
        return _not_found()
    published, data = found
    is_entry = name in index.entries
    if is_entry:
        _, bridge_digest, _ = bridge_script()
        etag = '"' + hashlib.sha256(f"{published.sha256}:{bridge_digest}".encode()).hexdigest()[:32] + '"'
        headers = {"Cache-Control": CACHE_ENTRY, "Content-Security-Policy": entry_csp()}
    else:
        etag = '"' + published.sha256[:32] + '"'
        headers = {"Cache-Control": CACHE_IMMUTABLE, "Content-Security-Policy": "sandbox"}
    headers.update({"ETag": etag, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                    "X-Frame-Options": "SAMEORIGIN"})
    if request.headers.get("If-None-Match", "").strip() == etag:
        return HttpResponse(status=304, headers=headers)
    body = _bridged(data) if is_entry else data
    headers["Content-Length"] = str(len(body))
    response = HttpResponse(b"" if request.method == "HEAD" else body, content_type=published.mime, headers=headers)
    if request.method == "HEAD":
        response["Content-Length"] = str(len(body))
    return response
