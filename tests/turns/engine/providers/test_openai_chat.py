"""The openai provider over real HTTP against a small local fake OpenAI-compatible server."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, TextDelta
from turns.engine.providers.config import ModelRouter, model_config_parse
from turns.engine.providers.openai_chat import OpenAIChatClient


class FakeOpenAI(BaseHTTPRequestHandler):
    script: list = []
    requests: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        mode, frames = FakeOpenAI.script.pop(0)
        if mode == "error":
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"error": {"message": "rate limited"}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for frame in frames:
            if frame == "sleep":
                time.sleep(1.0)
                continue
            self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server():
    FakeOpenAI.script, FakeOpenAI.requests = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def chunk(**delta):
    return {"model": "fake-1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_streams_text_deltas_and_usage(server):
    FakeOpenAI.script.append(("ok", [chunk(content="Hel"), chunk(content="lo"),
                                     {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                                     {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}]))
    client = OpenAIChatClient(base_url=server)
    items = list(client.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}], model="fake-1", api_key="sk-test")))
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Hel", "lo"]
    final = items[-1]
    assert isinstance(final, ModelResponse) and final.text == "Hello" and final.finish_reason == "stop"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (7, 2)
    sent = FakeOpenAI.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test" and sent["body"]["stream"] is True


def test_assembles_streamed_tool_calls(server):
    FakeOpenAI.script.append(("ok", [
        chunk(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get-character", "arguments": "{\"na"}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": "me\":\"Mara\"}"}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]))
    client = OpenAIChatClient(base_url=server)
    tools = [{"name": "get-character", "description": "d", "parameters": {"type": "object"}}]
    final = list(client.stream(ModelRequest(messages=[{"role": "user", "content": "x"}], tools=tools, tool_choice={"name": "get-character"})))[-1]
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [("call_1", "get-character", "{\"name\":\"Mara\"}")]
    assert final.finish_reason == "tool_calls"
    body = FakeOpenAI.requests[0]["body"]
    assert body["tools"][0] == {"type": "function", "function": tools[0]}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get-character"}}


def test_http_error_is_a_provider_error(server):
    FakeOpenAI.script.append(("error", []))
    with pytest.raises(ModelError) as caught:
        list(OpenAIChatClient(base_url=server).stream(ModelRequest(messages=[{"role": "user", "content": "x"}])))
    assert caught.value.code == "provider_error" and caught.value.status == 429 and "rate limited" in caught.value.message


def test_idle_timeout_is_not_retried_even_with_a_fallback_slot(server):
    # given a story slot on the fake server with a 300 ms idle timeout and a scripted fallback
    FakeOpenAI.script.append(("ok", [chunk(content="A"), "sleep", chunk(content="B")]))
    config = model_config_parse(f"""
[covel.story]
provider = "openai"
model = "fake-1"
baseUrl = "{server}"
idleTimeoutMs = 300
fallback = "backup"

[covel.backup]
provider = "scripted"
""")
    router = ModelRouter(config, provider_keys={"openai": "sk-x"})
    # when the stream stalls after the first delta
    with pytest.raises(ModelError) as caught:
        list(router.stream(config.slot("story"), "fake-1", ModelRequest(messages=[{"role": "user", "content": "x"}])))
    # then the call fails with idle_timeout and nothing else is called
    assert caught.value.code == "idle_timeout"
    assert len(FakeOpenAI.requests) == 1


def test_fallback_slot_answers_when_primary_fails_before_streaming(server):
    FakeOpenAI.script.append(("error", []))
    config = model_config_parse(f"""
[covel.story]
provider = "openai"
model = "fake-1"
baseUrl = "{server}"
fallback = "backup"

[covel.backup]
provider = "scripted"
""")
    router = ModelRouter(config)
    request = ModelRequest(messages=[{"role": "user", "content": "x"}], context={"is_story": True, "locale": "en-US", "player_message": "Hi"})
    final = list(router.stream(config.slot("story"), "fake-1", request))[-1]
    assert "Hi" in final.text and request.slot == "backup"


def test_unsendable_request_is_a_provider_error_not_a_crash(server):
    # a non-ASCII API key cannot go in an HTTP header; a broken base URL cannot be addressed
    with pytest.raises(ModelError) as caught:
        list(OpenAIChatClient(base_url=server).stream(
            ModelRequest(messages=[{"role": "user", "content": "x"}], api_key="clé-secrète")))
    assert caught.value.code == "provider_error"
    with pytest.raises(ModelError) as caught:
        list(OpenAIChatClient(base_url="http://[::1").stream(ModelRequest(messages=[{"role": "user", "content": "x"}])))
    assert caught.value.code == "provider_error"


# --- the key rule and the guard (covel.outbound) ----------------------------------------------------

from tests.covel.outbound_support import CANARY, CHAT_PATH, Listener  # noqa: E402
from turns.engine.providers.config import SlotConfig  # noqa: E402


@pytest.fixture
def listener():
    with Listener() as server:
        yield server


def _ask(client, **request):
    return list(client.stream(ModelRequest(messages=[{"role": "user", "content": "x"}], **request)))


def test_router_gives_the_server_key_only_at_a_trusted_origin(monkeypatch, settings):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    router = ModelRouter(model_config_parse('[covel.story]\nprovider = "openai"\nmodel = "m"\n'))

    default = router.key_for(SlotConfig(name="story", provider="openai", model="m"))
    local = router.key_for(SlotConfig(name="story", provider="openai", model="m", base_url="http://127.0.0.1:11434/v1"))
    client_slot = router.key_for(SlotConfig(name="mine", provider="openai", model="m", is_request_supplied=True))

    assert default is not None and default.value == CANARY
    assert local is None and client_slot is None


def test_router_prefers_the_requests_own_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    router = ModelRouter(provider_keys={"openai": "sk-own"})

    key = router.key_for(SlotConfig(name="mine", provider="openai", base_url="http://127.0.0.1:1/v1", is_request_supplied=True))

    assert key is not None and key.value == "sk-own"


def test_request_supplied_endpoint_on_loopback_is_refused_in_a_shared_tier(settings, listener):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OUTBOUND_ALLOW = ()

    with pytest.raises(ModelError) as caught:
        _ask(OpenAIChatClient(base_url=listener.base_url, is_request_supplied=True))

    assert caught.value.code == "model_relay_unavailable" and listener.connections == 0


def test_refused_endpoint_falls_back_like_any_failure_before_streaming(settings, listener):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OUTBOUND_ALLOW = ()
    config = model_config_parse('[covel.backup]\nprovider = "scripted"\n')
    slot = SlotConfig(name="mine", provider="openai", model="m", base_url=listener.base_url, is_request_supplied=True,
                      fallback="backup")
    request = ModelRequest(messages=[{"role": "user", "content": "x"}],
                           context={"is_story": True, "locale": "en-US", "player_message": "Hi"})

    final = list(ModelRouter(config).stream(slot, "m", request))[-1]

    assert request.slot == "backup" and "Hi" in final.text and listener.connections == 0


@pytest.mark.parametrize("route", [
    (200, {"Content-Type": "text/html"}, b"<h1>internal admin</h1>"),
    (404, {"Content-Type": "text/html"}, b"<h1>internal admin</h1>"),
    (500, {"Content-Type": "text/plain"}, b"internal admin"),
    (302, {"Location": "http://169.254.169.254/"}, b""),
])
def test_request_supplied_endpoint_that_is_no_model_api_reads_as_unreachable(listener, route):
    listener.routes[("POST", CHAT_PATH)] = route

    with pytest.raises(ModelError) as caught:
        _ask(OpenAIChatClient(base_url=listener.base_url, is_request_supplied=True))

    assert (caught.value.code, caught.value.message) == ("unreachable", "could not reach the model endpoint")
    assert len(listener.requests) == 1  # the redirect was not followed


def test_request_supplied_model_api_error_keeps_its_status_not_its_body(listener):
    listener.routes[("POST", CHAT_PATH)] = (429, {"Content-Type": "application/json"}, b'{"error": {"message": "slow down, internal-id-7"}}')

    with pytest.raises(ModelError) as caught:
        _ask(OpenAIChatClient(base_url=listener.base_url, is_request_supplied=True))

    assert caught.value.status == 429 and "internal-id-7" not in caught.value.message


def test_operator_endpoint_error_text_never_holds_the_key(listener):
    listener.routes[("POST", CHAT_PATH)] = (401, {"Content-Type": "application/json"},
                                            ('{"error": {"message": "Incorrect API key provided: %s"}}' % CANARY).encode())
    key = ModelRouter(provider_keys={"openai": CANARY}).key_for(SlotConfig(name="s", provider="openai", base_url=listener.base_url))

    with pytest.raises(ModelError) as caught:
        _ask(OpenAIChatClient(base_url=listener.base_url), api_key=key)

    assert listener.authorizations() == [f"Bearer {CANARY}"]
    assert caught.value.status == 401 and "Incorrect API key" in caught.value.message and CANARY not in caught.value.message


def test_an_answer_without_stream_frames_is_not_a_reply(listener):
    listener.routes[("POST", CHAT_PATH)] = (200, {"Content-Type": "application/json"}, b'{"ok": true}')

    with pytest.raises(ModelError) as caught:
        _ask(OpenAIChatClient(base_url=listener.base_url))

    assert caught.value.code == "bad_response"


def test_index_less_tool_call_deltas_are_assembled_by_id():
    # given a host that numbers neither of two calls and splits their arguments over several deltas
    import json as _json

    from tests.covel.outbound_support import Listener
    from turns.engine.providers.base import ModelRequest, ModelResponse
    from turns.engine.providers.openai_chat import OpenAIChatClient

    deltas = [{"id": "a", "type": "function", "function": {"name": "first", "arguments": '{"x"'}},
              {"function": {"arguments": ": 1}"}},
              {"id": "b", "type": "function", "function": {"name": "second", "arguments": "{"}},
              {"function": {"arguments": "}"}}]
    frames = [{"choices": [{"index": 0, "delta": {"tool_calls": [d]}}]} for d in deltas]
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    body = "".join(f"data: {_json.dumps(f)}\n\n" for f in frames).encode() + b"data: [DONE]\n\n"
    with Listener() as host:
        host.routes[("POST", "/v1/chat/completions")] = (200, {"Content-Type": "text/event-stream"}, body)
        client = OpenAIChatClient(base_url=host.base_url)
        # when the reply is streamed
        items = list(client.stream(ModelRequest(messages=[{"role": "user", "content": "go"}], model="m",
                                                tools=[{"name": "first", "description": "", "parameters": {"type": "object"}},
                                                       {"name": "second", "description": "", "parameters": {"type": "object"}}])))
    # then each delta joined the call it belongs to
    [response] = [i for i in items if isinstance(i, ModelResponse)]
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("a", "first", '{"x": 1}'), ("b", "second", "{}")]
