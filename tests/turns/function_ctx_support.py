"""Test plugins and loopback fakes for the function-runtime host API (issue 25; turns.engine.function_ctx).

- ``hostkit`` (builtin): dataset ``scores`` (record ``{n: integer ≤ 100}``, ops set + increment);
  ``hostkit/turnly`` (post-turn, auto): one ``ctx.gateway`` call, a ``ctx.progress`` report, a
  ``ctx.recursive_call("hostkit/child")`` and its own write ``turnly/<turn>``; it raises after
  the recursive call when ``COVEL_HOME/hostkit-fail`` exists. ``hostkit/waiter`` (post-turn, only while ``COVEL_HOME/hostkit-wait`` exists): reports
  progress, makes a recursive call and suspends; resumed, it reports again and returns ``{way}``.
  ``hostkit/child`` (manual) writes
  ``child/<turn>`` and returns ``{wrote}``. ``hostkit/data`` (manual): pluginData set / update /
  an out-of-schema set it catches / delete.
- ``hostkit-web`` (community, in ``COVEL_HOME/plugins``): ``hostkit-web/probe`` (manual) runs the
  ``steps`` of its payload — ``fetch`` / ``put`` / ``ingest`` — each catching its own error, and
  returns ``{results: [...]}`` (plus ``effects.assetGenerations`` naming the first stored ref when
  the payload says ``effects: true``). Its ``permissions.http`` names the ``allowed`` origin (GET) and the link-local
  metadata address (which the SSRF guard refuses anyway).
- ``FakeSite``: a loopback HTTP server: ``/ok`` (text), ``/png`` (a PNG), ``/flaky`` (503 once,
  then 200), ``/hop?to=<url>`` (302 to ``to``).
"""
from __future__ import annotations

import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A small valid PNG (RGB, every pixel red)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class FakeSite:
    """A loopback HTTP server (see the module docstring); ``hits`` lists the paths it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._flaky_left = 1
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                site.hits.append(parts.path)
                if parts.path == "/ok":
                    self._send(200, b"hello from the fake", "text/plain")
                elif parts.path == "/png":
                    self._send(200, png_bytes(), "image/png")
                elif parts.path == "/flaky":
                    if site._flaky_left > 0:
                        site._flaky_left -= 1
                        self._send(503, b"busy", "text/plain")
                    else:
                        self._send(200, b"recovered", "text/plain")
                elif parts.path == "/hop":
                    target = parse_qs(parts.query).get("to", [""])[0]
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._send(404, b"no", "text/plain")

            def _send(self, status: int, body: bytes, mime: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", mime)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeSite":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


HOSTKIT_MD = """\
---
id: hostkit
kind: plugin
version: 1.0.0
description: Uses the function-runtime host API (test plugin).
contributes:
  datasets:
    scores:
      schema:
        type: object
        required: [n]
        properties:
          n: {type: integer, maximum: 100}
      ops: [set, increment]
---
Hostkit.
"""

TURNLY_MD = """\
---
type: function
schedule:
  stage: post-turn
  trigger:
    type: auto
function:
  handler: ../../handler.py:turnly
---
Turnly.
"""

CHILD_MD = """\
---
type: function
schedule:
  trigger:
    type: manual
function:
  handler: ../../handler.py:child
---
Child.
"""

WAITER_MD = """\
---
type: function
schedule:
  stage: post-turn
  trigger:
    type: auto
function:
  handler: ../../handler.py:waiter
---
Waiter.
"""

DATA_MD = """\
---
type: function
schedule:
  trigger:
    type: manual
function:
  handler: ../../handler.py:data
---
Data.
"""

HOSTKIT_PY = '''
import os
from pathlib import Path


def turnly(ctx):
    said = ctx.gateway.generate(prompt="Name the weather in one word.", system="You are terse.")
    ctx.progress.report(50, "halfway")
    child = ctx.recursive_call("hostkit/child", payload={"from": "turnly"})
    if (Path(os.environ["COVEL_HOME"]) / "hostkit-fail").exists():
        raise RuntimeError("turnly fails after its recursive call")
    ctx.plugin_data.set("turnly", str(ctx.logical_turn), {"said": said["text"], "usage": said["usage"]})
    try:
        ctx.recursive_call("other-plugin/runtime")
    except Exception as exc:
        refused = exc.code
    return {"said": said["text"], "child": child, "refused": refused}


def waiter(ctx):
    if not (Path(os.environ["COVEL_HOME"]) / "hostkit-wait").exists():
        return None
    if ctx.resume_data is None:
        ctx.progress.report(30, "asking")
        ctx.recursive_call("hostkit/child", payload={"from": "waiter"})
        return {"outcome": "suspended", "reason": "Which way?", "resumeSchema": {"type": "object"}}
    ctx.progress.report(80, "answered")
    return {"way": ctx.resume_data.get("way")}


def child(ctx):
    ctx.plugin_data.set("child", str(ctx.logical_turn), {"payload": ctx.manual_payload})
    return {"wrote": str(ctx.logical_turn)}


def data(ctx):
    ctx.plugin_data.set("scores", "alice", {"n": 10})
    after = ctx.plugin_data.update("scores", "alice", [{"op": "increment", "path": "n", "by": 5}])
    codes = []
    try:
        ctx.plugin_data.set("scores", "bob", {"n": 1000})
    except Exception as exc:
        codes.append(exc.code)
    try:
        ctx.plugin_data.update("scores", "alice", [{"op": "increment", "path": "n", "by": 500}])
    except Exception as exc:
        codes.append(exc.code)
    ctx.plugin_data.set("notes", "free", {"anything": [1, 2]})
    ctx.plugin_data.delete("notes", "free")
    return {"after": after, "codes": codes, "readBack": ctx.plugin_data.get("scores", "alice")}
'''

WEB_MD = """\
---
id: hostkit-web
kind: plugin
version: 1.0.0
description: Fetches and stores media (community test plugin).
runtime:
  type: function
  schedule:
    trigger:
      type: manual
  permissions:
    http:
      - origin: {allowed}
        methods: [GET]
      - origin: http://169.254.169.254
  function:
    handler: ./handler.py
---
Web probe.
"""

WEB_PY = '''
import base64


def _run(ctx, step):
    kind = step["kind"]
    if kind == "fetch":
        response = ctx.utils.fetch_with_retry(step["url"], **step.get("options", {}))
        return {"status": response.status, "text": response.text()[:100], "attempts": response.attempts,
                "location": response.location}
    if kind == "put":
        return {"ref": ctx.media.put(base64.b64decode(step["b64"]))}
    if kind == "ingest":
        return {"ref": ctx.media.ingestUrl(step["url"], **step.get("options", {}))}
    raise ValueError(kind)


def handle(ctx):
    results = []
    for step in ctx.manual_payload["steps"]:
        try:
            results.append(_run(ctx, step))
        except Exception as exc:
            results.append({"error": getattr(exc, "code", type(exc).__name__), "message": str(exc)})
    out = {"results": results}
    refs = [r["ref"] for r in results if "ref" in r]
    if refs and ctx.manual_payload.get("effects"):
        out["effects"] = {"assetGenerations": [{"ref": refs[0], "modality": "image", "meta": {"prompt": "a red square"}}]}
    return out
'''


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def hostkit_write(builtin: Path) -> None:
    """Write the builtin ``hostkit`` plugin into ``builtin``."""
    _write(builtin / "hostkit", {"PLUGIN.md": HOSTKIT_MD, "handler.py": HOSTKIT_PY,
                                 "runtimes/turnly/RUNTIME.md": TURNLY_MD, "runtimes/child/RUNTIME.md": CHILD_MD,
                                 "runtimes/data/RUNTIME.md": DATA_MD,
                                 "runtimes/waiter/RUNTIME.md": WAITER_MD})


def hostkit_web_install(home: Path, allowed_origin: str) -> None:
    """Install the community ``hostkit-web`` plugin into ``home/plugins`` allowing ``allowed_origin``."""
    _write(home / "plugins" / "hostkit-web", {"PLUGIN.md": WEB_MD.replace("{allowed}", allowed_origin), "handler.py": WEB_PY})
