"""Configuration endpoints over HTTP (spec 004 "Personal configuration API", 配置信息): llm-config,
reload, presets, provider-keys, config/info and llm.toml as text (config/raw)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

OPERATOR = "operator-token-123"
VALID_TOML = """\
[covel.story]
provider = "openai"
model = "gpt-4o-mini"
baseUrl = "http://127.0.0.1:9/v1"
tag = "main"
fallback = "plugin"

[covel.plugin]
provider = "scripted"
"""


@pytest.fixture
def llm_path(settings, tmp_path) -> Path:
    """A fresh llm.toml location per test (the configuration in effect is kept per path)."""
    path = tmp_path / "llm.toml"
    settings.COVEL_LLM_TOML = str(path)
    return path


@pytest.fixture
def hosted(settings):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR


def _put(client, path, body, **headers):
    return client.put(path, data=json.dumps(body), content_type="application/json", **headers)


def _bearer(token=OPERATOR):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


# --- GET /api/llm-config ------------------------------------------------------------------


def test_llm_config_without_file_is_builtin_scripted(client, llm_path):
    response = client.get("/api/llm-config")

    assert response.status_code == 200
    body = response.json()
    assert sorted(body["slots"]) == ["memory", "plugin", "story"]
    assert body["slots"]["story"] == {"id": "story", "provider": "scripted", "model": "", "protocol": "openai-chat-v1",
                                      "serverKeyConfigured": True}
    assert body["source"] == {"kind": "builtin", "path": str(llm_path)}
    assert body["envKeyOverrides"] == []
    assert "error" not in body
    assert set(body["providers"]) == {"scripted", "openai"}


def test_llm_config_reads_slots_from_file(client, llm_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm_path.write_text(VALID_TOML, encoding="utf-8")

    body = client.get("/api/llm-config").json()

    assert body["source"] == {"kind": "file", "path": str(llm_path)}
    assert body["slots"]["story"] == {"id": "story", "provider": "openai", "model": "gpt-4o-mini", "protocol": "openai-chat-v1",
                                      "serverKeyConfigured": False, "tag": "main", "fallback": "plugin",
                                      "baseUrl": "http://127.0.0.1:9/v1"}
    assert sorted(body["slots"]) == ["plugin", "story"]


def test_llm_config_reports_server_key_from_environment(client, llm_path, monkeypatch, settings):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
    llm_path.write_text(VALID_TOML, encoding="utf-8")
    # the slot's endpoint (a loopback server) is not OpenAI's: the server key would not be sent there
    untrusted = client.get("/api/llm-config")
    settings.COVEL_PROVIDER_ORIGINS = {"openai": ("http://127.0.0.1:9",)}
    trusted = client.get("/api/llm-config")

    assert untrusted.json()["slots"]["story"]["serverKeyConfigured"] is False
    assert trusted.json()["slots"]["story"]["serverKeyConfigured"] is True
    assert b"sk-never-shown" not in untrusted.content + trusted.content


def test_llm_config_invalid_file_falls_back_with_error(client, llm_path):
    llm_path.write_text("[covel.story\nprovider=", encoding="utf-8")

    body = client.get("/api/llm-config").json()

    assert body["source"]["kind"] == "builtin"
    assert body["error"].startswith("llm.toml is not valid TOML")
    assert body["slots"]["story"]["provider"] == "scripted"


def test_llm_config_hosted_public_hides_private_fields(client, llm_path, hosted):
    llm_path.write_text("[covel.story\n", encoding="utf-8")
    client.get("/api/llm-config", **_bearer())  # load once (with the error) as operator
    llm_path.write_text(VALID_TOML, encoding="utf-8")
    assert client.post("/api/llm-config/reload", **_bearer()).json()["ok"] is True

    public = client.get("/api/llm-config").json()
    operator = client.get("/api/llm-config", **_bearer()).json()

    assert "source" not in public and "envKeyOverrides" not in public and "error" not in public
    assert "baseUrl" not in public["slots"]["story"]
    assert public["slots"]["story"]["model"] == "gpt-4o-mini"
    assert operator["slots"]["story"]["baseUrl"] == "http://127.0.0.1:9/v1"
    assert operator["source"]["kind"] == "file"


# --- POST /api/llm-config/reload ------------------------------------------------------------


def test_reload_applies_valid_file(client, llm_path):
    assert client.get("/api/llm-config").json()["source"]["kind"] == "builtin"
    llm_path.write_text(VALID_TOML, encoding="utf-8")

    response = client.post("/api/llm-config/reload")

    assert response.status_code == 200
    assert response.json()["ok"] is True
    assert sorted(response.json()["slots"]) == ["plugin", "story"]
    assert client.get("/api/llm-config").json()["slots"]["story"]["provider"] == "openai"


def test_reload_invalid_toml_keeps_current_config(client, llm_path):
    llm_path.write_text(VALID_TOML, encoding="utf-8")
    assert client.post("/api/llm-config/reload").json()["ok"] is True
    llm_path.write_text('[covel.story]\nprovider = "No Pe!"\n', encoding="utf-8")

    response = client.post("/api/llm-config/reload")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False
    assert "provider 'No Pe!'" in body["error"]
    assert body["slots"]["story"]["provider"] == "openai"
    assert client.get("/api/llm-config").json()["slots"]["story"]["provider"] == "openai"


def test_reload_requires_operator_in_hosted_tier(client, llm_path, hosted):
    response = client.post("/api/llm-config/reload")

    assert response.status_code == 401
    assert response.json()["code"] == "operator_token_required"


# --- GET /api/presets -------------------------------------------------------------------------


def test_presets_list_slots_and_hide_base_url_for_hosted_public(client, llm_path, settings):
    llm_path.write_text(VALID_TOML, encoding="utf-8")
    client.post("/api/llm-config/reload")

    self_items = client.get("/api/presets").json()["items"]
    settings.DEPLOYMENT_TIER = "commercial"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR
    public_items = client.get("/api/presets").json()["items"]
    operator_items = client.get("/api/presets", **_bearer()).json()["items"]

    assert [i["id"] for i in self_items] == ["story", "plugin"]
    assert self_items[0]["baseUrl"] == "http://127.0.0.1:9/v1"
    assert "baseUrl" not in public_items[0]
    assert operator_items[0]["baseUrl"] == "http://127.0.0.1:9/v1"


# --- GET /api/provider-keys -----------------------------------------------------------------


def test_provider_keys_report_configured_providers_only(client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-1")
    monkeypatch.setenv("OPEN_ROUTER_API_KEY", "sk-secret-value-2")
    monkeypatch.setenv("EMPTY_API_KEY", "  ")

    response = client.get("/api/provider-keys")

    assert response.status_code == 200
    providers = response.json()["providers"]
    assert providers["openai"] == {"configured": True}
    assert providers["open-router"] == {"configured": True}
    assert "empty" not in providers
    assert b"sk-secret-value" not in response.content
    assert set(response.json()) == {"providers"}


def test_provider_keys_need_operator_in_hosted_tier(client, hosted, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-1")

    public = client.get("/api/provider-keys")
    operator = client.get("/api/provider-keys", **_bearer())

    assert public.status_code == 401
    assert public.json()["code"] == "operator_token_required"
    assert operator.status_code == 200
    assert operator.json()["providers"]["openai"] == {"configured": True}
    assert b"sk-secret-value-1" not in operator.content


# --- GET /api/config/info -------------------------------------------------------------------


def test_config_info_self_tier_shows_paths(client, settings):
    body = client.get("/api/config/info").json()

    assert body["isDesktop"] is False
    assert body["requiresAuth"] is False
    assert body["covelHome"] == str(settings.COVEL_HOME)
    assert body["worldsDir"] == str(Path(settings.COVEL_HOME) / "worlds")
    assert body["storeBackend"] == settings.STORE_BACKEND


def test_config_info_hosted_public_nulls_paths(client, hosted, settings):
    public = client.get("/api/config/info").json()
    operator = client.get("/api/config/info", **_bearer()).json()

    assert public["isDesktop"] is False and public["requiresAuth"] is True
    assert public["covelHome"] is None and public["dataRoot"] is None and public["llmConfigPath"] is None
    assert operator["requiresAuth"] is True
    assert operator["covelHome"] == str(settings.COVEL_HOME)


# --- /api/config/raw ---------------------------------------------------------------------------


def test_raw_list_names_llm_toml_only(client, llm_path):
    body = client.get("/api/config/raw").json()

    assert body == {"items": [{"name": "llm.toml", "path": str(llm_path), "exists": False, "applies": "reload"}]}


def test_raw_get_missing_file_gives_starter_with_empty_digest(client, llm_path):
    import hashlib

    body = client.get("/api/config/raw/llm.toml").json()

    assert body["exists"] is False
    assert body["digest"] == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert "[covel.story]" in body["content"]
    assert body["applies"] == "reload"


def test_raw_put_saves_backs_up_and_reloads(client, llm_path):
    llm_path.write_text('[covel.story]\nprovider = "scripted"\n', encoding="utf-8")
    first = client.get("/api/config/raw/llm.toml").json()

    response = _put(client, "/api/config/raw/llm.toml", {"content": VALID_TOML, "baseDigest": first["digest"]})

    assert response.status_code == 200
    body = response.json()
    assert llm_path.read_text(encoding="utf-8") == VALID_TOML
    assert Path(body["backup"]).read_text(encoding="utf-8") == '[covel.story]\nprovider = "scripted"\n'
    assert body["backup"] == str(llm_path) + ".bak"
    assert body["reload"]["ok"] is True
    assert body["content"] == VALID_TOML and body["exists"] is True and body["digest"] != first["digest"]
    assert client.get("/api/llm-config").json()["slots"]["story"]["provider"] == "openai"


def test_raw_put_creates_missing_file_without_backup(client, llm_path):
    digest = client.get("/api/config/raw/llm.toml").json()["digest"]

    body = _put(client, "/api/config/raw/llm.toml", {"content": VALID_TOML, "baseDigest": digest}).json()

    assert body["backup"] is None
    assert llm_path.read_text(encoding="utf-8") == VALID_TOML


def test_raw_put_stale_digest_is_conflict(client, llm_path):
    llm_path.write_text('[covel.story]\nprovider = "scripted"\n', encoding="utf-8")
    digest = client.get("/api/config/raw/llm.toml").json()["digest"]
    llm_path.write_text('[covel.plugin]\nprovider = "scripted"\n', encoding="utf-8")

    response = _put(client, "/api/config/raw/llm.toml", {"content": VALID_TOML, "baseDigest": digest})

    assert response.status_code == 409
    assert response.json()["code"] == "config_file_changed"
    assert llm_path.read_text(encoding="utf-8") == '[covel.plugin]\nprovider = "scripted"\n'
    assert not Path(str(llm_path) + ".bak").exists()


def test_raw_put_invalid_toml_writes_nothing(client, llm_path):
    llm_path.write_text('[covel.story]\nprovider = "scripted"\n', encoding="utf-8")
    digest = client.get("/api/config/raw/llm.toml").json()["digest"]

    response = _put(client, "/api/config/raw/llm.toml", {"content": "[covel.story\n", "baseDigest": digest})

    assert response.status_code == 400
    assert response.json()["code"] == "config_file_invalid"
    assert "not valid TOML" in response.json()["error"]
    assert llm_path.read_text(encoding="utf-8") == '[covel.story]\nprovider = "scripted"\n'


@pytest.mark.parametrize("content, fragment", [
    ("a = " + "[" * 3000 + "]" * 3000, "nested too deeply"),
    ('[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://[::1"\n', "baseUrl"),
    ('[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://x:99999"\n', "baseUrl"),
    ('[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = 5\n', "baseUrl"),
])
def test_raw_put_unusable_llm_toml_is_400_and_writes_nothing(client, llm_path, content, fragment):
    llm_path.write_text('[covel.story]\nprovider = "scripted"\n', encoding="utf-8")
    digest = client.get("/api/config/raw/llm.toml").json()["digest"]

    response = _put(client, "/api/config/raw/llm.toml", {"content": content, "baseDigest": digest})

    assert response.status_code == 400
    assert response.json()["code"] == "config_file_invalid" and fragment in response.json()["error"]
    assert llm_path.read_text(encoding="utf-8") == '[covel.story]\nprovider = "scripted"\n'
    assert client.post("/api/ai/ping", data="{}", content_type="application/json").json()["ok"] is True


@pytest.mark.parametrize("body", [{"content": 1, "baseDigest": "x"}, {"content": "x"}, {}])
def test_raw_put_non_string_fields_are_rejected(client, llm_path, body):
    response = _put(client, "/api/config/raw/llm.toml", body)

    assert response.status_code == 400
    assert response.json()["code"] == "config_file_request_invalid"


def test_raw_put_too_large(client, llm_path):
    content = "# " + "x" * (256 * 1024) + "\n"

    response = _put(client, "/api/config/raw/llm.toml", {"content": content, "baseDigest": "sha256:x"})

    assert response.status_code == 413
    assert response.json()["code"] == "config_file_too_large"
    assert not llm_path.exists()


@pytest.mark.parametrize("method", ["get", "put"])
def test_raw_unknown_name_is_404(client, llm_path, method):
    if method == "get":
        response = client.get("/api/config/raw/keys.env")
    else:
        response = _put(client, "/api/config/raw/keys.env", {"content": "", "baseDigest": ""})

    assert response.status_code == 404
    assert response.json()["code"] == "config_file_unknown"


def test_raw_gate_hosted_needs_operator(client, llm_path, hosted):
    public = client.get("/api/config/raw")
    operator = client.get("/api/config/raw", **_bearer())

    assert public.status_code == 401 and public.json()["code"] == "operator_token_required"
    assert operator.status_code == 200


def test_raw_gate_self_tier_with_desktop_token(client, llm_path, settings):
    settings.COVEL_OPERATOR_TOKEN = OPERATOR

    without = client.get("/api/config/raw/llm.toml")
    wrong = client.get("/api/config/raw/llm.toml", **_bearer("nope"))
    right = client.get("/api/config/raw/llm.toml", **_bearer())

    assert without.status_code == 401 and wrong.status_code == 401
    assert right.status_code == 200


def test_raw_gate_disabled_install_api(client, llm_path, settings):
    settings.COVEL_INSTALL_API_ENABLED = False

    response = client.get("/api/config/raw")

    assert response.status_code == 403
    assert response.json()["code"] == "install_api_disabled"
