"""Anchor server of tests/bench/event_fanout.py's latency figure (no tests here): a bare asyncio +
Redis pub/sub SSE server (issue 18: "bare asyncio + Redis pub/sub server, same client").

``asyncio.start_server``; each connection reads the request head, takes ``sessionId`` from its query
string, makes sure the shared redis-py asyncio ``PubSub`` has ``SUBSCRIBE``d ``<prefix><sessionId>``
(first client of that session), writes a ``text/event-stream`` head and one ``system.connected``
frame, then parks until the client leaves. One reader task takes every published message (JSON
``{"seq", "type", "topic", "payload"}``, published by the benchmark at "commit"), renders the SSE
frame once (``event:``, ``id: bench:<seq>``, ``data:`` envelope) and writes it to every open stream of
that session. No database, no durable log, no resume: the floor our delivery path is compared with.

Run: python tests/bench/event_fanout_bare.py PORT REDIS_URL CHANNEL_PREFIX   (prints ``ready``)
"""
import asyncio
import json
import sys
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis

_streams: dict[str, set] = {}


async def main() -> None:
    port, url, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = aioredis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    subscribed: set[str] = set()
    reader_task: asyncio.Task | None = None

    async def read_messages() -> None:
        async for message in pubsub.listen():
            if message["type"] != "message":
                continue
            channel = message["channel"].decode()
            event = json.loads(message["data"])
            event_id = f"bench:{event['seq']}"
            data = {"id": event_id, "topic": event["topic"], "type": event["type"],
                    "sessionId": channel[len(prefix):], "payload": event["payload"]}
            frame = (f"event: {event['type']}\nid: {event_id}\ndata: "
                     + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode()
            for writer in list(_streams.get(channel, ())):
                writer.write(frame)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal reader_task
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b" ", 2)[1].decode()
        session_id = parse_qs(urlsplit(target).query).get("sessionId", [""])[0]
        channel = prefix + session_id
        if channel not in subscribed:
            subscribed.add(channel)
            await pubsub.subscribe(channel)
            if reader_task is None:
                reader_task = asyncio.get_running_loop().create_task(read_messages())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n\r\n"
                     b"event: system.connected\ndata: {\"type\":\"system.connected\"}\n\n")
        await writer.drain()
        _streams.setdefault(channel, set()).add(writer)
        try:
            await reader.read()  # until EOF: the client left
        finally:
            _streams[channel].discard(writer)
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
