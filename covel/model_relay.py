"""Local model relay (spec 004 §本地模型中继, header ``X-Model-Relay``): a shared-tier server reaches a
model on the player's computer or LAN through the player's browser.

How a relayed call travels
- The browser makes up a channel id per page (``X-Model-Relay``: 32–128 of ``A-Z a-z 0-9 _ -``)
  and keeps ``GET /api/model-relay/stream`` open with it (``RelayConnection``; endpoints in
  ``covel.model_relay_api``). It sends the same header with its model requests (POST /api/actions,
  POST /api/ai/ping).
- A model call of such a request whose target is request-supplied (X-Slot-Config ``customPresets``)
  and lies on loopback or a private network — exactly the targets ``covel.outbound`` refuses in the
  shared tiers with ``model_relay_unavailable`` — is not fetched by the server: ``RelayTransport``
  (an httpx transport that ``covel.outbound.send(relay=...)`` uses for those targets only) publishes
  it as a ``request`` event ``{type, id, url, method, headers, body?}`` on the channel's stream.
- The browser fetches it and answers in order to any web process: ``head`` (status, headers),
  ``chunk`` (body bytes, ≤ 1 MiB each), ``end`` — or ``fail``. ``RelayTransport`` returns the head
  as an ``httpx.Response`` whose body streams the chunks as they arrive, so the OpenAI wire adapter
  (turns.engine.providers.openai_chat) parses a relayed answer exactly like a direct one.

Across processes. The browser's stream, the answer POSTs and the worker running the turn may each be
in a different process. Hosted (``covel.eventbus`` on Redis): downstream events (request, cancel,
"replaced") travel over the event bus channel ``model-relay:<channel>``; the channel registry, each
request's state and its answers live in Redis (``covel:relay:*``): ``conn:<channel>`` = the current
connection id (expires unless the stream's keep-alive renews it), ``req:<id>`` = channel, connection,
phase, bytes so far, ``open:<channel>`` = its unanswered requests, ``ans:<id>`` = a Redis stream of
answer parts the worker reads with XREAD BLOCK. Every state change is one Lua script, so the order
check (409) holds whichever web process gets each POST. Embedded: the same in this process's memory
(the event bus dispatches in-process). The Lua scripts touch keys derived inside them: Redis
Cluster is not supported (one Redis, as everywhere in Covel).

Rules
- Served only when ``relay_served()``: a shared tier (DEPLOYMENT_TIER demo/commercial) and
  ``COVEL_MODEL_RELAY`` on. Otherwise every relay endpoint answers 404 ``model_relay_unavailable``
  and the header of model requests is ignored (the personal server reaches local models itself).
- A new stream on a channel replaces the old one (closed wherever it is); requests still unanswered
  on the old connection fail. A stream that closes fails its unanswered requests.
- Waits: a relayed call fails when no part of its answer (head, next chunk, end) arrives within
  ``COVEL_MODEL_RELAY_TIMEOUT_SECONDS`` (default 60 s); the browser then gets ``cancel``. A call
  whose channel has no open stream fails at once. A caller that stops reading (the turn was
  stopped) sends ``cancel`` too.
- Keys: a relayed request carries only what the request itself supplied (covel.outbound key rule:
  request-supplied targets never get a server key). Nothing here logs headers or bodies.

Failures reach the model client as ``covel.outbound.RelayError`` (codes ``CODE_RELAY_*``, message
``Local model relay: …``); client-visible endpoint errors are the ``ApiError`` subclasses below.
"""
from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings

from covel import eventbus, outbound
from covel.errors import ApiError

logger = logging.getLogger("covel.model_relay")

HEADER = "X-Model-Relay"
CHANNEL_RE = re.compile(r"^[A-Za-z0-9_-]{32,128}$")
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
#: RFC 9110 token: the characters a header name may hold.
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_HEADERS = 100
MAX_CHUNK_BYTES = 1024 * 1024
MAX_ANSWER_BYTES = 64 * 1024 * 1024
FAIL_MESSAGE_MAX_CHARS = 500
MESSAGE_PREFIX = "Local model relay: "
#: Request headers the browser's fetch() sets itself (or refuses): not forwarded.
_NOT_FORWARDED = frozenset({"host", "content-length", "connection", "accept-encoding", "transfer-encoding", "keep-alive",
                            "te", "upgrade", "user-agent", "proxy-authorization"})
#: Response headers describing the wire, which the browser already decoded: dropped from the head.
_NOT_KEPT = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})

# Answer parts as the worker sees them. "lost": the connection went away (server-made);
# "invalid": a malformed head (server-made); "large": the answer passed MAX_ANSWER_BYTES.
HEAD, CHUNK, END, FAIL, LOST, INVALID, LARGE = "head", "chunk", "end", "fail", "lost", "invalid", "large"
_PHASE_SENT, _PHASE_BODY, _PHASE_CLOSED = "sent", "body", "closed"
#: How long a caller that stopped reading (the OpenAI stream's ``[DONE]`` came) waits for the
#: browser's ``end`` before it cancels the request instead (seconds).
_END_GRACE_SECONDS = 0.5
#: How long a finished request's record stays, so a late POST gets 409 instead of 404 (seconds).
_CLOSED_TTL_SECONDS = 120
#: How long an unfinished request's keys live in Redis without activity (seconds).
_REQUEST_TTL_SECONDS = 3600
_LOST_CLOSED = "the browser's relay connection closed before the answer was complete"
_LOST_REPLACED = "the relay channel was opened again in another connection, which replaced this one"


# --- client-visible errors -------------------------------------------------------------------------


class ModelRelayUnavailable(ApiError):
    """404 model_relay_unavailable: this server does not serve the relay (the personal shape)."""

    status = 404
    code = "model_relay_unavailable"


class ModelRelayChannelRequired(ApiError):
    """400 model_relay_channel_required: X-Model-Relay missing or not 32–128 of A-Z a-z 0-9 _ -."""

    status = 400
    code = "model_relay_channel_required"


class ModelRelayBusy(ApiError):
    """503 model_relay_busy: this web process holds COVEL_MODEL_RELAY_MAX_CHANNELS relay streams."""

    status = 503
    code = "model_relay_busy"


class ModelRelayRequestUnknown(ApiError):
    """404 model_relay_request_unknown: no such request on this channel (or it was cancelled)."""

    status = 404
    code = "model_relay_request_unknown"


class ModelRelayOutOfOrder(ApiError):
    """409 model_relay_out_of_order: head, chunk*, end (or fail) is the only order."""

    status = 409
    code = "model_relay_out_of_order"


class ModelRelayInvalidAnswer(ApiError):
    """400 model_relay_invalid_answer: the head is well-formed but cannot make a response."""

    status = 400
    code = "model_relay_invalid_answer"


class ModelRelayTooLarge(ApiError):
    """413 model_relay_too_large: the answer passed 64 MiB; the request failed and was cancelled."""

    status = 413
    code = "model_relay_too_large"


class ModelRelayUnreachable(ApiError):
    """503 service_unavailable: the relay's store (Redis) could not be reached. Retryable."""

    status = 503
    code = "service_unavailable"


# --- who serves it, and the header ----------------------------------------------------------------


def relay_served() -> bool:
    """True when this server serves the relay: a shared tier (DEPLOYMENT_TIER demo/commercial) with
    ``COVEL_MODEL_RELAY`` on. /api/health reports it as ``deployment.modelRelay``."""
    return settings.DEPLOYMENT_TIER != "self" and bool(getattr(settings, "COVEL_MODEL_RELAY", True))


def served_require() -> None:
    """Raise ModelRelayUnavailable (404) unless ``relay_served()``."""
    if not relay_served():
        raise ModelRelayUnavailable(message="This server does not relay model requests (it reaches local models "
                                            "itself); the local model relay exists only on shared deployments")


def channel_parse(raw: str | None) -> str | None:
    """The channel id in ``raw`` when it is 32–128 of ``A-Z a-z 0-9 _ -``, else None."""
    value = (raw or "").strip()
    return value if CHANNEL_RE.match(value) else None


def channel_require(request) -> str:
    """The request's ``X-Model-Relay`` channel id. Raises ModelRelayChannelRequired (400)."""
    channel = channel_parse(request.headers.get(HEADER))
    if channel is None:
        raise ModelRelayChannelRequired(message=f"{HEADER} must be the page's relay channel id: 32-128 characters "
                                                "of A-Z a-z 0-9 _ -")
    return channel


def channel_for_model_requests(request) -> str | None:
    """The relay channel a model request (POST /api/actions, POST /api/ai/ping) names, or None.

    None when the relay is not served (the header is then ignored, spec 004) or the header is
    absent. Raises ModelRelayChannelRequired (400) for a header that is present but malformed.
    """
    if not relay_served() or not (request.headers.get(HEADER) or "").strip():
        return None
    return channel_require(request)


def transport_for(channel: str | None) -> "RelayTransport | None":
    """The transport that relays model calls to ``channel`` (None without a channel, or when the
    relay is not served). Hand it to the model client (``covel.outbound.send(relay=...)``)."""
    if not channel or not relay_served():
        return None
    return RelayTransport(channel)


# --- answer validation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Head:
    """A validated head: ``status`` 200–599, ``status_text``, ``headers`` as (name, value) pairs."""

    status: int
    status_text: str
    headers: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        """``{status, statusText, headers: [[name, value], ...]}`` (how a head travels to the caller)."""
        return {"status": self.status, "statusText": self.status_text, "headers": [list(h) for h in self.headers]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Head":
        """The inverse of ``to_json``."""
        return cls(int(data["status"]), str(data.get("statusText") or ""),
                   tuple((str(k), str(v)) for k, v in data.get("headers") or ()))


def head_parse(body: Any) -> Head:
    """Validate a head body ``{status: 200–599, statusText?: str, headers: {name: value}}`` (≤ 100
    headers; names HTTP tokens; values and statusText strings without line breaks or other control
    characters; other fields are ignored). Wire headers the browser already undid
    (Content-Encoding, Content-Length, Transfer-Encoding) are dropped. Raises ApiError 400
    ``invalid_request`` for a malformed one and ModelRelayInvalidAnswer (400) when httpx still
    cannot build a response from it (non-ASCII values)."""
    def bad(message: str) -> ApiError:
        return ApiError(400, "invalid_request", f"Invalid relay head: {message}")

    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    status = body.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise bad("status must be an integer from 200 to 599")
    status_text = body.get("statusText", "")
    if status_text is None:
        status_text = ""
    if not isinstance(status_text, str) or _CONTROL_RE.search(status_text) or len(status_text) > 1000:
        raise bad("statusText must be a line of text")
    headers = body.get("headers", {})
    if not isinstance(headers, dict):
        raise bad("headers must be an object of header names to values")
    if len(headers) > MAX_HEADERS:
        raise bad(f"at most {MAX_HEADERS} headers")
    pairs: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not _TOKEN_RE.match(name):
            raise bad(f"header name {name[:60]!r} is not an HTTP token")
        if not isinstance(value, str) or _CONTROL_RE.search(value):
            raise bad(f"header {name} must be a string without line breaks or control characters")
        if name.lower() not in _NOT_KEPT:
            pairs.append((name, value))
    head = Head(status, status_text, tuple(pairs))
    try:
        httpx.Response(status, headers=list(head.headers), extensions={"reason_phrase": status_text.encode("ascii")})
    except (UnicodeError, ValueError, TypeError) as exc:
        raise ModelRelayInvalidAnswer(message=f"The relay head cannot make an HTTP response ({type(exc).__name__}); "
                                              "header values and statusText must be ASCII") from None
    return head


def fail_message_parse(body: Any) -> str:
    """``{message: 1–500 characters}`` of a fail; raises ApiError 400 ``invalid_request``."""
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, str) or not 1 <= len(message) <= FAIL_MESSAGE_MAX_CHARS:
        raise ApiError(400, "invalid_request", f"A relay fail is {{\"message\": 1-{FAIL_MESSAGE_MAX_CHARS} characters}}")
    return message


# --- backends: channel registry, request state, answers ---------------------------------------------


class _MemoryRequest:
    def __init__(self, channel: str, connection: str) -> None:
        self.channel = channel
        self.connection = connection
        self.phase = _PHASE_SENT
        self.size = 0
        self.answers: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.closed_until = 0.0


class _MemoryBackend:
    """This process's registry (the embedded shape: the worker threads share the web process)."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[str, str] = {}
        self._requests: dict[str, _MemoryRequest] = {}

    def _sweep(self, now: float) -> None:
        for request_id in [k for k, r in self._requests.items() if r.phase == _PHASE_CLOSED and r.closed_until <= now]:
            del self._requests[request_id]

    def _lose(self, request: _MemoryRequest, message: str) -> None:
        request.phase = _PHASE_CLOSED
        request.closed_until = time.monotonic() + _CLOSED_TTL_SECONDS
        request.answers.put((LOST, message.encode()))

    def connect(self, channel: str, connection: str) -> None:
        with self._lock:
            self._sweep(time.monotonic())
            self._connections[channel] = connection
            for request in self._requests.values():
                if request.channel == channel and request.connection != connection and request.phase != _PHASE_CLOSED:
                    self._lose(request, _LOST_REPLACED)

    def refresh(self, channel: str, connection: str) -> bool:
        with self._lock:
            return self._connections.get(channel) == connection

    def disconnect(self, channel: str, connection: str) -> None:
        with self._lock:
            if self._connections.get(channel) == connection:
                del self._connections[channel]
            for request in self._requests.values():
                if request.channel == channel and request.connection == connection and request.phase != _PHASE_CLOSED:
                    self._lose(request, _LOST_CLOSED)

    def dispatch(self, channel: str, request_id: str) -> str | None:
        with self._lock:
            self._sweep(time.monotonic())
            connection = self._connections.get(channel)
            if connection is not None:
                self._requests[request_id] = _MemoryRequest(channel, connection)
            return connection

    def answer(self, channel: str, request_id: str, kind: str, data: bytes) -> str:
        with self._lock:
            request = self._requests.get(request_id)
            if request is None or request.channel != channel:
                return "unknown"
            phase = request.phase
            if phase == _PHASE_CLOSED:
                return "order"
            if kind == HEAD:
                if phase != _PHASE_SENT:
                    return "order"
                request.phase = _PHASE_BODY
            elif kind == CHUNK:
                if phase != _PHASE_BODY:
                    return "order"
                if request.size + len(data) > MAX_ANSWER_BYTES:
                    kind, data = LARGE, b""
                    request.phase = _PHASE_CLOSED
                request.size += len(data)
            elif kind == END:
                if phase != _PHASE_BODY:
                    return "order"
                request.phase = _PHASE_CLOSED
            else:  # fail, invalid
                request.phase = _PHASE_CLOSED
            if request.phase == _PHASE_CLOSED:
                request.closed_until = time.monotonic() + _CLOSED_TTL_SECONDS
            request.answers.put((kind, data))
            return "large" if kind == LARGE else "ok"

    def next(self, request_id: str, timeout: float) -> tuple[str, bytes] | None:
        with self._lock:
            request = self._requests.get(request_id)
        if request is None:
            return (LOST, _LOST_CLOSED.encode())
        try:
            return request.answers.get(timeout=timeout)
        except queue.Empty:
            return None

    def forget(self, channel: str, request_id: str, *, cancelled: bool) -> None:
        with self._lock:
            request = self._requests.get(request_id)
            if request is None:
                return
            if cancelled:
                del self._requests[request_id]
            elif request.phase != _PHASE_CLOSED:
                request.phase = _PHASE_CLOSED
                request.closed_until = time.monotonic() + _CLOSED_TTL_SECONDS

    def reset(self) -> None:
        with self._lock:
            self._connections.clear()
            self._requests.clear()


_PREFIX = "covel:relay:"

# KEYS: conn, open. ARGV: connection, conn ttl, prefix, lost message, request ttl.
_LUA_CONNECT = """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
for _, rid in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local rk = ARGV[3] .. 'req:' .. rid
  local owner = redis.call('HGET', rk, 'conn')
  if owner ~= ARGV[1] then
    redis.call('SREM', KEYS[2], rid)
    if owner then
      redis.call('HSET', rk, 'phase', 'closed')
      redis.call('EXPIRE', rk, ARGV[5])
      local ak = ARGV[3] .. 'ans:' .. rid
      redis.call('XADD', ak, '*', 'kind', 'lost', 'data', ARGV[4])
      redis.call('EXPIRE', ak, ARGV[5])
    end
  end
end
return 1
"""
# KEYS: conn, open. ARGV: connection, prefix, lost message, request ttl.
_LUA_DISCONNECT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
for _, rid in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local rk = ARGV[2] .. 'req:' .. rid
  local owner = redis.call('HGET', rk, 'conn')
  if (not owner) or owner == ARGV[1] then
    redis.call('SREM', KEYS[2], rid)
    if owner then
      redis.call('HSET', rk, 'phase', 'closed')
      redis.call('EXPIRE', rk, ARGV[4])
      local ak = ARGV[2] .. 'ans:' .. rid
      redis.call('XADD', ak, '*', 'kind', 'lost', 'data', ARGV[3])
      redis.call('EXPIRE', ak, ARGV[4])
    end
  end
end
return 1
"""
# KEYS: conn. ARGV: connection, ttl.
_LUA_REFRESH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
# KEYS: conn, open, req. ARGV: channel, request id, ttl.
_LUA_DISPATCH = """
local cid = redis.call('GET', KEYS[1])
if not cid then return false end
redis.call('HSET', KEYS[3], 'channel', ARGV[1], 'conn', cid, 'phase', 'sent', 'size', 0)
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return cid
"""
# KEYS: req, ans, open. ARGV: channel, request id, kind, data, max bytes, ttl, closed ttl.
_LUA_ANSWER = """
local h = redis.call('HMGET', KEYS[1], 'channel', 'phase', 'size')
if (not h[1]) or h[1] ~= ARGV[1] then return 'unknown' end
local phase, kind, data = h[2], ARGV[3], ARGV[4]
local nextp = phase
if phase == 'closed' then return 'order' end
if kind == 'head' then
  if phase ~= 'sent' then return 'order' end
  nextp = 'body'
elseif kind == 'chunk' then
  if phase ~= 'body' then return 'order' end
  local size = tonumber(h[3]) + string.len(data)
  if size > tonumber(ARGV[5]) then
    kind = 'large'
    data = ''
    nextp = 'closed'
  else
    redis.call('HSET', KEYS[1], 'size', size)
  end
elseif kind == 'end' then
  if phase ~= 'body' then return 'order' end
  nextp = 'closed'
else
  nextp = 'closed'
end
redis.call('HSET', KEYS[1], 'phase', nextp)
redis.call('XADD', KEYS[2], '*', 'kind', kind, 'data', data)
redis.call('EXPIRE', KEYS[2], ARGV[6])
if nextp == 'closed' then
  redis.call('SREM', KEYS[3], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
else
  redis.call('EXPIRE', KEYS[1], ARGV[6])
end
if kind == 'large' then return 'large' end
return 'ok'
"""
#: Longest single XREAD BLOCK (ms); a longer wait loops, so a vanished Redis is noticed.
_XREAD_BLOCK_MS = 5000


class _RedisBackend:
    """The hosted shape: registry, request state and answers in Redis (see module docstring)."""

    name = "redis"

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        # socket_timeout above the longest XREAD BLOCK, so a blocked read is not cut off.
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=_XREAD_BLOCK_MS / 1000 + 5)
        self._connect = self.client.register_script(_LUA_CONNECT)
        self._disconnect = self.client.register_script(_LUA_DISCONNECT)
        self._refresh = self.client.register_script(_LUA_REFRESH)
        self._dispatch = self.client.register_script(_LUA_DISPATCH)
        self._answer = self.client.register_script(_LUA_ANSWER)
        self._cursors: dict[str, bytes] = {}
        self._cursor_lock = threading.Lock()

    @staticmethod
    def _conn_ttl() -> int:
        return max(30, 3 * int(settings.COVEL_SSE_KEEPALIVE_SECONDS))

    def connect(self, channel: str, connection: str) -> None:
        self._connect(keys=[f"{_PREFIX}conn:{channel}", f"{_PREFIX}open:{channel}"],
                      args=[connection, self._conn_ttl(), _PREFIX, _LOST_REPLACED, _CLOSED_TTL_SECONDS])

    def refresh(self, channel: str, connection: str) -> bool:
        return bool(self._refresh(keys=[f"{_PREFIX}conn:{channel}"], args=[connection, self._conn_ttl()]))

    def disconnect(self, channel: str, connection: str) -> None:
        self._disconnect(keys=[f"{_PREFIX}conn:{channel}", f"{_PREFIX}open:{channel}"],
                         args=[connection, _PREFIX, _LOST_CLOSED, _CLOSED_TTL_SECONDS])

    def dispatch(self, channel: str, request_id: str) -> str | None:
        connection = self._dispatch(keys=[f"{_PREFIX}conn:{channel}", f"{_PREFIX}open:{channel}", f"{_PREFIX}req:{request_id}"],
                                    args=[channel, request_id, _REQUEST_TTL_SECONDS])
        if connection is None:
            return None
        with self._cursor_lock:
            self._cursors[request_id] = b"0-0"
        return connection.decode() if isinstance(connection, bytes) else str(connection)

    def answer(self, channel: str, request_id: str, kind: str, data: bytes) -> str:
        result = self._answer(keys=[f"{_PREFIX}req:{request_id}", f"{_PREFIX}ans:{request_id}", f"{_PREFIX}open:{channel}"],
                              args=[channel, request_id, kind, data, MAX_ANSWER_BYTES, _REQUEST_TTL_SECONDS,
                                    _CLOSED_TTL_SECONDS])
        return result.decode() if isinstance(result, bytes) else str(result)

    def next(self, request_id: str, timeout: float) -> tuple[str, bytes] | None:
        key = f"{_PREFIX}ans:{request_id}"
        deadline = time.monotonic() + timeout
        with self._cursor_lock:
            cursor = self._cursors.get(request_id, b"0-0")
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                return None
            reply = self.client.xread({key: cursor}, count=1, block=min(remaining_ms, _XREAD_BLOCK_MS))
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    with self._cursor_lock:
                        self._cursors[request_id] = entry_id
                    kind = fields.get(b"kind", b"").decode()
                    return kind, fields.get(b"data", b"")

    def forget(self, channel: str, request_id: str, *, cancelled: bool) -> None:
        with self._cursor_lock:
            self._cursors.pop(request_id, None)
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(f"{_PREFIX}open:{channel}", request_id)
        pipe.delete(f"{_PREFIX}ans:{request_id}")
        if cancelled:
            pipe.delete(f"{_PREFIX}req:{request_id}")
        else:
            pipe.hset(f"{_PREFIX}req:{request_id}", "phase", _PHASE_CLOSED)
            pipe.expire(f"{_PREFIX}req:{request_id}", _CLOSED_TTL_SECONDS)
        pipe.execute()

    def reset(self) -> None:
        keys = list(self.client.scan_iter(match=f"{_PREFIX}*", count=500))
        if keys:
            self.client.delete(*keys)


_backends: dict[str, Any] = {}
_backends_lock = threading.Lock()


def _backend():
    """The backend of this shape: Redis when the event bus is (hosted), else this process's memory."""
    with _backends_lock:
        if eventbus.backend_name() == "redis":
            backend = _backends.get("redis")
            if backend is None or backend.url != settings.REDIS_URL:
                backend = _backends["redis"] = _RedisBackend(settings.REDIS_URL)
            return backend
        backend = _backends.get("memory")
        if backend is None:
            backend = _backends["memory"] = _MemoryBackend()
        return backend


def relay_reset() -> None:
    """Forget every channel and request of this deployment (tests): this process's memory, and in
    the hosted shape the ``covel:relay:*`` keys of the configured Redis database."""
    _backend().reset()
    with _slots_lock:
        _slots["open"] = 0


def _bus_channel(channel: str) -> str:
    return f"model-relay:{channel}"


# --- the browser's stream (web process) ---------------------------------------------------------------

_slots = {"open": 0}
_slots_lock = threading.Lock()
#: What ``RelayConnection.next_event`` returns once the connection is over.
CLOSED: dict[str, Any] = {"type": "closed"}


def _slot_acquire() -> None:
    with _slots_lock:
        if _slots["open"] >= settings.COVEL_MODEL_RELAY_MAX_CHANNELS:
            raise ModelRelayBusy(message="This server process has too many model relay channels open; retry later")
        _slots["open"] += 1


def _slot_release() -> None:
    with _slots_lock:
        _slots["open"] = max(0, _slots["open"] - 1)


def open_channel_count() -> int:
    """Relay streams open in this process (counted against COVEL_MODEL_RELAY_MAX_CHANNELS)."""
    with _slots_lock:
        return _slots["open"]


class RelayConnection:
    """One open GET /api/model-relay/stream in this web process.

    Lifecycle: ``RelayConnection(channel, loop)`` counts against the process limit (raises
    ModelRelayBusy); ``open()`` (sync, may block on Redis) subscribes to the channel's bus events,
    then becomes the channel's connection — which replaces any earlier one and fails its
    unanswered requests; ``await next_event(seconds)`` returns the next event dict for the browser
    (``{"type": "request", ...}`` / ``{"type": "cancel", "id"}``), None when nothing came within
    ``seconds``, or ``CLOSED``; ``refresh()`` (sync) renews the registration at each keep-alive and
    answers False once another connection took the channel; ``close()`` (sync, idempotent) fails
    the requests still unanswered on this connection and frees the slot.
    """

    def __init__(self, channel: str, loop: asyncio.AbstractEventLoop) -> None:
        _slot_acquire()
        self.channel = channel
        self.id = uuid.uuid4().hex
        self._loop = loop
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._unsubscribe = None
        self._closed = False
        self._close_lock = threading.Lock()

    def open(self) -> None:
        """Take the channel (see class docstring). Raises ModelRelayUnreachable (503) when Redis fails."""
        try:
            self._unsubscribe = eventbus.subscribe(_bus_channel(self.channel), self._on_message)
            _backend().connect(self.channel, self.id)
            eventbus.publish(_bus_channel(self.channel), {"type": "replaced", "connection": self.id})
        except ApiError:
            self.close()
            raise
        except Exception as exc:
            logger.warning("model relay: channel could not be opened (%s)", type(exc).__name__)
            self.close()
            raise ModelRelayUnreachable(message="The model relay is unavailable right now; retry shortly") from None

    def _deliver(self, event: dict[str, Any]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the loop is gone: the stream already ended
            pass

    def _on_message(self, message: dict[str, Any]) -> None:
        # Runs on the publishing thread (embedded) or the bus listener thread (hosted): no waiting.
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "replaced" and message.get("connection") != self.id:
            self._deliver(CLOSED)
        elif kind == "request" and message.get("connection") == self.id and isinstance(message.get("event"), dict):
            self._deliver(message["event"])
        elif kind == "cancel" and isinstance(message.get("id"), str):
            self._deliver({"type": "cancel", "id": message["id"]})
        # {"resync": true} and anything else: a request lost in a Redis outage times out on its own.

    async def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event for the browser, None after ``timeout`` seconds of silence, or CLOSED."""
        if self._closed:
            return CLOSED
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    def refresh(self) -> bool:
        """Renew the registration; False when the channel belongs to another connection now (or
        the store cannot be reached: the stream then ends and the browser reconnects)."""
        try:
            return _backend().refresh(self.channel, self.id)
        except Exception as exc:
            logger.warning("model relay: keep-alive could not renew the channel (%s)", type(exc).__name__)
            return False

    def close(self) -> None:
        """Leave the channel (idempotent): unanswered requests of this connection fail."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._unsubscribe is not None:
                self._unsubscribe()
            _backend().disconnect(self.channel, self.id)
        except Exception as exc:  # its requests then time out instead of failing at once
            logger.warning("model relay: channel could not be released (%s)", type(exc).__name__)
        finally:
            _slot_release()


# --- the browser's answers (any web process) ------------------------------------------------------------


def _answer(channel: str, request_id: str, kind: str, data: bytes = b"") -> str:
    if not REQUEST_ID_RE.match(request_id or ""):
        raise ModelRelayRequestUnknown(message="Unknown relay request")
    try:
        result = _backend().answer(channel, request_id, kind, data)
    except Exception as exc:
        logger.warning("model relay: answer could not be stored (%s)", type(exc).__name__)
        raise ModelRelayUnreachable(message="The model relay is unavailable right now; retry shortly") from None
    if result == "unknown":
        raise ModelRelayRequestUnknown(message="This relay request is not open on this channel")
    if result == "order":
        raise ModelRelayOutOfOrder(message="A relay answer is head, then chunks, then end (or fail at any point)")
    if result == "large":
        _publish_cancel(channel, request_id)
        raise ModelRelayTooLarge(message=f"The relay answer passed {MAX_ANSWER_BYTES // (1024 * 1024)} MiB; the request failed")
    return result


def answer_head(channel: str, request_id: str, body: Any) -> None:
    """POST …/requests/:id/head. A malformed head fails the request and raises 400 (see
    ``head_parse``); 404 model_relay_request_unknown; 409 model_relay_out_of_order."""
    try:
        head = head_parse(body)
    except ApiError as exc:
        _answer(channel, request_id, INVALID, exc.message.encode("utf-8", "replace"))  # 404 takes precedence
        raise
    _answer(channel, request_id, HEAD, json.dumps(head.to_json()).encode())


def answer_chunk(channel: str, request_id: str, data: bytes) -> None:
    """POST …/requests/:id/chunk with ``data`` (≤ 1 MiB, enforced by the body limit). Raises 404,
    409, or 413 model_relay_too_large when the answer passes 64 MiB (the request fails; cancel sent)."""
    _answer(channel, request_id, CHUNK, bytes(data))


def answer_end(channel: str, request_id: str) -> None:
    """POST …/requests/:id/end: the body is complete. Raises 404 / 409."""
    _answer(channel, request_id, END)


def answer_fail(channel: str, request_id: str, body: Any) -> None:
    """POST …/requests/:id/fail ``{message}``: the model call fails with ``Local model relay: <message>``.
    Raises 400 invalid_request (message not 1–500 characters), 404, 409."""
    message = fail_message_parse(body)
    _answer(channel, request_id, FAIL, message.encode("utf-8"))


def _publish_cancel(channel: str, request_id: str) -> None:
    try:
        eventbus.publish(_bus_channel(channel), {"type": "cancel", "id": request_id})
    except Exception as exc:  # the browser's later POSTs then get 404/409
        logger.warning("model relay: cancel could not be sent (%s)", type(exc).__name__)


# --- the caller's side (worker) ---------------------------------------------------------------------------


def _relay_error(code: str, message: str) -> outbound.RelayError:
    return outbound.RelayError(code, MESSAGE_PREFIX + message)


def timeout_seconds() -> float:
    """How long a relayed call waits for each part of the answer (COVEL_MODEL_RELAY_TIMEOUT_SECONDS)."""
    return float(settings.COVEL_MODEL_RELAY_TIMEOUT_SECONDS)


@dataclass
class _Pending:
    """One relayed request, from the caller's side."""

    channel: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    finished: bool = False
    dispatched: bool = False
    #: Seconds to wait for each answer part (None: ``timeout_seconds()``).
    wait: float | None = None

    def send(self, event: dict[str, Any]) -> None:
        backend = _backend()
        try:
            connection = backend.dispatch(self.channel, self.id)
        except Exception as exc:
            raise _relay_error(outbound.CODE_RELAY_UNAVAILABLE, f"the relay store could not be reached ({type(exc).__name__})") from None
        if connection is None:
            raise _relay_error(outbound.CODE_RELAY_UNAVAILABLE,
                               "no browser has this relay channel open (keep GET /api/model-relay/stream open with the "
                               "same X-Model-Relay)")
        self.dispatched = True
        try:
            eventbus.publish(_bus_channel(self.channel), {"type": "request", "connection": connection,
                                                          "event": {**event, "id": self.id}})
        except Exception as exc:
            self.close()
            raise _relay_error(outbound.CODE_RELAY_UNAVAILABLE, f"the request could not be sent ({type(exc).__name__})") from None

    def next(self) -> tuple[str, bytes]:
        """The next answer part; raises RelayError for a timeout, a fail, a lost connection."""
        wait = self.wait if self.wait is not None else timeout_seconds()
        try:
            item = _backend().next(self.id, wait)
        except Exception as exc:
            self.close()
            raise _relay_error(outbound.CODE_RELAY_UNAVAILABLE, f"the relay store could not be reached ({type(exc).__name__})") from None
        if item is None:
            self.close()
            raise _relay_error(outbound.CODE_RELAY_TIMEOUT, f"the browser sent no answer for {wait:g} s")
        kind, data = item
        if kind in (HEAD, CHUNK):
            return kind, data
        self.finished = True
        if kind == END:
            return kind, data
        self.close()
        text = data.decode("utf-8", "replace")
        if kind == FAIL:
            raise _relay_error(outbound.CODE_RELAY_FAILED, text)
        if kind == INVALID:
            raise _relay_error(outbound.CODE_RELAY_FAILED, f"the browser's answer was malformed ({text})")
        if kind == LARGE:
            raise _relay_error(outbound.CODE_RELAY_TOO_LARGE, f"the answer passed {MAX_ANSWER_BYTES // (1024 * 1024)} MiB")
        raise _relay_error(outbound.CODE_RELAY_UNAVAILABLE, text or _LOST_CLOSED)

    def settle(self, grace: float) -> None:
        """The caller stopped reading: give the browser ``grace`` seconds to finish (its ``end`` is
        usually on the way), so a complete answer is not cancelled. Parts still coming are dropped."""
        deadline = time.monotonic() + grace
        backend = _backend()
        while self.dispatched and not self.finished:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                item = backend.next(self.id, remaining)
            except Exception:
                return
            if item is None:
                return
            if item[0] not in (HEAD, CHUNK):  # end, or the request already failed server-side
                self.finished = True

    def close(self) -> None:
        """Done with it: forget its state; an unfinished request is cancelled (the browser is told)."""
        if not self.dispatched:
            return
        self.dispatched = False
        cancelled = not self.finished
        try:
            _backend().forget(self.channel, self.id, cancelled=cancelled)
        except Exception as exc:  # the keys expire on their own
            logger.warning("model relay: request state could not be released (%s)", type(exc).__name__)
        if cancelled:
            _publish_cancel(self.channel, self.id)


class _RelayBody(httpx.SyncByteStream):
    """The body of a relayed response: the browser's chunks as they arrive."""

    def __init__(self, pending: _Pending) -> None:
        self._pending = pending

    def __iter__(self):
        while True:
            kind, data = self._pending.next()
            if kind == END:
                self._pending.close()
                return
            if kind == HEAD:  # cannot happen (the order check refuses it); end the body
                raise _relay_error(outbound.CODE_RELAY_FAILED, "the browser sent a second head")
            if data:
                yield data

    def close(self) -> None:
        if self._pending.dispatched and not self._pending.finished:
            self._pending.settle(_END_GRACE_SECONDS)
        self._pending.close()


class RelayTransport(httpx.BaseTransport):
    """httpx transport that sends each request to the browser holding ``channel`` (module docstring).

    ``handle_request`` publishes the request (GET or POST; a body must be UTF-8 text, e.g. JSON)
    and waits for the head; the response body then streams the browser's chunks. Raises
    ``covel.outbound.RelayError``: ``model_relay_unavailable`` (no stream open on the channel, or it
    closed or was replaced before the answer was complete), ``model_relay_failed`` (the browser
    failed it or answered malformed), ``model_relay_timeout`` (no part of the answer for
    COVEL_MODEL_RELAY_TIMEOUT_SECONDS, or the request's shorter read timeout),
    ``model_relay_too_large`` (> 64 MiB). Closing the response
    before its end cancels the request at the browser. One transport may serve many calls and
    threads; ``close()`` does nothing.
    """

    def __init__(self, channel: str) -> None:
        if not CHANNEL_RE.match(channel or ""):
            raise ValueError("not a relay channel id")
        self.channel = channel

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method not in ("GET", "POST"):
            raise _relay_error(outbound.CODE_RELAY_FAILED, f"only GET and POST are relayed, not {request.method}")
        body = request.read()
        event: dict[str, Any] = {
            "type": "request", "url": str(request.url), "method": request.method,
            "headers": {name: value for name, value in request.headers.items() if name.lower() not in _NOT_FORWARDED},
        }
        if body:
            try:
                event["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                raise _relay_error(outbound.CODE_RELAY_FAILED, "only text request bodies are relayed") from None
        # The caller's read timeout (a provider's idle timeout, a probe's limit) when it is shorter.
        read = (request.extensions.get("timeout") or {}).get("read")
        wait = timeout_seconds() if not isinstance(read, (int, float)) else min(timeout_seconds(), float(read))
        pending = _Pending(self.channel, wait=wait)
        pending.send(event)
        try:
            kind, data = pending.next()
            if kind != HEAD:
                raise _relay_error(outbound.CODE_RELAY_FAILED, "the browser ended the answer before its head")
            head = Head.from_json(json.loads(data))
            return httpx.Response(head.status, headers=list(head.headers), stream=_RelayBody(pending), request=request,
                                  extensions={"reason_phrase": head.status_text.encode("ascii", "replace")})
        except BaseException:
            pending.close()
            raise

    def close(self) -> None:
        """Nothing to release: the transport holds no connection (each call cleans up after itself)."""
