"""Served by tests/bench/idle_streams.py (no tests here): covel's ASGI application plus a
bench-only route ``GET /__bench/tracemalloc?path=<file>`` that writes a tracemalloc snapshot of
this process (tracing starts at import, after covel.asgi loaded), so the bench can diff the
Python allocations of N idle streams. Never part of the served application.
"""
from __future__ import annotations

import gc
import tracemalloc
from urllib.parse import parse_qs

from covel.asgi import application as _covel

tracemalloc.start(12)


async def application(scope, receive, send):
    if scope.get("type") == "http" and scope.get("path") == "/__bench/tracemalloc":
        path = parse_qs(scope.get("query_string", b"").decode()).get("path", [""])[0]
        gc.collect()
        tracemalloc.take_snapshot().dump(path)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    return await _covel(scope, receive, send)
