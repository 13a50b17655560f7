"""POST /api/ai/ping, POST /api/ai/models and GET /api/ai/protocols over HTTP (spec 004 AI 生成)."""
from __future__ import annotations

import base64
import json

import pytest

from tests.jobs.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

OPERATOR = "operator-token-123"


@pytest.fixture
def llm_path(settings, tmp_path):
    path = tmp_path / "llm.toml"
    settings.COVEL_LLM_TOML = str(path)
    return path


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def _post(client, path, body, **headers):
    return client.post(path, data=json.dumps(body) if not isinstance(body, str) else body,
                       content_type="application/json", **headers)


def _slot_config(data) -> dict:
    return {"HTTP_X_SLOT_CONFIG": base64.b64encode(json.dumps(data).encode()).decode()}


def _write(llm_path, text):
    llm_path.write_text(text, encoding="utf-8")


# --- ping ------------------------------------------------------------------------------------


def test_ping_default_slot_scripted(client, llm_path):
    response = _post(client, "/api/ai/ping", {})

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["testedTarget"] == {"slot": "story", "provider": "scripted", "model": "", "resolvedVia": "slot"}
    assert body["text"] == "story (scripted/scripted)"
    assert isinstance(body["ttfbMs"], int) and isinstance(body["latencyMs"], int)


def test_ping_preset_on_openai_server(client, llm_path, fake):
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m-1"\nbaseUrl = "{fake.base_url}"\n')

    body = _post(client, "/api/ai/ping", {"presetId": "story"}, HTTP_X_PROVIDER_KEYS=base64.b64encode(b'{"openai":"sk-req"}').decode()).json()

    assert body["ok"] is True
    assert body["testedTarget"] == {"presetId": "story", "provider": "openai", "model": "m-1", "resolvedVia": "direct"}
    assert "ttfbMs" in body
    method, path, headers, sent = fake.requests[0]
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert sent["model"] == "m-1" and sent["stream"] is True
    assert headers["Authorization"] == "Bearer sk-req"


def test_ping_unknown_preset_is_ok_false_without_request(client, llm_path, fake):
    body = _post(client, "/api/ai/ping", {"presetId": "nope"}).json()

    assert body["ok"] is False
    assert body["errorKind"] == "config"
    assert "nope" in body["error"]
    assert fake.requests == []


def test_ping_unconfigured_slot_is_ok_false(client, llm_path):
    _write(llm_path, '[covel.story]\nprovider = "scripted"\n')

    body = _post(client, "/api/ai/ping", {"slot": "utility"}).json()

    assert body["ok"] is False and body["errorKind"] == "config"


def test_ping_default_falls_back_to_any_slot(client, llm_path):
    _write(llm_path, '[covel.fast]\nprovider = "scripted"\n')

    body = _post(client, "/api/ai/ping", {}).json()

    assert body["ok"] is True
    assert body["testedTarget"]["resolvedVia"] == "any"
    assert body["text"].startswith("fast ")


def test_ping_does_not_use_fallback_slot(client, llm_path):
    _write(llm_path, '[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://127.0.0.1:9/v1"\nfallback = "plugin"\n'
                     '[covel.plugin]\nprovider = "scripted"\n')

    body = _post(client, "/api/ai/ping", {"slot": "story"}).json()

    assert body["ok"] is False
    assert body["errorKind"] == "unreachable"
    assert body["testedTarget"]["provider"] == "openai"


def test_ping_model_ref_from_slot_config_header(client, llm_path, fake):
    header = _slot_config({"customPresets": {"mine": {"provider": "openai", "model": "m-2", "baseUrl": fake.base_url}}})

    body = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **header).json()

    assert body["ok"] is True
    assert body["testedTarget"] == {"modelRef": "mine", "provider": "openai", "model": "m-2", "resolvedVia": "direct"}


def test_ping_slot_binding_routes_to_model_ref(client, llm_path, fake):
    header = _slot_config({"customPresets": {"mine": {"provider": "openai", "model": "m-3", "baseUrl": fake.base_url}},
                           "slotBindings": {"story": {"modelRef": "mine"}}})

    body = _post(client, "/api/ai/ping", {"slot": "story"}, **header).json()

    assert body["ok"] is True
    assert body["testedTarget"]["resolvedVia"] == "slot"
    assert body["testedTarget"]["model"] == "m-3"


def test_ping_auth_failure_kind(client, llm_path, fake):
    fake.replies = [{"status": 401}]
    header = _slot_config({"customPresets": {"mine": {"provider": "openai", "model": "m", "baseUrl": fake.base_url}}})

    body = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **header).json()

    assert body["ok"] is False
    assert body["errorKind"] == "auth"
    assert len(fake.requests) == 1  # one request, no retry


@pytest.mark.parametrize("header", ["not base64 !!", base64.b64encode(b"[1]").decode(),
                                    base64.b64encode(b'{"customPresets": {"x": {"provider": "Acme Inc!", "model": "m"}}}').decode(),
                                    base64.b64encode(b'{"slotBindings": {"story": "x"}}').decode()])
def test_ping_invalid_slot_config_header(client, llm_path, fake, header):
    response = _post(client, "/api/ai/ping", {}, HTTP_X_SLOT_CONFIG=header)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_llm_configuration"
    assert fake.requests == []


@pytest.mark.parametrize("body", [{"model": "x"}, {"slot": "story", "presetId": "story"}, {"slot": 3}])
def test_ping_invalid_body(client, llm_path, body):
    response = _post(client, "/api/ai/ping", body)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


def test_ping_malformed_json_and_non_object(client, llm_path):
    malformed = _post(client, "/api/ai/ping", "{nope")
    array = _post(client, "/api/ai/ping", "[]")

    assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_json_body"
    assert array.status_code == 400 and array.json()["code"] == "invalid_request_body"


def test_ping_malformed_provider_keys(client, llm_path):
    response = _post(client, "/api/ai/ping", {}, HTTP_X_PROVIDER_KEYS="%%%")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_provider_keys"


@pytest.mark.parametrize("header", ["[" * 5000 + "]" * 5000, base64.b64encode(b"[" * 5000 + b"]" * 5000).decode(),
                                    '{"openai": "sk-\\u00e9"}', '{"openai": "sk\\nX-Evil: 1"}', '{"openai": "\\ud800"}'])
def test_ping_and_models_refuse_provider_keys_that_cannot_be_sent(client, llm_path, fake, header):
    ping = _post(client, "/api/ai/ping", {}, HTTP_X_PROVIDER_KEYS=header)
    models = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": fake.base_url}, HTTP_X_PROVIDER_KEYS=header)

    assert ping.status_code == 400 and ping.json()["code"] == "invalid_provider_keys"
    assert models.status_code == 400 and models.json()["code"] == "invalid_provider_keys"
    assert fake.requests == []


def test_ping_custom_preset_with_an_unusable_base_url_is_invalid_llm_configuration(client, llm_path, fake):
    header = _slot_config({"customPresets": {"p": {"provider": "openai", "model": "m", "baseUrl": "http://[::1"}}})

    response = _post(client, "/api/ai/ping", {"modelRef": "p"}, **header)

    assert response.status_code == 400 and response.json()["code"] == "invalid_llm_configuration"


# --- protocols / models ---------------------------------------------------------------------


def test_protocols_list_builtin(client):
    response = client.get("/api/ai/protocols")

    assert response.status_code == 200
    assert response.json() == {"protocols": [{"id": "openai-chat-v1", "label": "OpenAI Chat", "output": "text"}]}


def test_models_reads_ids_with_request_key(client, llm_path, fake):
    keys = base64.b64encode(b'{"openai": "sk-req"}').decode()

    body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": fake.base_url}, HTTP_X_PROVIDER_KEYS=keys).json()

    assert body == {"ok": True, "models": ["model-a", "model-b"], "baseUrl": fake.base_url, "protocol": "openai-chat-v1"}
    assert fake.requests[0][2]["Authorization"] == "Bearer sk-req"


def test_models_server_key_only_to_a_trusted_origin(client, llm_path, fake, monkeypatch, settings):
    # given the server key, an llm.toml slot on the fake server and the fake's origin trusted for openai
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (fake.base_url.rsplit("/", 1)[0],)}
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{fake.base_url}"\n')
    client.post("/api/llm-config/reload")
    # when the configured endpoint is read, then the same endpoint named by the request
    trusted = _post(client, "/api/ai/models", {"provider": "openai"}).json()
    request_supplied = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": fake.base_url}).json()
    # then only the operator-configured read carried the server key
    assert trusted["ok"] is True and request_supplied["ok"] is True
    assert fake.requests[0][2].get("Authorization") == "Bearer sk-env"
    assert "Authorization" not in fake.requests[1][2]


def test_models_failure_is_ok_false(client, llm_path, fake):
    # given the operator's endpoint answering 401
    fake.models_status = 401
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{fake.base_url}"\n')

    body = _post(client, "/api/ai/models", {"provider": "openai"}).json()

    assert body["ok"] is False and body["models"] == [] and body["errorKind"] == "auth"


@pytest.mark.parametrize("body", [{"provider": "openai", "extra": 1}, {"provider": "openai", "protocol": "grpc"}, {}])
def test_models_invalid_body(client, llm_path, body):
    response = _post(client, "/api/ai/models", body)

    assert response.status_code == 400


@pytest.mark.parametrize("base_url", ["http://[::1", "http://x:99999", "http://x\ny", "ftp://x", "é://x", "http://"])
def test_models_unusable_base_url_is_400(client, llm_path, base_url):
    response = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": base_url})

    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


def test_models_hosted_needs_operator(client, llm_path, settings):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR

    public = _post(client, "/api/ai/models", {"provider": "scripted"})
    operator = _post(client, "/api/ai/models", {"provider": "scripted"}, HTTP_AUTHORIZATION=f"Bearer {OPERATOR}")

    assert public.status_code == 401 and public.json()["code"] == "operator_token_required"
    assert operator.json() == {"ok": True, "models": ["scripted"], "baseUrl": None, "protocol": "openai-chat-v1"}


# --- keys stay where they belong, and the SSRF guard (covel.outbound) ------------------------------

from tests.covel.outbound_support import (  # noqa: E402
    CANARY, CHAT_PATH, MODELS_PATH, Listener, RawListener, closed_port, redirect_to,
)


@pytest.fixture
def canary(monkeypatch):
    """The server's model key: it must never reach a request-supplied or untrusted origin."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    return CANARY


@pytest.fixture
def listener():
    with Listener() as server:
        yield server


@pytest.fixture
def demo(settings):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR
    settings.COVEL_OUTBOUND_ALLOW = ()
    return {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR}"}


def _keys(data) -> dict:
    return {"HTTP_X_PROVIDER_KEYS": base64.b64encode(json.dumps(data).encode()).decode()}


def _preset(base_url, **extra) -> dict:
    return _slot_config({"customPresets": {"mine": {"provider": "openai", "model": "m", "baseUrl": base_url, **extra}}})


def test_ping_model_ref_never_carries_the_server_key(client, llm_path, canary, listener):
    # when a visitor pings their own preset, without and then with their own key
    without = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(listener.base_url)).json()
    with_key = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(listener.base_url), **_keys({"openai": "sk-visitor"})).json()
    # then the endpoint saw no key, then only the visitor's
    assert without["ok"] is True and with_key["ok"] is True
    assert listener.authorizations() == [None, "Bearer sk-visitor"]


def test_ping_model_ref_to_the_trusted_origin_still_gets_no_server_key(client, llm_path, canary, listener, settings):
    # given the listener trusted for openai (as api.openai.com is by default)
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (listener.origin,)}

    body = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(listener.base_url)).json()

    assert body["ok"] is True and listener.authorizations() == [None]


def test_ping_model_ref_without_base_url_needs_the_visitors_key(client, llm_path, canary):
    body = _post(client, "/api/ai/ping", {"modelRef": "mine"},
                 **_slot_config({"customPresets": {"mine": {"provider": "openai", "model": "m"}}})).json()

    assert body["ok"] is False and body["errorKind"] == "auth"


def test_ping_server_slot_on_an_untrusted_origin_gets_no_server_key(client, llm_path, canary, listener):
    # given an llm.toml slot whose provider is openai but whose endpoint is a local server
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{listener.base_url}"\n')

    body = _post(client, "/api/ai/ping", {"slot": "story"}).json()

    assert body["ok"] is True and listener.authorizations() == [None]


def test_ping_server_slot_on_a_trusted_origin_gets_the_server_key(client, llm_path, canary, listener, settings):
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (listener.origin,)}
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{listener.base_url}"\n')

    body = _post(client, "/api/ai/ping", {"presetId": "story"}).json()

    assert body["ok"] is True and listener.authorizations() == [f"Bearer {CANARY}"]


def test_models_request_base_url_never_carries_the_server_key(client, llm_path, canary, listener, settings):
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (listener.origin,)}

    body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": listener.base_url}).json()

    assert body["ok"] is True and body["models"] == ["model-a", "model-b"]
    assert listener.authorizations() == [None]


def test_models_configured_endpoint_on_an_untrusted_origin_gets_no_server_key(client, llm_path, canary, listener):
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{listener.base_url}"\n')

    body = _post(client, "/api/ai/models", {"provider": "openai"}).json()

    assert body["ok"] is True and listener.authorizations() == [None]


def test_server_key_never_appears_in_a_probe_answer(client, llm_path, canary, listener, settings):
    # given a trusted endpoint that quotes the key it rejects
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (listener.origin,)}
    listener.routes[("POST", CHAT_PATH)] = (401, {"Content-Type": "application/json"},
                                            json.dumps({"error": {"message": f"Incorrect API key provided: {CANARY}"}}).encode())
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{listener.base_url}"\n')

    response = _post(client, "/api/ai/ping", {"slot": "story"})

    assert response.json()["errorKind"] == "auth"
    assert CANARY not in response.content.decode()


SSRF_FORMS = [
    ("http://2130706433:{port}/v1", "target_not_allowed"),
    ("http://0x7f.1:{port}/v1", "target_not_allowed"),
    ("http://127.1:{port}/v1", "target_not_allowed"),
    ("http://0177.0.0.1:{port}/v1", "target_not_allowed"),
    ("http://0.0.0.0:{port}/v1", "target_not_allowed"),
    ("http://[::ffff:127.0.0.1]:{port}/v1", "target_not_allowed"),
    ("http://169.254.169.254/latest", "target_not_allowed"),
    ("http://127.0.0.1:{port}/v1", "model_relay_unavailable"),
    ("http://localhost:{port}/v1", "model_relay_unavailable"),
    ("http://[::1]:{port}/v1", "model_relay_unavailable"),
    ("http://192.168.0.10:{port}/v1", "model_relay_unavailable"),
]


@pytest.mark.parametrize("template, code", SSRF_FORMS)
def test_shared_tier_refuses_local_targets_before_connecting(client, llm_path, canary, listener, demo, template, code):
    # given a demo server and a target on loopback, the LAN or a special address
    base_url = template.format(port=listener.port)
    # when a visitor lists its models and pings it
    models = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": base_url}, **demo)
    ping = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(base_url))
    # then both are refused with the rule's code, and the listener saw no connection at all
    assert models.status_code == 200 and ping.status_code == 200
    assert models.json() == {"ok": False, "models": [], "baseUrl": base_url, "protocol": "openai-chat-v1",
                             "error": models.json()["error"], "errorKind": "config", "code": code}
    assert ping.json()["ok"] is False and ping.json()["errorKind"] == "config" and ping.json()["code"] == code
    assert listener.connections == 0


def test_shared_tier_answers_open_and_closed_ports_alike(client, llm_path, listener, demo):
    answers = []
    for port in (listener.port, closed_port()):
        base_url = f"http://127.0.0.1:{port}/v1"
        models = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": base_url}, **demo).json()
        ping = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(base_url)).json()
        answers.append(({k: v for k, v in models.items() if k != "baseUrl"}, {k: v for k, v in ping.items() if k != "latencyMs"}))

    assert answers[0] == answers[1]
    assert listener.connections == 0


def test_personal_shape_answers_closed_silent_and_non_model_ports_alike(client, llm_path, listener):
    # given, on the player's own machine: a closed port, a non-HTTP service, and an HTTP service that
    # is not a model API (its body must not be echoed)
    listener.routes[("GET", MODELS_PATH)] = (200, {"Content-Type": "application/json"}, b'{"internal": "secret-config"}')
    listener.routes[("POST", CHAT_PATH)] = (200, {"Content-Type": "text/html"}, b"<h1>secret-admin-page</h1>")
    with RawListener() as raw:
        ports = (closed_port(), raw.port, listener.port)
        answers = []
        for port in ports:
            base_url = f"http://127.0.0.1:{port}/v1"
            models = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": base_url})
            ping = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **_preset(base_url))
            assert "secret" not in models.content.decode() + ping.content.decode()
            answers.append(({k: v for k, v in models.json().items() if k != "baseUrl"},
                            {k: v for k, v in ping.json().items() if k != "latencyMs"}))
    # then all three read the same
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0] == {"ok": False, "models": [], "protocol": "openai-chat-v1",
                             "error": "could not reach the model endpoint", "errorKind": "unreachable"}
    assert answers[0][1]["errorKind"] == "unreachable" and answers[0][1]["error"] == "could not reach the model endpoint"


def test_models_request_supplied_auth_failure_of_a_model_api(client, llm_path, listener):
    listener.routes[("GET", MODELS_PATH)] = (401, {"Content-Type": "application/json"}, b'{"error": {"message": "bad key sk-1"}}')

    body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": listener.base_url}).json()

    assert body["ok"] is False and body["errorKind"] == "auth" and "sk-1" not in body["error"]


def test_models_redirect_to_a_private_address_is_refused(client, llm_path, canary, listener, settings, demo):
    # given a demo server whose operator allows the listener, which redirects to cloud metadata,
    # then to a loopback address the allow-list does not cover
    settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1/32",)
    for target, code in (("http://169.254.169.254/latest/meta-data", "target_not_allowed"),
                         (f"http://[::1]:{listener.port}/v1/models", "model_relay_unavailable")):
        listener.routes[("GET", MODELS_PATH)] = redirect_to(target)

        body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": listener.base_url}, **demo).json()

        assert body["ok"] is False and body["errorKind"] == "config" and body["code"] == code
    assert listener.connections == 2  # the first hop of each read only


def test_models_follows_a_redirect_within_limits(client, llm_path, listener):
    listener.routes[("GET", "/old/models")] = redirect_to(f"{listener.base_url}/models")

    body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": f"{listener.origin}/old"}).json()

    assert body["ok"] is True and body["models"] == ["model-a", "model-b"]


@pytest.mark.parametrize("header, code", [
    ("HTTP_X_SLOT_CONFIG", "invalid_llm_configuration"),
    ("HTTP_X_PROVIDER_KEYS", "invalid_provider_keys"),
])
@pytest.mark.parametrize("value", ["é" + base64.b64encode(b'{"openai": "k"}').decode(), '{"customPresets": {"é": {}}}',
                                   '{"openai": "k\u4e2d"}', "\u4e2d\u6587"])
def test_non_ascii_routing_headers_are_400(client, llm_path, listener, header, code, value):
    ping = _post(client, "/api/ai/ping", {"modelRef": "mine"}, **{header: value})

    assert ping.status_code == 400 and ping.json()["code"] == code and isinstance(ping.json()["error"], str)
    if header == "HTTP_X_PROVIDER_KEYS":  # /api/ai/models reads no X-Slot-Config
        models = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": listener.base_url}, **{header: value})
        assert models.status_code == 400 and models.json()["code"] == code
    assert listener.requests == []


# --- the tool round-trip of a ping (issue: ping said ok for servers that cannot do tools) ---------


def _ping_slot(client, llm_path, fake):
    _write(llm_path, f'[covel.story]\nprovider = "ollama"\nmodel = "m"\nbaseUrl = "{fake.base_url}"\n')
    return _post(client, "/api/ai/ping", {"slot": "story"}).json()


def test_ping_asks_for_one_tool_call_and_passes_when_it_round_trips(client, llm_path, fake):
    body = _ping_slot(client, llm_path, fake)
    assert body["ok"] is True, body
    [(_, _, _, sent)] = [r for r in fake.requests if r[0] == "POST"]  # one request, as the spec says
    assert [t["function"]["name"] for t in sent["tools"]] == ["covel_ping"]


def test_ping_reports_tools_unsupported_when_the_server_answers_in_prose(client, llm_path, fake):
    fake.ignores_tools = True
    body = _ping_slot(client, llm_path, fake)
    assert body["ok"] is False and body["errorKind"] == "tools_unsupported"


def test_ping_reports_tools_unsupported_when_the_server_refuses_tools(client, llm_path, fake):
    fake.replies = [{"status": 500, "message": "tools param requires --jinja flag"}]
    body = _ping_slot(client, llm_path, fake)
    assert body["ok"] is False and body["errorKind"] == "tools_unsupported", body
