"""Loopback listeners for the outbound tests (helpers only, no tests here).

``Listener``: a real HTTP server on 127.0.0.1:<free port> that counts TCP connections and records
every request (method, path, headers), answering an OpenAI-compatible model list at
``GET /v1/models`` and a streamed chat completion at ``POST /v1/chat/completions`` unless a route
says otherwise. ``RawListener``: accepts TCP connections and answers bytes that are not HTTP.
``closed_port()``: a port nothing listens on.
"""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

CANARY = "canary-server-key-5f1d2c9a7b"
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


def closed_port() -> int:
    """A loopback port that was free a moment ago (bound, then released)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def sse_chat_reply(text: str = "pong") -> bytes:
    frames = [{"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
              {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
    return "".join(f"data: {json.dumps(f)}\n\n" for f in frames).encode() + b"data: [DONE]\n\n"


def sse_tool_call_reply(name: str, arguments: dict[str, Any]) -> bytes:
    """A streamed assistant turn that calls one tool (what a tool-capable server answers a ping)."""
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    frames = [{"model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
              {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    return "".join(f"data: {json.dumps(f)}\n\n" for f in frames).encode() + b"data: [DONE]\n\n"


def chat_route(handler) -> tuple[int, dict[str, str], bytes]:
    """Prose, or — when the request offers the connection-test tool — that tool's call."""
    try:
        body = json.loads(handler.body or b"{}")
    except ValueError:
        body = {}
    names = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    if "covel_ping" in names:
        return 200, {"Content-Type": "text/event-stream"}, sse_tool_call_reply("covel_ping", {"word": "pong"})
    return 200, {"Content-Type": "text/event-stream"}, sse_chat_reply()


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: "Listener", *args: Any) -> None:
        self.owner = owner
        super().__init__(*args)

    def verify_request(self, request, client_address) -> bool:
        with self.owner.lock:
            self.owner.connections += 1
        return True


class Listener:
    """routes: {(method, path): (status, headers, body) | callable(handler) -> (status, headers, body)}.
    requests: [(method, path, headers)], headers as a dict with the names as sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.routes: dict[tuple[str, str], Any] = {
            ("GET", MODELS_PATH): (200, {"Content-Type": "application/json"},
                                   json.dumps({"object": "list", "data": [{"id": "model-a"}, {"id": "model-b"}]}).encode()),
            ("POST", CHAT_PATH): chat_route,
        }
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                with owner.lock:
                    owner.requests.append((self.command, self.path, dict(self.headers)))
                route = owner.routes.get((self.command, self.path)) or owner.routes.get(("*", "*"))
                if callable(route):
                    route = route(self)
                status, headers, body = route or (404, {"Content-Type": "text/html"}, b"<h1>not here</h1>")
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = _CountingServer(self, ("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def authorizations(self) -> list[str | None]:
        return [headers.get("Authorization") for _, _, headers in self.requests]

    def __enter__(self) -> "Listener":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawListener:
    """Accepts connections on 127.0.0.1:<free port> and answers ``reply`` bytes (not HTTP), then
    closes; ``connections`` counts them."""

    def __init__(self, reply: bytes = b"SSH-2.0-OpenSSH_9.0 internal-secret-banner\r\n") -> None:
        self.reply = reply
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            try:
                conn.sendall(self.reply)
            except OSError:
                pass
            finally:
                conn.close()

    def __enter__(self) -> "RawListener":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def redirect_to(location: str) -> Callable[[Any], tuple[int, dict[str, str], bytes]]:
    """A route answering ``302 Location: location``."""
    return lambda handler: (302, {"Location": location}, b"")
