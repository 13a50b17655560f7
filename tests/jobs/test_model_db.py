"""The model database over HTTP (spec 004 §模型数据库（Model DB）): info, search, lookup with its match
explanation, and refresh from a local stand-in for LiteLLM's model list."""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings

from tests.sessions.support import OPERATOR_TOKEN

pytestmark = pytest.mark.django_db

UPSTREAM = {
    "sample_spec": {"max_input_tokens": "max input tokens"},
    "house-model": {"litellm_provider": "house", "mode": "chat", "max_input_tokens": 65536, "max_output_tokens": 4096,
                    "input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06, "supports_function_calling": True},
    "house-embed": {"litellm_provider": "house", "mode": "embedding", "max_input_tokens": 8192},
}


@pytest.fixture
def home(tmp_path, settings):
    settings.COVEL_HOME = tmp_path / "home"
    return settings.COVEL_HOME


@pytest.fixture
def upstream():
    """A loopback HTTP server answering GET with ``state["body"]`` (bytes) and ``state["status"]``."""
    state = {"body": json.dumps(UPSTREAM).encode(), "status": 200, "requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["requests"] += 1
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state["body"])))
            self.end_headers()
            self.wfile.write(state["body"])

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/model_prices_and_context_window.json"
    yield state
    server.shutdown()
    server.server_close()


def test_the_bundled_snapshot_answers_info_and_search(client, home):
    info = client.get("/api/model-db").json()
    assert info["source"] == "bundled" and info["count"] > 1000 and "openai" in info["providers"]
    items = client.get("/api/model-db/search?q=gpt-4o mini&limit=3").json()["items"]
    assert items[0]["id"] == "gpt-4o-mini" and items[0]["provider"] == "openai"
    assert items[0]["capability"]["tools"] is True and items[0]["capability"]["contextWindow"] == 128000
    assert client.get("/api/model-db/search?q=x&limit=0").json()["code"] == "invalid_query"


@pytest.mark.parametrize("query,matched,kind,pricing_kind", [
    ("model=gpt-4o-mini", "gpt-4o-mini", "exact", "direct"),
    ("model=deepseek-chat&provider=deepseek", "deepseek-chat", "exact", "direct"),
    ("model=deepseek/deepseek-chat", "deepseek/deepseek-chat", "exact", "direct"),
    ("model=my-proxy/gpt-4o-mini", "gpt-4o-mini", "unprefixed", "direct"),
    ("model=gpt-4o-mini-2099-01-01", "gpt-4o-mini", "normalized", "direct"),
])
def test_lookup_explains_how_the_capability_was_matched(client, home, query, matched, kind, pricing_kind):
    found = client.get(f"/api/model-db/lookup?{query}").json()
    assert (found["matchedModelId"], found["matchKind"], found["source"], found["pricingKind"]) == \
        (matched, kind, "model-database", pricing_kind)
    assert found["model"] == query.split("&")[0].split("=", 1)[1]  # the id itself is never rewritten
    assert set(found["capability"]["pricing"]) == {"inputPerMToken", "outputPerMToken"}


def test_lookup_of_unknown_and_own_models(client, home):
    unknown = client.get("/api/model-db/lookup?model=totally-local-llm&protocol=openai-chat-v1").json()
    assert (unknown["source"], unknown["matchKind"], unknown["matchedModelId"]) == ("protocol-default", "none", None)
    assert unknown["capability"]["tools"] is True and "pricing" not in unknown["capability"]
    scripted = client.get("/api/model-db/lookup?model=scripted").json()
    assert scripted["source"] == "known" and scripted["capability"]["contextWindow"] == 32768
    assert client.get("/api/model-db/lookup?model=%20").json()["code"] == "invalid_query"


def test_refresh_replaces_the_snapshot_with_the_upstream_list(client, home, upstream):
    with override_settings(COVEL_MODEL_DB_URL=upstream["url"]):
        refreshed = client.post("/api/model-db/refresh")
    assert refreshed.status_code == 200 and refreshed.json() == {"ok": True, "count": 1, "persisted": True}
    assert (home / "cache" / "model_db.json.gz").is_file()
    assert client.get("/api/model-db").json()["source"] == "cache"
    found = client.get("/api/model-db/lookup?model=house-model").json()
    assert found["capability"] == {"contextWindow": 65536, "maxOutputTokens": 4096, "tools": True, "toolChoice": False,
                                   "vision": False, "reasoning": None,
                                   "pricing": {"inputPerMToken": 1.0, "outputPerMToken": 2.0}}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("status,body", [(500, b"{}"), (200, b"<html>not json</html>"), (200, b'{"x": 1}')])
def test_a_failed_refresh_is_502_and_keeps_the_data_in_effect(client, home, upstream, status, body):
    upstream.update(status=status, body=body)
    with override_settings(COVEL_MODEL_DB_URL=upstream["url"]):
        response = client.post("/api/model-db/refresh")
    assert response.status_code == 502 and response.json()["code"] == "model_db_refresh_failed"
    assert upstream["requests"] == 1 and not (home / "cache" / "model_db.json.gz").exists()
    assert client.get("/api/model-db").json()["source"] == "bundled"


def test_an_unreachable_source_is_502(client, home):
    with override_settings(COVEL_MODEL_DB_URL=f"http://127.0.0.1:{_closed_port()}/models.json"):
        response = client.post("/api/model-db/refresh")
    assert response.status_code == 502 and response.json()["code"] == "model_db_refresh_failed"


def test_hosted_tiers_need_the_operator_token_to_refresh(client, home, upstream):
    with override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN, COVEL_MODEL_DB_URL=upstream["url"]):
        refused = client.post("/api/model-db/refresh")
        allowed = client.post("/api/model-db/refresh", HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}")
    assert refused.status_code == 401 and refused.json()["code"] == "operator_token_required"
    assert upstream["requests"] == 1 and allowed.status_code == 200
