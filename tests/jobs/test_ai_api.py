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
                                    base64.b64encode(b'{"customPresets": {"x": {"provider": "acme", "model": "m"}}}').decode(),
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


def test_models_env_key_only_to_configured_origin(client, llm_path, fake, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    _write(llm_path, f'[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "{fake.base_url}"\n')
    client.post("/api/llm-config/reload")

    trusted = _post(client, "/api/ai/models", {"provider": "openai"}).json()
    other_origin = fake.base_url.replace("127.0.0.1", "localhost")
    untrusted = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": other_origin}).json()

    assert trusted["ok"] is True and untrusted["ok"] is True
    assert fake.requests[0][2].get("Authorization") == "Bearer sk-env"
    assert "Authorization" not in fake.requests[1][2]


def test_models_failure_is_ok_false(client, llm_path, fake):
    fake.models_status = 401

    body = _post(client, "/api/ai/models", {"provider": "openai", "baseUrl": fake.base_url}).json()

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
