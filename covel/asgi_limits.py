"""ASGI wrapper that enforces body limits while the body streams in (chunked or not).

Django's ASGI handler spools the whole body before middleware runs, so an endless chunked upload
must be stopped here: we count ``http.request`` bytes and answer 413 as soon as the limit is passed.
"""
from __future__ import annotations

import json

from covel.limits import PAYLOAD_TOO_LARGE, body_limit_bytes


class BodyLimitASGI:
    """Wrap an ASGI app; 413 ``{"error": "Payload Too Large"}`` for oversized request bodies."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = body_limit_bytes(scope.get("path", ""), scope.get("method", "GET"))
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            return await _reject(send)

        # Read the body here (bounded), then replay it to the app.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                return await _reject(send)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay_receive():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay_receive, send)


async def _reject(send) -> None:
    body = json.dumps(PAYLOAD_TOO_LARGE).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
