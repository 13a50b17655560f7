"""Endpoints of the local model relay (spec 004 §本地模型中继; mechanics in ``covel.model_relay``).

Every route answers 404 ``model_relay_unavailable`` where the relay is not served (the personal
shape), then requires ``X-Model-Relay`` (400 ``model_relay_channel_required``).
"""
from __future__ import annotations

import asyncio
import json
import weakref

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from ninja import Router

from pydantic import Field

from covel import model_relay
from covel.jsonbody import json_body_load
from covel.openapi import BINARY, WireIn, contract
from covel.openapi import BINARY, WireIn, contract
from covel.ratelimit import rate_limit_hit

router = Router(tags=["model-relay"])

# Documented shapes (covel/openapi.py); the routes check bodies in covel.model_relay.
_ERRORS = {400: "model_relay_channel_required: no valid X-Model-Relay", 404: "model_relay_unavailable: the personal shape "
           "serves no relay / model_relay_request_unknown", 409: "model_relay_out_of_order"}


class RelayAnswerHeadIn(WireIn):
    status: int
    status_text: str | None = None
    headers: dict[str, str]


class RelayAnswerFailIn(WireIn):
    message: str

_ERRORS = {400: "model_relay_channel_required: X-Model-Relay missing or not 32-128 of A-Z a-z 0-9 _ -",
           404: "model_relay_unavailable: this server does not serve the relay (personal shape) / "
                "model_relay_request_unknown: not a request of this channel, or cancelled",
           409: "model_relay_out_of_order: head, chunks, end (or fail) is the only order"}


class RelayHeadIn(WireIn):
    """The status line and headers of the browser's answer."""

    status: int = Field(ge=200, le=599)
    status_text: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="at most 100; names are HTTP tokens")


class RelayFailIn(WireIn):
    """Why the browser could not fetch the request."""

    message: str = Field(min_length=1, max_length=500)


def _channel(request) -> str:
    model_relay.served_require()
    return model_relay.channel_require(request)


def _frame(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode("utf-8")


class RelayStreamResponse(StreamingHttpResponse):
    """The relay stream; closes its connection even when Django never iterates it."""

    def __init__(self, connection: model_relay.RelayConnection) -> None:
        frames = _frames(connection)
        # A stream whose client left before its first frame never runs the generator's ``finally``
        # (and Django skips close() for a cancelled request): release the channel when it is dropped.
        weakref.finalize(frames, connection.close)
        super().__init__(frames, content_type="text/event-stream; charset=utf-8")
        self._connection = connection
        self["Cache-Control"] = "no-cache, no-transform"
        self["X-Accel-Buffering"] = "no"

    def close(self) -> None:
        # Idempotent; when the frames ran, their own ``finally`` already closed it.
        asyncio_safe_close(self._connection)
        super().close()


def asyncio_safe_close(connection: model_relay.RelayConnection) -> None:
    """Close ``connection`` without blocking an event loop (it may call Redis)."""
    try:
        asyncio.get_running_loop().run_in_executor(None, connection.close)
    except RuntimeError:  # no loop in this thread: close here
        connection.close()


async def _frames(connection: model_relay.RelayConnection):
    loop = asyncio.get_running_loop()
    keepalive = float(settings.COVEL_SSE_KEEPALIVE_SECONDS)
    try:
        yield _frame("ready", {})
        while True:
            event = await connection.next_event(keepalive)
            if event is model_relay.CLOSED:
                return
            if event is None:
                yield b": keep-alive\n\n"
                if not await loop.run_in_executor(None, connection.refresh):
                    return
                continue
            yield _frame(str(event.get("type")), event)
    finally:
        asyncio_safe_close(connection)


@router.get("/model-relay/stream")
@contract(stream="SSE: `event: ready` (`{}`), then `event: request` (`{type, id, url, method, headers, body?}`) and "
                 "`event: cancel` (`{type, id}`); a `: keep-alive` comment every 15 s",
          errors={400: _ERRORS[400], 404: "model_relay_unavailable: this server does not serve the relay (personal shape)",
                  429: "rate_limit_exceeded (with Retry-After)",
                  503: "model_relay_busy: too many relay streams in this process / service_unavailable"})
@contract(stream="text/event-stream: `ready`, then `request` / `cancel` events and keep-alive comments",
          errors={**_ERRORS, 429: "rate_limit_exceeded (Retry-After)", 503: "model_relay_busy / service_unavailable"})
async def model_relay_stream(request):
    """The browser's relay channel: SSE ``ready {}``, then ``request {type, id, url, method, headers,
    body?}`` (fetch it, answer with the POST routes below) and ``cancel {type, id}`` (stop; the
    answer is no longer wanted), with a keep-alive comment every 15 s (COVEL_SSE_KEEPALIVE_SECONDS).

    Opening it again with the same channel replaces this stream (it ends) and fails the requests
    still unanswered on it. Errors: 404 model_relay_unavailable (personal shape), 400
    model_relay_channel_required, 429 rate_limit_exceeded (RATE_LIMIT_RPM opens a minute per client
    address, Retry-After), 503 model_relay_busy (COVEL_MODEL_RELAY_MAX_CHANNELS streams open in this
    process), 503 service_unavailable (the relay's Redis is unreachable).
    """
    channel = _channel(request)
    await sync_to_async(rate_limit_hit, thread_sensitive=False)(request, "model-relay-stream",
                                                                per_minute=settings.RATE_LIMIT_RPM)
    connection = model_relay.RelayConnection(channel, asyncio.get_running_loop())
    try:
        await sync_to_async(connection.open, thread_sensitive=False)()
    except BaseException:
        asyncio_safe_close(connection)
        raise
    return RelayStreamResponse(connection)


def _json_body(request) -> object:
    cached = getattr(request, "covel_json", None)
    if cached is not None:
        return cached
    if not request.body.strip():
        return None
    return json_body_load(request.body)


def _no_content() -> HttpResponse:
    return HttpResponse(status=204)


@router.post("/model-relay/requests/{request_id}/head", response={204: None})
@contract(status=204, body=RelayHeadIn, errors={
    **_ERRORS, 400: f"{_ERRORS[400]} / invalid_request: a malformed status line or header (the request fails) / "
                    "model_relay_invalid_answer: not a valid HTTP response, e.g. non-ASCII values (the request fails)"})
@contract(ok={204: None}, body=RelayAnswerHeadIn, errors={**_ERRORS, 400: "invalid_request / "
          "model_relay_invalid_answer / model_relay_channel_required"})
def model_relay_head(request, request_id: str):
    """JSON ``{status: 200–599, statusText?, headers: {name: value}}`` (≤ 100 headers): the status
    line and headers of the browser's answer to request ``request_id``. 204.

    400 invalid_request (malformed: a name that is not an HTTP token, a control character in a value
    or statusText) and 400 model_relay_invalid_answer (well-formed but not a valid response, e.g.
    non-ASCII values) both fail the request; 404 model_relay_request_unknown (not a request of this
    channel, or cancelled); 409 model_relay_out_of_order.
    """
    channel = _channel(request)
    model_relay.answer_head(channel, request_id, _json_body(request))
    return _no_content()


@router.post("/model-relay/requests/{request_id}/chunk", response={204: None})
@contract(status=204, body={"application/octet-stream": BINARY["schema"]}, errors={
    **_ERRORS, 413: "model_relay_too_large: the answer passed 64 MiB (the request fails; the stream gets cancel) / "
                    "a chunk over 1 MiB"})
@contract(ok={204: None}, body={"application/octet-stream": BINARY["schema"]},
          errors={**_ERRORS, 413: "model_relay_too_large: the answer passed 64 MiB"})
def model_relay_chunk(request, request_id: str):
    """``application/octet-stream``: the next piece of the answer's body (≤ 1 MiB; 413 beyond, as
    every API body). 204. 404 model_relay_request_unknown, 409 model_relay_out_of_order (before the
    head or after the end), 413 model_relay_too_large when the answer passes 64 MiB (the request
    fails and the stream gets ``cancel``)."""
    channel = _channel(request)
    model_relay.answer_chunk(channel, request_id, request.body)
    return _no_content()


@router.post("/model-relay/requests/{request_id}/end", response={204: None})
@contract(status=204, errors=_ERRORS)
def model_relay_end(request, request_id: str):
    """The answer's body is complete. 204. 404 model_relay_request_unknown, 409 model_relay_out_of_order."""
    channel = _channel(request)
    model_relay.answer_end(channel, request_id)
    return _no_content()


@router.post("/model-relay/requests/{request_id}/fail", response={204: None})
@contract(status=204, body=RelayFailIn, errors={**_ERRORS, 400: f"{_ERRORS[400]} / invalid_request: message not 1-500 characters"})
def model_relay_fail(request, request_id: str):
    """JSON ``{message}`` (1–500 characters): the browser could not fetch it; the model call fails
    with ``Local model relay: <message>``. 204. 400 invalid_request, 404 model_relay_request_unknown,
    409 model_relay_out_of_order (already ended)."""
    channel = _channel(request)
    model_relay.answer_fail(channel, request_id, _json_body(request))
    return _no_content()
