"""A real local HTTP server speaking the OpenAI-compatible API (outside our process boundary as far
as the code under test knows): ``POST /v1/chat/completions`` streams the next queued reply,
``GET /v1/models`` lists model ids. Helpers only, no tests here."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    """replies: queue of {"text": str} | {"status": int, "message"?: str} | {"stall_seconds": float};
    the last one repeats. requests: (method, path, headers, body) of every request received.

    Tools, as real hosts do it: a request offering ``tools`` answered by a {"text"} reply calls the
    first tool instead (arguments ``{"word": <text>}``), streamed as split deltas that carry no
    ``index`` after the first (llama.cpp / some gateways). ``ignores_tools = True`` models a server
    that drops the tools and answers in prose."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = [{"text": "pong"}]
        self.models: list[str] = ["model-a", "model-b"]
        self.models_status = 200
        self.ignores_tools = False
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                owner.requests.append(("GET", self.path, dict(self.headers), None))
                body = json.dumps({"data": [{"id": m} for m in owner.models]}).encode()
                self.send_response(owner.models_status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                owner.requests.append(("POST", self.path, dict(self.headers), body))
                reply = owner.replies.pop(0) if len(owner.replies) > 1 else owner.replies[0]
                if "status" in reply:
                    self.send_response(reply["status"])
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    message = reply.get("message", "denied")
                    self.wfile.write(json.dumps({"error": {"message": message}}).encode())
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                if "stall_seconds" in reply:
                    self.wfile.flush()
                    time.sleep(reply["stall_seconds"])
                    return
                text = reply["text"]
                tools = body.get("tools") or []
                if tools and not owner.ignores_tools:
                    name = tools[0]["function"]["name"]
                    arguments = json.dumps({"word": text})
                    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}
                    frames = [{"tool_calls": [first]}]
                    frames += [{"tool_calls": [{"function": {"arguments": arguments[i:i + 5]}}]}
                               for i in range(0, len(arguments), 5)]
                    for delta in frames:
                        frame = {"model": body.get("model"), "choices": [{"index": 0, "delta": delta}]}
                        self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
                    final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
                    self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
                    return
                for start in range(0, len(text), 40):
                    frame = {"model": body.get("model"), "choices": [{"index": 0, "delta": {"content": text[start:start + 40]}}]}
                    self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
                final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
