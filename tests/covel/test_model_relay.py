"""Local model relay (spec 004 §本地模型中继) through its public interface: the test plays the player's
browser — it keeps GET /api/model-relay/stream open on the real ASGI application, fetches nothing,
and answers each ``request`` event with POST …/head, …/chunk, …/end (or …/fail) — while a model
request of the shared tier (POST /api/ai/ping, or a turn of POST /api/actions) names a preset on
loopback through ``X-Slot-Config`` and the channel through ``X-Model-Relay``.

Runs in both halves: in-process memory (SQLite) and Redis (PostgreSQL + Redis, covel.settings.test_hosted).
"""
from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest
from django.test import Client

from covel import model_relay
from covel.ratelimit import rate_limits_reset
from tests.covel.outbound_support import CANARY, Listener, closed_port, sse_chat_reply, sse_tool_call_reply
from tests.turns.events_support import AsgiSse, in_thread
from tests.turns.test_actions_helpers import action_body, session_make, sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = "op-token-relay-tests"
STREAM = "/api/model-relay/stream"
NARRATION = "The lantern gutters; somewhere below, water answers."


def new_channel() -> str:
    return f"page-{uuid.uuid4().hex}{uuid.uuid4().hex[:6]}"


def b64(value: dict) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def slot_config(base_url: str, *, slots=("story", "plugin")) -> str:
    """X-Slot-Config: a custom preset on ``base_url`` bound to ``slots``."""
    return b64({"customPresets": {"my-ollama": {"provider": "ollama", "model": "llama3", "baseUrl": base_url}},
                "slotBindings": {slot: {"modelRef": "my-ollama"} for slot in slots}})


@pytest.fixture
def shared_tier(settings):
    """The demo tier (a shared deployment): the relay is served."""
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR
    settings.COVEL_MEDIA_TOKEN_SECRET = "media-secret-for-tests"
    settings.RATE_LIMIT_RPM = 1000
    model_relay.relay_reset()
    rate_limits_reset()
    yield settings
    model_relay.relay_reset()


@pytest.fixture
def local_url():
    """A loopback model address the server must not fetch itself (nothing listens there)."""
    return f"http://127.0.0.1:{closed_port()}/v1"


class Browser:
    """The player's page: one relay stream and the answer POSTs, all with its channel id."""

    def __init__(self, channel: str | None = None) -> None:
        self.channel = channel or new_channel()
        self.sse: AsgiSse | None = None

    async def __aenter__(self) -> "Browser":
        self.sse = AsgiSse("", [(b"x-model-relay", self.channel.encode())], path=STREAM)
        await self.sse.__aenter__()
        assert self.sse.status == 200, self.sse.body
        ready = await self.sse.frame()
        assert (ready.event, ready.data) == ("ready", {})
        return self

    async def __aexit__(self, *exc) -> None:
        await self.sse.__aexit__(*exc)

    async def event(self, timeout: float = 15.0):
        frame = await self.sse.frame(timeout)
        assert frame.data["type"] == frame.event, frame
        return frame

    async def request(self, timeout: float = 15.0) -> dict:
        frame = await self.event(timeout)
        assert frame.event == "request", frame
        return frame.data

    @property
    def ended(self) -> bool:
        return self.sse._task.done()

    def _post(self, request_id: str, part: str, *, data=b"", content_type="application/octet-stream"):
        return Client().post(f"/api/model-relay/requests/{request_id}/{part}", data=data, content_type=content_type,
                             HTTP_X_MODEL_RELAY=self.channel)

    async def post(self, request_id: str, part: str, body=None, *, raw: bytes | None = None):
        if raw is not None:
            return await asyncio.to_thread(self._post, request_id, part, data=raw)
        if body is None:
            return await asyncio.to_thread(self._post, request_id, part)
        return await asyncio.to_thread(self._post, request_id, part, data=json.dumps(body), content_type="application/json")

    async def answer(self, request_id: str, body: bytes, *, status: int = 200, pieces: int = 3) -> None:
        """head, the body in ``pieces`` chunks, end — each answered 204 (a caller that stopped at
        ``[DONE]`` still takes the end: the answer is complete, nothing is cancelled)."""
        response = await self.post(request_id, "head", {"status": status, "statusText": "OK",
                                                        "headers": {"Content-Type": "text/event-stream"}})
        assert response.status_code == 204, response.content
        size = max(1, len(body) // pieces + 1)
        for start in range(0, len(body), size):
            response = await self.post(request_id, "chunk", raw=body[start:start + size])
            assert response.status_code == 204, response.content
        response = await self.post(request_id, "end")
        assert response.status_code == 204, response.content


def _ping(channel: str | None, base_url: str, keys: dict | None = None) -> dict:
    headers = {"HTTP_X_SLOT_CONFIG": slot_config(base_url)}
    if channel:
        headers["HTTP_X_MODEL_RELAY"] = channel
    if keys:
        headers["HTTP_X_PROVIDER_KEYS"] = b64(keys)
    response = Client().post("/api/ai/ping", data=json.dumps({"modelRef": "my-ollama"}), content_type="application/json",
                             **headers)
    assert response.status_code == 200, response.content
    return response.json()


async def ping(channel: str | None, base_url: str, keys: dict | None = None) -> asyncio.Future:
    """POST /api/ai/ping of the preset, running on another thread (it waits for the relay)."""
    return asyncio.ensure_future(asyncio.to_thread(_ping, channel, base_url, keys))


def _post_action(session_id: str, *, channel: str | None, base_url: str, keys: dict | None = None,
                 request_id: str | None = None) -> list[dict]:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR}", "HTTP_X_SLOT_CONFIG": slot_config(base_url)}
    if channel:
        headers["HTTP_X_MODEL_RELAY"] = channel
    if keys:
        headers["HTTP_X_PROVIDER_KEYS"] = b64(keys)
    response = Client().post("/api/actions", data=json.dumps(action_body(session_id, request_id=request_id)),
                             content_type="application/json", **headers)
    assert response.status_code == 200, response.content
    return sse_frames(stream_bytes(response))


async def turn(session_id: str, **kwargs) -> asyncio.Future:
    """POST /api/actions on another thread; resolves to the stream's frames."""
    return asyncio.ensure_future(asyncio.to_thread(in_thread, _post_action, session_id, **kwargs))


async def make_session():
    return await asyncio.to_thread(in_thread, session_make, characters=[("hero", "Hero", "player")])


def _error_texts(frames: list[dict]) -> str:
    return json.dumps(frames, ensure_ascii=False)


# --- a turn played through the relay ---------------------------------------------------------------


async def test_turn_narrative_comes_from_the_browser_through_the_relay(shared_tier, local_url, monkeypatch):
    # given a shared deployment whose server has a key of its own, a player's page with its relay
    # stream open, and a session whose story and plugin slots are the player's local model
    monkeypatch.setenv("OLLAMA_API_KEY", CANARY)
    session = await make_session()
    async with Browser() as browser:
        # when the player sends a turn naming that channel and the browser answers every model call
        pending = await turn(session.id, channel=browser.channel, base_url=local_url, keys={"ollama": "sk-player-own"})
        seen: list[dict] = []
        while not pending.done():
            try:
                request = await browser.request(timeout=1.0)
            except (asyncio.TimeoutError, TimeoutError):
                continue
            seen.append(request)
            await browser.answer(request["id"], sse_chat_reply(NARRATION))
        frames = await pending

    # then every model call of the turn went to the browser, as an OpenAI-compatible request to the
    # player's own address carrying only the player's key
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    assert seen, "no model call reached the relay"
    for request in seen:
        assert request["url"] == f"{local_url}/chat/completions" and request["method"] == "POST"
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert headers["authorization"] == "Bearer sk-player-own"
        assert "host" not in headers and "content-length" not in headers
        body = json.loads(request["body"])
        assert body["model"] == "llama3" and body["stream"] is True and body["messages"]
    assert CANARY not in json.dumps(seen)
    # and the story the turn streamed and saved is the browser's answer
    streamed = "".join(f["payload"].get("text", "") for f in frames if f["type"] == "narrative.delta")
    assert NARRATION in streamed
    from sessions.models import ChatMessage

    texts = await asyncio.to_thread(in_thread, lambda: list(ChatMessage.objects.filter(session_id=session.id)
                                                           .values_list("content", flat=True)))
    assert any(NARRATION in text for text in texts), texts


async def test_a_failed_relay_request_fails_the_turn_with_the_browsers_message(shared_tier, local_url):
    # given a page whose local model is down
    session = await make_session()
    async with Browser() as browser:
        pending = await turn(session.id, channel=browser.channel, base_url=local_url)
        # when the browser reports that it could not fetch the first model call
        request = await browser.request()
        response = await browser.post(request["id"], "fail", {"message": "connect ECONNREFUSED 127.0.0.1:11434"})
        assert response.status_code == 204
        while not pending.done():  # later calls (other runtimes) fail the same way
            try:
                request = await browser.request(timeout=1.0)
            except (asyncio.TimeoutError, TimeoutError):
                continue
            await browser.post(request["id"], "fail", {"message": "connect ECONNREFUSED 127.0.0.1:11434"})
        frames = await pending

    # then the turn ends (not committed) and says why, in the spec's words
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is False, frames[-1]
    assert "Local model relay: connect ECONNREFUSED 127.0.0.1:11434" in _error_texts(frames)


async def test_a_stalled_relay_ends_the_turn_with_a_timeout_and_cancels_at_the_browser(shared_tier, local_url):
    # given a short relay wait and a page that receives the call but never answers it
    shared_tier.COVEL_MODEL_RELAY_TIMEOUT_SECONDS = 1
    session = await make_session()
    async with Browser() as browser:
        pending = await turn(session.id, channel=browser.channel, base_url=local_url)
        request = await browser.request()
        # then the server gives up after the wait and tells the browser it no longer needs the answer
        cancel = await browser.event(timeout=10)
        assert (cancel.event, cancel.data) == ("cancel", {"type": "cancel", "id": request["id"]})
        # and a late answer is refused
        late = await browser.post(request["id"], "head", {"status": 200, "headers": {}})
        assert late.status_code == 404 and late.json()["code"] == "model_relay_request_unknown"
        while not pending.done():
            try:
                await browser.event(timeout=1.0)
            except (asyncio.TimeoutError, TimeoutError):
                continue
        frames = await asyncio.wait_for(pending, 30)

    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is False, frames[-1]
    assert "Local model relay: the browser sent no answer for 1 s" in _error_texts(frames)


async def test_a_turn_naming_a_channel_nobody_holds_fails_with_model_relay_unavailable(shared_tier, local_url):
    session = await make_session()
    frames = await (await turn(session.id, channel=new_channel(), base_url=local_url))
    assert frames[-1]["payload"]["committed"] is False, frames[-1]
    assert "model_relay_unavailable" in _error_texts(frames)
    assert "no browser has this relay channel open" in _error_texts(frames)


async def test_a_turn_without_the_header_cannot_reach_a_local_model_in_the_shared_tier(shared_tier, local_url):
    session = await make_session()
    frames = await (await turn(session.id, channel=None, base_url=local_url))
    assert frames[-1]["payload"]["committed"] is False, frames[-1]
    assert "model_relay_unavailable" in _error_texts(frames)


async def test_the_personal_shape_ignores_the_header_and_reaches_the_local_model_itself(settings):
    # given the personal shape (the relay is not served) and a model listening on loopback
    settings.DEPLOYMENT_TIER = "self"
    with Listener() as listener:
        session = await make_session()
        # when a turn names a relay channel anyway
        frames = await (await turn(session.id, channel=new_channel(), base_url=listener.base_url))
    # then the server fetched the model itself
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    assert listener.requests


async def test_a_turn_with_a_malformed_channel_or_binding_is_refused_before_anything_runs(shared_tier, local_url):
    session = await asyncio.to_thread(in_thread, session_make)
    client = Client()
    bad_channel = await asyncio.to_thread(
        client.post, "/api/actions", data=json.dumps(action_body(session.id)), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {OPERATOR}", HTTP_X_MODEL_RELAY="short", HTTP_X_SLOT_CONFIG=slot_config(local_url))
    assert bad_channel.status_code == 400 and bad_channel.json()["code"] == "model_relay_channel_required"
    unbound = await asyncio.to_thread(
        client.post, "/api/actions", data=json.dumps(action_body(session.id)), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {OPERATOR}", HTTP_X_SLOT_CONFIG=b64({"slotBindings": {"story": {"modelRef": "nope"}}}))
    assert unbound.status_code == 400 and unbound.json()["code"] == "invalid_llm_configuration"
    from turns.models import Execution

    assert await asyncio.to_thread(in_thread, lambda: Execution.objects.filter(session_id=session.id).count()) == 0


# --- the protocol, through POST /api/ai/ping ----------------------------------------------------------


async def test_ping_of_a_local_preset_goes_through_the_relay(shared_tier, local_url):
    async with Browser() as browser:
        result = await ping(browser.channel, local_url, keys={"ollama": "sk-player"})
        request = await browser.request()
        assert request["url"] == f"{local_url}/chat/completions"
        await browser.answer(request["id"], sse_tool_call_reply("covel_ping", {"word": "pong"}))
        body = await result
    assert body["ok"] is True, body
    assert body["testedTarget"]["provider"] == "ollama"


def _models(channel: str, base_url: str) -> dict:
    response = Client().post("/api/ai/models", data=json.dumps({"provider": "ollama", "baseUrl": base_url}),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {OPERATOR}",
                             HTTP_X_MODEL_RELAY=channel)
    assert response.status_code == 200, response.content
    return response.json()


async def test_the_model_list_of_a_local_endpoint_is_read_through_the_relay(shared_tier, local_url):
    async with Browser() as browser:
        result = asyncio.ensure_future(asyncio.to_thread(_models, browser.channel, local_url))
        request = await browser.request()
        assert (request["method"], request["url"]) == ("GET", f"{local_url}/models") and "body" not in request
        response = await browser.post(request["id"], "head", {"status": 200, "headers": {"Content-Type": "application/json"}})
        assert response.status_code == 204
        await browser.post(request["id"], "chunk", raw=json.dumps({"data": [{"id": "llama3"}, {"id": "qwen2"}]}).encode())
        await browser.post(request["id"], "end")
        body = await result
    assert body["ok"] is True and body["models"] == ["llama3", "qwen2"], body


async def test_answers_must_come_in_order_on_the_channel_that_got_the_request(shared_tier, local_url):
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        rid = (await browser.request())["id"]
        # a part before the head, and a request id this channel never got
        assert (await browser.post(rid, "chunk", raw=b"data: x\n\n")).json()["code"] == "model_relay_out_of_order"
        assert (await browser.post(rid, "end")).status_code == 409
        unknown = await browser.post("not-a-request-of-ours", "head", {"status": 200, "headers": {}})
        assert unknown.status_code == 404 and unknown.json()["code"] == "model_relay_request_unknown"
        # another page (another channel) cannot answer it
        other = Browser()
        assert (await other.post(rid, "head", {"status": 200, "headers": {}})).status_code == 404
        # the head, then a second head
        assert (await browser.post(rid, "head", {"status": 200, "headers": {"Content-Type": "text/event-stream"}})).status_code == 204
        assert (await browser.post(rid, "head", {"status": 200, "headers": {}})).json()["code"] == "model_relay_out_of_order"
        # (a body without the final [DONE]: the caller reads on until the end)
        frames = sse_tool_call_reply("covel_ping", {"word": "pong"}).replace(b"data: [DONE]\n\n", b"")
        assert (await browser.post(rid, "chunk", raw=frames)).status_code == 204
        assert (await browser.post(rid, "end")).status_code == 204
        # nothing after the end
        assert (await browser.post(rid, "chunk", raw=b"more")).json()["code"] == "model_relay_out_of_order"
        body = await result
    assert body["ok"] is True, body


@pytest.mark.parametrize("head, code", [
    ({"status": 200, "headers": {"Bad Name": "x"}}, "invalid_request"),
    ({"status": 200, "headers": {"X-Split": "a\r\nSet-Cookie: b"}}, "invalid_request"),
    ({"status": 200, "statusText": "OK\n", "headers": {}}, "invalid_request"),
    ({"status": 700, "headers": {}}, "invalid_request"),
    ({"status": 200, "headers": {f"X-{i}": "v" for i in range(101)}}, "invalid_request"),
    ({"status": 200, "headers": {"X-Name": "café"}}, "model_relay_invalid_answer"),
])
async def test_a_malformed_head_is_refused_and_fails_the_request(shared_tier, local_url, head, code):
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        rid = (await browser.request())["id"]
        response = await browser.post(rid, "head", head)
        body = await result
    assert response.status_code == 400 and response.json()["code"] == code, response.content
    assert body["ok"] is False and "Local model relay: the browser's answer was malformed" in body["error"], body


async def test_a_fail_message_must_be_1_to_500_characters(shared_tier, local_url):
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        rid = (await browser.request())["id"]
        for bad in ({"message": ""}, {"message": "x" * 501}, {}):
            response = await browser.post(rid, "fail", bad)
            assert response.status_code == 400 and response.json()["code"] == "invalid_request", bad
        assert (await browser.post(rid, "fail", {"message": "model not found: llama3"})).status_code == 204
        body = await result
    assert body["ok"] is False and body["error"] == "Local model relay: model not found: llama3", body


async def test_an_answer_over_the_limit_is_413_fails_the_request_and_cancels_it(shared_tier, local_url, monkeypatch):
    monkeypatch.setattr(model_relay, "MAX_ANSWER_BYTES", 1000)  # the 64 MiB rule, at a testable size
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        rid = (await browser.request())["id"]
        assert (await browser.post(rid, "head", {"status": 200, "headers": {"Content-Type": "text/event-stream"}})).status_code == 204
        assert (await browser.post(rid, "chunk", raw=b": " + b"x" * 600 + b"\n")).status_code == 204
        response = await browser.post(rid, "chunk", raw=b": " + b"x" * 600 + b"\n")
        cancel = await browser.event()
        body = await result
    assert response.status_code == 413 and response.json()["code"] == "model_relay_too_large"
    assert (cancel.event, cancel.data["id"]) == ("cancel", rid)
    assert body["ok"] is False and "Local model relay: the answer passed" in body["error"], body


async def test_a_stall_after_the_head_times_out(shared_tier, local_url):
    shared_tier.COVEL_MODEL_RELAY_TIMEOUT_SECONDS = 1
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        rid = (await browser.request())["id"]
        assert (await browser.post(rid, "head", {"status": 200, "headers": {"Content-Type": "text/event-stream"}})).status_code == 204
        body = await asyncio.wait_for(result, 15)
        cancel = await browser.event()
    assert body["ok"] is False and body["errorKind"] == "timeout", body
    assert body["error"] == "Local model relay: the browser sent no answer for 1 s"
    assert (cancel.event, cancel.data["id"]) == ("cancel", rid)


async def test_reopening_a_channel_replaces_the_old_stream_and_fails_its_open_requests(shared_tier, local_url):
    first = Browser()
    async with first:
        result = await ping(first.channel, local_url)
        await first.request()
        # when the same page reconnects (a new stream on the same channel)
        async with Browser(first.channel) as second:
            body = await asyncio.wait_for(result, 15)
            for _ in range(100):
                if first.ended:
                    break
                await asyncio.sleep(0.05)
            # then the old stream was closed, its unanswered request failed, and the new one serves
            assert first.ended
            assert body["ok"] is False and "replaced" in body["error"], body
            again = await ping(second.channel, local_url)
            request = await second.request()
            await second.answer(request["id"], sse_tool_call_reply("covel_ping", {"word": "pong"}))
            assert (await again)["ok"] is True


async def test_closing_the_stream_fails_its_open_requests(shared_tier, local_url):
    async with Browser() as browser:
        result = await ping(browser.channel, local_url)
        await browser.request()
    body = await asyncio.wait_for(result, 15)
    assert body["ok"] is False and "relay connection closed" in body["error"], body


# --- who serves it ------------------------------------------------------------------------------------


ROUTES = [("get", STREAM), ("post", "/api/model-relay/requests/r1/head"), ("post", "/api/model-relay/requests/r1/chunk"),
          ("post", "/api/model-relay/requests/r1/end"), ("post", "/api/model-relay/requests/r1/fail")]


@pytest.mark.parametrize("method, path", ROUTES)
def test_the_personal_shape_answers_model_relay_unavailable(client, method, path):
    response = getattr(client, method)(path, HTTP_X_MODEL_RELAY=new_channel())
    assert response.status_code == 404
    assert response.json()["code"] == "model_relay_unavailable"
    assert client.get("/api/health").json()["deployment"]["modelRelay"] is False


@pytest.mark.parametrize("method, path", ROUTES)
@pytest.mark.parametrize("channel", [None, "", "too-short", "x" * 129, "has space" + "x" * 40, "é" * 40])
def test_every_route_requires_a_well_formed_channel(shared_tier, client, method, path, channel):
    headers = {} if channel is None else {"HTTP_X_MODEL_RELAY": channel}
    response = getattr(client, method)(path, **headers)
    assert response.status_code == 400
    assert response.json()["code"] == "model_relay_channel_required"


def test_health_advertises_the_relay_only_where_it_is_served(shared_tier, client):
    assert client.get("/api/health").json()["deployment"]["modelRelay"] is True
    shared_tier.COVEL_MODEL_RELAY = False
    assert client.get("/api/health").json()["deployment"]["modelRelay"] is False
    response = client.post("/api/model-relay/requests/r1/end", HTTP_X_MODEL_RELAY=new_channel())
    assert response.status_code == 404 and response.json()["code"] == "model_relay_unavailable"


async def test_a_process_holds_a_bounded_number_of_channels(shared_tier):
    shared_tier.COVEL_MODEL_RELAY_MAX_CHANNELS = 1
    async with Browser():
        refused = AsgiSse("", [(b"x-model-relay", new_channel().encode())], path=STREAM)
        async with refused:
            pass
    assert refused.status == 503 and json.loads(refused.body)["code"] == "model_relay_busy"
    async with Browser():  # the slot was given back
        pass


async def test_opening_the_stream_is_rate_limited_per_client(shared_tier):
    shared_tier.RATE_LIMIT_RPM = 1
    async with Browser():
        pass
    refused = AsgiSse("", [(b"x-model-relay", new_channel().encode())], path=STREAM)
    async with refused:
        pass
    assert refused.status == 429 and json.loads(refused.body)["code"] == "rate_limit_exceeded"
    assert refused.headers_out.get(b"retry-after")
