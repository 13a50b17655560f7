"""HTTP and SSE over real sockets (httpx) for the end-to-end tests.

- ``Api``: JSON requests to one daphne process, with the session owner token when known.
- ``Api.action``: POST /api/actions, reading the data-only SSE stream (spec 004 §Actions) to its
  end; returns an ``ActionResult`` with every ``SseEnvelope`` frame and the request's latency.
- ``Subscriber``: GET /api/events/stream (named events, spec 004 §事件系统) read on a thread.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import httpx

ACTION_READ_TIMEOUT_SECONDS = 120.0


def sse_frames(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Parse SSE lines into frames ``{"event"?, "id"?, "data": str}``; comments are skipped.

    A frame is emitted at a blank line only (an unterminated frame at the end is dropped, as the
    spec's client does). ``lines`` come without their line endings (httpx.iter_lines).
    """
    frame: dict[str, Any] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data or frame:
                frame["data"] = "\n".join(data)
                yield frame
            frame, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name in {"event", "id", "retry"}:
            frame[name] = value


@dataclass
class ActionResult:
    """One POST /api/actions: HTTP status, the JSON error (non-200) or the stream's envelopes."""

    request: dict[str, Any]
    status_code: int
    frames: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    latency_seconds: float = 0.0
    base_url: str = ""

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [frame for frame in self.frames if frame.get("type") == event_type]

    @property
    def completed(self) -> dict[str, Any] | None:
        """The stream's ``execution.completed`` envelope (the spec says exactly one)."""
        done = self.of_type("execution.completed")
        return done[-1] if done else None

    @property
    def committed(self) -> bool:
        done = self.completed
        return bool(done and done["payload"].get("committed") is True)

    @property
    def turn_ids(self) -> list[str]:
        """The distinct envelope turnIds in stream order (two when an opening continuation ran)."""
        seen: list[str] = []
        for frame in self.frames:
            turn_id = frame.get("turnId")
            if turn_id and turn_id not in seen:
                seen.append(turn_id)
        return seen

    def describe(self) -> str:
        """The request and a summary of the response, for assertion messages."""
        if self.error is not None or self.status_code != 200:
            body = json.dumps(self.error, ensure_ascii=False)
        else:
            body = json.dumps(
                [{"type": f.get("type"), "turnId": f.get("turnId"), "payload": _short(f.get("payload"))}
                 for f in self.frames if f.get("type") not in {"narrative.delta"}],
                ensure_ascii=False,
            )
        if len(body) > 8000:  # keep the head and the end (where failures and execution.completed are)
            body = body[:3000] + " … " + body[-5000:]
        return (f"POST {self.base_url}/api/actions {json.dumps(self.request, ensure_ascii=False)}\n"
                f"-> {self.status_code} {body}")


def _short(value: Any, limit: int = 400) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    return value if len(text) <= limit else text[:limit] + "…"


class Api:
    """Requests to one web process. ``token``: the session owner token (sent as X-Session-Token)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(30.0))

    def close(self) -> None:
        self.http.close()

    def with_token(self, token: str | None) -> "Api":
        return Api(self.base_url, token)

    def _headers(self) -> dict[str, str]:
        return {"X-Session-Token": self.token} if self.token else {}

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params or None, headers=self._headers())

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(path, json=body, headers=self._headers())

    def patch(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.patch(path, json=body, headers=self._headers())

    def json(self, method: str, path: str, body: dict[str, Any] | None = None, *, expect: int = 200) -> Any:
        """Send a JSON request and return the decoded body; AssertionError with the exchange otherwise."""
        response = self.http.request(method, path, json=body, headers=self._headers())
        assert response.status_code == expect, (
            f"{method} {self.base_url}{path} {json.dumps(body, ensure_ascii=False) if body is not None else ''}\n"
            f"-> {response.status_code} {response.text[:4000]}"
        )
        return response.json()

    def action(
        self,
        action_type: str,
        session_id: str,
        payload: dict[str, Any],
        *,
        request_id: str | None = None,
        model: str | None = None,
        read_timeout_seconds: float = ACTION_READ_TIMEOUT_SECONDS,
        on_frame: Callable[[dict[str, Any]], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> ActionResult:
        """POST /api/actions and read the stream to its end (or until ``on_frame`` raises StopStream).

        Latency is measured from sending the request to receiving ``execution.completed``.
        headers: extra request headers (``X-Provider-Keys``...).
        """
        body: dict[str, Any] = {
            "requestId": request_id or f"e2e-{uuid.uuid4().hex[:16]}",
            "type": action_type,
            "sessionId": session_id,
            "payload": payload,
        }
        if model is not None:
            body["model"] = model
        timeout = httpx.Timeout(connect=10.0, read=read_timeout_seconds, write=10.0, pool=10.0)
        started = time.monotonic()
        with self.http.stream("POST", "/api/actions", json=body, headers={**self._headers(), **(headers or {})},
                              timeout=timeout) as response:
            result = ActionResult(request=body, status_code=response.status_code, base_url=self.base_url)
            content_type = response.headers.get("content-type", "")
            if response.status_code != 200 or not content_type.startswith("text/event-stream"):
                response.read()
                try:
                    result.error = response.json()
                except ValueError:
                    result.error = {"raw": response.text[:2000], "contentType": content_type}
                result.latency_seconds = time.monotonic() - started
                return result
            try:
                for frame in sse_frames(response.iter_lines()):
                    envelope = json.loads(frame["data"])
                    result.frames.append(envelope)
                    if envelope.get("type") == "execution.completed":
                        result.latency_seconds = time.monotonic() - started
                    if on_frame is not None:
                        on_frame(envelope)
            except StopStream:
                pass
        if not result.latency_seconds:
            result.latency_seconds = time.monotonic() - started
        return result


class StopStream(Exception):
    """Raised by an ``on_frame`` callback to leave an action stream early (closing the connection)."""


class Subscriber:
    """GET /api/events/stream?sessionId=… read on a daemon thread; events collect in ``events``.

    Each event: ``{"event": type, "id": cursor, "data": SubscriptionEvent dict}``.
    """

    def __init__(self, base_url: str, session_id: str, token: str | None = None, *, cursor: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self.token = token
        self.cursor = cursor
        self.events: list[dict[str, Any]] = []
        self.status_code: int | None = None
        self.error: str | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(connect=10.0, read=None, write=10.0, pool=10.0))
        self._thread = threading.Thread(target=self._run, name=f"subscriber-{session_id}", daemon=True)

    def start(self, *, connected_timeout_seconds: float = 15.0) -> "Subscriber":
        """Open the stream and wait for ``system.connected``."""
        self._thread.start()
        self.wait_for(lambda e: e["event"] == "system.connected", timeout_seconds=connected_timeout_seconds)
        return self

    def _run(self) -> None:
        params = {"sessionId": self.session_id}
        if self.cursor:
            params["lastEventId"] = self.cursor
        headers = {"X-Session-Token": self.token} if self.token else {}
        try:
            with self._client.stream("GET", f"{self.base_url}/api/events/stream", params=params, headers=headers) as response:
                self.status_code = response.status_code
                if response.status_code != 200:
                    response.read()
                    self.error = f"{response.status_code} {response.text[:2000]}"
                    return
                for frame in sse_frames(response.iter_lines()):
                    if self._stop.is_set():
                        return
                    data = json.loads(frame["data"]) if frame.get("data") else {}
                    with self._cond:
                        self.events.append({"event": frame.get("event"), "id": frame.get("id"), "data": data})
                        self._cond.notify_all()
        except Exception as exc:  # connection closed by close() or by the server
            if not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], *, timeout_seconds: float = 30.0) -> dict[str, Any]:
        """The first collected event matching ``predicate``; AssertionError after the timeout."""
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self._thread.is_alive() and self._thread.ident is not None):
                    raise AssertionError(
                        f"subscriber on {self.base_url} for {self.session_id}: no matching event after "
                        f"{timeout_seconds} s (status {self.status_code}, error {self.error}); got "
                        + json.dumps([(e['event'], e['id']) for e in self.events], ensure_ascii=False)[:4000]
                    )
                self._cond.wait(min(remaining, 0.5))

    def close(self) -> None:
        self._stop.set()
        self._client.close()
        self._thread.join(timeout=5)
