"""Anchor server of tests/bench/idle_streams.py (no tests here): a bare asyncio SSE server.

``asyncio.start_server``; each connection reads the request head, writes a ``text/event-stream``
head and one ``system.connected`` frame, then parks until the client leaves; one shared ticker
writes ``: keep-alive`` to every open stream. Prints ``ready`` once it listens on argv[1].
"""
import asyncio
import sys

_open: set = set()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n\r\n"
                 b"event: system.connected\ndata: {\"type\":\"system.connected\"}\n\n")
    await writer.drain()
    _open.add(writer)
    try:
        await reader.read()  # until EOF: the client left
    finally:
        _open.discard(writer)
        writer.close()


async def _tick() -> None:
    while True:
        await asyncio.sleep(15)
        for writer in list(_open):
            writer.write(b": keep-alive\n\n")


async def main() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    asyncio.get_running_loop().create_task(_tick())
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
