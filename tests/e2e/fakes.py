"""What the e2e cluster talks to outside itself: a model endpoint that never answers.

The cluster's ``COVEL_HOME/llm.toml`` keeps every ordinary slot on the offline ``scripted``
provider and adds one slot, ``stall``, on the ``openai`` provider pointing at ``StallingModelServer``.
A turn requested with ``"model": "stall"`` therefore reaches its first model call and waits there:
the test knows the worker is mid-turn (session lock held, nothing committed) when the server
reports the request, with no sleep-based timing.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STALL_SLOT = "stall"
#: How long a stalled request is held open at most (the test kills the worker long before).
HOLD_SECONDS = 300.0


class StallingModelServer:
    """OpenAI-compatible ``POST /v1/chat/completions`` that records the request and never answers.

    ``wait_for_request(timeout)`` returns the first request body (dict) or raises AssertionError.
    ``close()`` releases held requests and stops the server.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._arrived = threading.Event()
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {"unparsable": True}
                server.requests.append({"path": self.path, "body": body})
                server._arrived.set()
                server._release.wait(HOLD_SECONDS)
                try:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "stalled on purpose"}}')
                except OSError:
                    pass  # the caller (a killed worker) is gone

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="stalling-model", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def wait_for_request(self, timeout_seconds: float) -> dict[str, Any]:
        if not self._arrived.wait(timeout_seconds):
            raise AssertionError(f"no model request reached the stalling server within {timeout_seconds} s")
        return self.requests[0]

    def close(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def llm_toml_text(stall_base_url: str) -> str:
    """llm.toml: scripted story/plugin/memory slots plus the ``stall`` slot on ``stall_base_url``."""
    return (
        "# Written by tests/e2e: every slot offline except `stall` (a model that never answers).\n"
        '[covel.story]\nprovider = "scripted"\n\n'
        '[covel.plugin]\nprovider = "scripted"\n\n'
        '[covel.memory]\nprovider = "scripted"\n\n'
        f'[covel.{STALL_SLOT}]\nprovider = "openai"\nmodel = "stall-model"\nbaseUrl = "{stall_base_url}"\n'
        'protocol = "openai-chat-v1"\nidleTimeoutMs = 600000\n'
    )
