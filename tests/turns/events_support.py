"""Helpers for the event stream tests: sessions, appends from other threads, SSE parsing, an
in-process ASGI client and real daphne processes."""
from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connections, transaction

REPO = Path(__file__).resolve().parents[2]
HOST = b"127.0.0.1:3001"


def make_session(session_id: str | None = None, *, status: str = "active", epoch: str = "ep1", owner_token: str | None = None):
    """Create a Session row directly (the sessions app's create service is another issue)."""
    from sessions.auth import token_hash
    from sessions.models import Session

    return Session.objects.create(
        id=session_id or f"s-{uuid.uuid4().hex[:10]}", world_id="w", status=status, incarnation="inc-1",
        event_epoch=epoch, owner_token_hash=token_hash(owner_token) if owner_token else "",
    )


def append_events(session_id: str, types: list[str], *, topic: str = "game", per_transaction: int = 1) -> list[int]:
    """Append events named ``types`` (payload ``{"n": i}``), ``per_transaction`` per commit; returns seqs."""
    from turns.events import NewEvent, session_events_append

    seqs: list[int] = []
    for i in range(0, len(types), per_transaction):
        with transaction.atomic():
            rows = session_events_append(
                session_id, [NewEvent(type=t, topic=topic, payload={"n": i + j}) for j, t in enumerate(types[i:i + per_transaction])]
            )
        seqs.extend(r.seq for r in rows)
    return seqs


def in_thread(fn, *args, **kwargs):
    """Run ``fn`` on a fresh thread (its own DB connection, closed afterwards); returns its result."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out.get("value")


async def db(fn, *args, **kwargs):
    """Await ``fn`` run on its own thread (ORM calls from async tests)."""
    return await asyncio.to_thread(in_thread, fn, *args, **kwargs)


@dataclass
class Frame:
    event: str | None = None
    id: str | None = None
    data: dict | None = None
    comment: str | None = None


class FrameParser:
    """Incremental SSE parser (LF line endings, as we send them)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Frame]:
        self._buffer += chunk
        frames = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            frame = Frame()
            for line in block.decode("utf-8").split("\n"):
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "":
                    frame.comment = value
                elif name == "event":
                    frame.event = value
                elif name == "id":
                    frame.id = value
                elif name == "data":
                    frame.data = json.loads(value)
            frames.append(frame)
        return frames


class AsgiSse:
    """Open GET /api/events/stream (or another SSE ``path``) on the real ASGI application in this process."""

    def __init__(self, query: str, headers: list[tuple[bytes, bytes]] | None = None, client_ip: str = "127.0.0.1",
                 path: str = "/api/events/stream") -> None:
        self.path = path
        self.query = query
        self.headers = headers or []
        self.client_ip = client_ip
        self.status: int | None = None
        self.headers_out: dict[bytes, bytes] = {}
        self.body = b""
        self._frames: asyncio.Queue = asyncio.Queue()
        self._disconnect = asyncio.Event()
        self._parser = FrameParser()
        self._started = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> "AsgiSse":
        from covel.asgi import application

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": self.path, "raw_path": self.path.encode(), "query_string": self.query.encode(),
            "root_path": "", "headers": [(b"host", HOST), *self.headers],
            "client": (self.client_ip, 5000), "server": ("127.0.0.1", 3001),
        }
        sent_body = False

        async def receive():
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self._disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                self.status = message["status"]
                self.headers_out = {k.lower(): v for k, v in message.get("headers", [])}
                self._started.set()
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                self.body += chunk
                for frame in self._parser.feed(chunk):
                    await self._frames.put(frame)

        self._task = asyncio.create_task(application(scope, receive, send))
        await asyncio.wait_for(self._started.wait(), 10)
        return self

    async def frame(self, timeout: float = 10.0, *, comments: bool = False) -> Frame:
        """The next frame (comments skipped unless asked for)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = await asyncio.wait_for(self._frames.get(), max(0.01, deadline - time.monotonic()))
            if frame.comment is None or comments:
                return frame

    async def frames(self, count: int, timeout: float = 10.0) -> list[Frame]:
        return [await self.frame(timeout) for _ in range(count)]

    async def nothing_within(self, seconds: float) -> bool:
        try:
            await self.frame(seconds)
        except (asyncio.TimeoutError, TimeoutError):
            return True
        return False

    async def __aexit__(self, *exc) -> None:
        self._disconnect.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 10)


# ---------------------------------------------------------------------------------------------
# Real server processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that must use this test run's database and Redis."""
    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "SQLITE_PATH")}
    env.update({"COVEL_JSON_LOGS": "0", "DEPLOYMENT_TIER": "self", "PYTHONPATH": str(REPO)})
    if settings.STORE_BACKEND == "pg":
        auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
        env.update({
            "DJANGO_SETTINGS_MODULE": "covel.settings.hosted",
            "DATABASE_URL": f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
            "REDIS_URL": settings.REDIS_URL,
        })
    else:
        env.update({"DJANGO_SETTINGS_MODULE": "covel.settings.embedded", "SQLITE_PATH": str(db["NAME"])})
    env.update(extra)
    return env


class Daphne:
    """A real daphne process serving covel.asgi:application on a free port."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log = open(Path(settings.COVEL_HOME) / f"daphne-{self.port}.log", "w+")
        self.proc = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "daphne"), "-b", "127.0.0.1", "-p", str(self.port), "covel.asgi:application"],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code in (200, 503):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                output = self.output()
                self.stop()  # never leave a half-started server behind
                raise RuntimeError(f"daphne did not come up: {output}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


class HttpSse:
    """A real HTTP SSE client on a background thread; frames arrive on ``self.frames`` (queue)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.frames: queue.Queue = queue.Queue()
        self.status: int | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, headers or {}), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"no response from {url}")

    def _run(self, url: str, headers: dict[str, str]) -> None:
        parser = FrameParser()
        try:
            with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(5.0, read=None)) as response:
                self.status = response.status_code
                self._ready.set()
                for chunk in response.iter_raw():
                    for frame in parser.feed(chunk):
                        self.frames.put(frame)
                    if self._stop.is_set():
                        return
        except Exception as exc:  # surfaced to the test through the queue
            self.frames.put(exc)
        finally:
            self._ready.set()

    def take(self, count: int, timeout: float = 15.0, *, skip_comments: bool = True) -> list[Frame]:
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            item = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(item, Exception):
                raise item
            if skip_comments and item.comment is not None:
                continue
            out.append(item)
        return out

    def close(self) -> None:
        self._stop.set()


def run_python(code: str, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` with ``args`` in a fresh interpreter (another process) with ``env``."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
