"""X-Provider-Keys on POST /api/actions (spec 004 §请求头（可选）): the keys reach the model provider
and are never stored in the database (turns.control). The provider is the real `openai` client
talking HTTP to a small local fake OpenAI-compatible server."""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.apps import apps

from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns import control
from turns.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-covel-test-9f2c71d0e4"


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers every chat completion with a short streamed narration; records the auth header."""

    seen_auth: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        FakeOpenAI.seen_auth.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ("The fog ", "parts."):
            chunk = {"model": "fake-1", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        done = {"model": "fake-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def openai_slots(tmp_path, settings, monkeypatch):
    """llm.toml whose story and plugin slots are the fake server (no key in the environment)."""
    FakeOpenAI.seen_auth = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    path = tmp_path / "llm.toml"
    path.write_text("".join(
        f'[covel.{slot}]\nprovider = "openai"\nmodel = "fake-1"\nbaseUrl = "{base_url}"\n\n' for slot in ("story", "plugin")
    ), encoding="utf-8")
    settings.COVEL_LLM_TOML = str(path)
    monkeypatch.setenv("COVEL_LLM_TOML", str(path))  # for a worker process started afterwards
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield base_url
    httpd.shutdown()


def _keys_header(keys: dict) -> str:
    return base64.b64encode(json.dumps(keys).encode()).decode()


def _post_with_keys(client, body, header: str):
    return client.post("/api/actions", data=json.dumps(body), content_type="application/json",
                       HTTP_X_PROVIDER_KEYS=header)


def _rows_containing(text: str) -> list[str]:
    """Every database row (all apps) whose serialized values contain ``text``."""
    hits = []
    for model in apps.get_models():
        for row in model.objects.values():
            if text in json.dumps(row, default=str, ensure_ascii=False):
                hits.append(f"{model._meta.label}:{row.get('id')}")
    return hits


def test_provider_keys_reach_the_provider_and_no_row_holds_them(api, openai_slots):
    # given
    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, request_id="req-keys", actions=[{"kind": "say", "text": "I wait."}])
    # when
    frames = stream_read(_post_with_keys(api, body, _keys_header({"openai": SECRET})))
    # then the model call carried the request's key
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    assert FakeOpenAI.seen_auth and set(FakeOpenAI.seen_auth) == {f"Bearer {SECRET}"}
    # and nothing in the database, nor the stream, holds it; the worker took it on claim
    assert _rows_containing(SECRET) == []
    assert SECRET not in json.dumps(frames)
    execution = Execution.objects.get(request_id="req-keys")
    assert control.provider_keys_take(str(execution.id)) is None


def test_without_keys_the_provider_call_has_no_request_key(api, openai_slots, monkeypatch, settings):
    # given a server-side key in the environment, the fake's origin trusted for it, and no header
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-side")
    origin = openai_slots.rsplit("/v1", 1)[0]
    settings.COVEL_PROVIDER_ORIGINS = {**settings.COVEL_PROVIDER_ORIGINS, "openai": (origin,)}
    session = session_make(characters=[("hero", "Hero", "player")])
    # when
    frames = stream_read(post_action(api, action_body(session.id, request_id="req-env")))
    # then the server's own key was used
    assert frames[-1]["payload"]["committed"] is True
    assert set(FakeOpenAI.seen_auth) == {"Bearer sk-server-side"}


@pytest.mark.parametrize("header", ["%%%not-base64", _keys_header(["openai"]), _keys_header({"openai": 42})])
def test_malformed_provider_keys_are_400_and_write_nothing(api, header):
    session = session_make(characters=[("hero", "Hero", "player")])
    response = _post_with_keys(api, action_body(session.id, request_id="req-bad"), header)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_provider_keys"
    assert not Execution.objects.filter(session=session).exists()


def test_kept_keys_expire_and_are_taken_once(settings):
    # given the embedded holder (in-process worker)
    settings.COVEL_INPROCESS_WORKER = True
    control.provider_keys_put("exec-short", {"openai": SECRET}, ttl_seconds=0.05)
    control.provider_keys_put("exec-long", {"openai": SECRET})
    # when
    import time

    time.sleep(0.1)
    # then
    assert control.provider_keys_take("exec-short") is None
    assert control.provider_keys_take("exec-long") == {"openai": SECRET}
    assert control.provider_keys_take("exec-long") is None


@pytest.mark.hosted_only
def test_hosted_holder_encrypts_keys_in_redis(settings):
    # given the hosted holder (separate workers)
    import redis

    settings.COVEL_INPROCESS_WORKER = False
    client = redis.Redis.from_url(settings.REDIS_URL)
    # when
    control.provider_keys_put("exec-redis", {"openai": SECRET}, ttl_seconds=30)
    stored = client.get("covel:provider-keys:exec-redis")
    ttl = client.ttl("covel:provider-keys:exec-redis")
    taken = control.provider_keys_take("exec-redis")
    # then
    assert stored is not None and SECRET.encode() not in stored
    assert 0 < ttl <= 30
    assert taken == {"openai": SECRET}
    assert client.exists("covel:provider-keys:exec-redis") == 0
