"""Keys stay where they belong in a turn (covel.outbound; spec 004: 服务端环境里的密钥只发往该服务商的
可信同源地址): POST /api/actions with llm.toml slots of provider ``openai`` whose ``baseUrl`` is a
local server — a real loopback listener that records every Authorization header."""
from __future__ import annotations

import base64
import json

import pytest

from tests.covel.outbound_support import CANARY, Listener
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def local_slots(tmp_path, settings, monkeypatch):
    """llm.toml whose story and plugin slots are the listener; the server's key is the canary."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    with Listener() as listener:
        path = tmp_path / "llm.toml"
        path.write_text("".join(
            f'[covel.{slot}]\nprovider = "openai"\nmodel = "local-1"\nbaseUrl = "{listener.base_url}"\n\n'
            for slot in ("story", "plugin")), encoding="utf-8")
        settings.COVEL_LLM_TOML = str(path)
        yield listener


def test_turn_on_a_local_openai_slot_never_sends_the_server_key(api, local_slots):
    # given a session on slots whose endpoint is not OpenAI's origin
    session = session_make(characters=[("hero", "Hero", "player")])
    # when a turn runs without X-Provider-Keys
    frames = stream_read(post_action(api, action_body(session.id, request_id="req-canary")))
    # then the model calls happened, none with the server's key, and no frame mentions it
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    assert local_slots.requests and set(local_slots.authorizations()) == {None}
    assert CANARY not in json.dumps(frames)


def test_turn_sends_the_server_key_to_an_origin_the_operator_trusts(api, local_slots, settings):
    # given the operator names the local endpoint as an openai origin (e.g. a gateway that needs it)
    settings.COVEL_PROVIDER_ORIGINS = {"openai": (local_slots.origin,)}
    session = session_make(characters=[("hero", "Hero", "player")])

    frames = stream_read(post_action(api, action_body(session.id, request_id="req-trusted")))

    assert frames[-1]["payload"]["committed"] is True
    assert set(local_slots.authorizations()) == {f"Bearer {CANARY}"}


def test_turn_sends_the_players_own_key_to_the_configured_endpoint(api, local_slots):
    session = session_make(characters=[("hero", "Hero", "player")])
    header = base64.b64encode(json.dumps({"openai": "sk-player-own"}).encode()).decode()

    frames = stream_read(api.post("/api/actions", data=json.dumps(action_body(session.id, request_id="req-own")),
                                  content_type="application/json", HTTP_X_PROVIDER_KEYS=header))

    assert frames[-1]["payload"]["committed"] is True
    assert set(local_slots.authorizations()) == {"Bearer sk-player-own"}
