"""World generation's model calls follow the key rule of covel.outbound (spec 004: 服务端环境里的
密钥只发往该服务商的可信同源地址): an llm.toml slot of provider ``openai`` on a local endpoint never
receives the server's key."""
from __future__ import annotations

import json

import pytest

from covel.inprocess import wait_idle
from tests.covel.outbound_support import CANARY, Listener
from tests.turns.test_actions_helpers import sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listener(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    settings.COVEL_HOME = tmp_path / "home"
    with Listener() as server:
        path = tmp_path / "llm.toml"
        path.write_text(f'[covel.story]\nprovider = "openai"\nmodel = "m-world"\nbaseUrl = "{server.base_url}"\n',
                        encoding="utf-8")
        settings.COVEL_LLM_TOML = str(path)
        yield server
        wait_idle(30)


def test_generation_on_a_local_openai_slot_never_sends_the_server_key(client, listener):
    # when a world is generated (the listener's "pong" is no valid part, so the generation fails)
    response = client.post("/api/ai/generate-world", content_type="application/json",
                           data=json.dumps({"concept": "A lighthouse on a frozen sea", "locale": "en-US",
                                            "saveTarget": "return-only"}))
    frames = sse_frames(stream_bytes(response))
    # then the model was asked, never with the server's key, and no frame mentions the key
    assert response.status_code == 200 and frames[-1]["type"] in ("done", "error")
    assert listener.requests and set(listener.authorizations()) == {None}
    assert CANARY not in json.dumps(frames)
