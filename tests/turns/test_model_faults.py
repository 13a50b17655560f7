"""Real hosts fail: a 429, a 500, a stalled stream (issue 14, loud failures). Against the HTTP peer
(tests.model_peer): a runtime declaring ``loop.maxRetries`` retries a call that failed before
streaming; one declaring none fails alone with the HTTP status in its error, on the stream and in
the turn's ``failedRuntimeIds``, while the rest of the turn commits; a stalled stream ends with
``idle_timeout``. Nothing falls back to the offline model."""
from __future__ import annotations

import pytest

from tests.e2e.play import expect_committed, session_create, session_setup
from tests.model_peer import ModelPeer
from tests.turns.test_real_model_game import ClientApi, _failed, llm_toml

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"


@pytest.fixture
def game(client, tmp_path, settings):
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        played = session_create(ClientApi(client), WORLD)
        session_setup(played)
        yield peer, played


def _turn(played, text="I greet the harbour."):
    return expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": text}]}))


def _errors(result):
    return {f["payload"]["runtimeId"]: f["payload"]["error"] for f in result.of_type("runtime.failed")}


def test_a_rate_limited_call_fails_its_runtime_loudly_when_it_declares_no_retries(game):
    peer, played = game
    # given the host answers codex's next call with 429 (codex declares maxRetries: 0)
    peer.faults.append({"status": 429, "message": "rate limit reached", "when_tool": "sync-codex-entries"})
    result = _turn(played)
    # then codex alone failed, saying what the host answered; the turn committed its other work
    assert _failed(result) == ["codex"], _errors(result)
    error = _errors(result)["codex"]
    assert error["code"] == "provider_error" and "429" in error["message"], error
    assert result.of_type("narrative.completed")
    assert not any(r.body.get("model") == "scripted" for r in peer.requests)


def test_a_server_error_is_retried_when_the_runtime_declares_retries(game):
    peer, played = game
    # given the character tracker (maxRetries: 1) meets one HTTP 500
    peer.faults.append({"status": 500, "message": "upstream exploded", "when_tool": "sync-characters"})
    before = sum("sync-characters" in r.tool_names for r in peer.requests)
    result = _turn(played)
    # then it sent the call again and completed
    assert _failed(result) == [], _errors(result)
    assert sum("sync-characters" in r.tool_names for r in peer.requests) - before == 2
    retried = [f for f in result.of_type("llm.responded")
               if f["payload"].get("runtimeId") == "char-creator/character-tracker" and f["payload"].get("retry") == 1]
    assert retried and retried[0]["payload"]["error"]["code"] == "provider_error"


def test_a_stalled_stream_ends_the_runtime_with_idle_timeout(game, tmp_path, settings):
    peer, played = game
    # given slots with a 300 ms idle timeout and a host that stalls guide's call
    path = tmp_path / "llm.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('model = "peer-large"', 'model = "peer-large"\nidleTimeoutMs = 300'),
                    encoding="utf-8")
    peer.faults.append({"stall_seconds": 2.0, "when_tool": "generate-guide"})
    result = _turn(played)
    assert _failed(result) == ["guide"], _errors(result)
    assert _errors(result)["guide"]["code"] == "idle_timeout"
