"""Second anchor of tests/bench/idle_streams.py (no tests here): daphne's own floor. A raw ASGI
application without Django or covel: every stream request gets a ``text/event-stream`` head and one frame,
then waits for the client's disconnect — what any ASGI stream costs under daphne/Twisted.
Served as ``tests.bench.idle_streams_floor_asgi:application``.
"""


async def application(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] != "/api/events/stream":  # e.g. the bench's /api/health probe
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]})
    await send({"type": "http.response.body", "body": b"event: system.connected\ndata: {\"type\":\"system.connected\"}\n\n",
                "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass
