"""Model capabilities from the model database feed the agent loop (issue 14; spec 004 §模型数据库):
a model the database lists without tool support gets no tools — a story runtime writes prose
without them, a tool runtime fails at once with ``tools_unsupported`` instead of 8 futile calls —
and a small context window shrinks the prompt budgets. The models are served by the HTTP peer
(tests.model_peer) under ids the bundled database knows."""
from __future__ import annotations

import pytest

from tests.e2e.play import expect_committed, session_create, session_setup
from tests.model_peer import ModelPeer, Quirks
from tests.turns.test_real_model_game import ClientApi, _failed, llm_toml

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"


def _play_one_turn(client, peer):
    api = ClientApi(client)
    played = session_create(api, WORLD)
    session_setup(played)
    start = len(peer.requests)
    result = played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "I greet the harbour."}]})
    return expect_committed(result), peer.requests[start:]


def test_a_model_without_tool_support_gets_no_tools_and_tool_runtimes_fail_loudly(client, tmp_path, settings):
    # given story and plugin slots on "deepseek-reasoner", which the model database lists without tools
    with ModelPeer(quirks=Quirks()) as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer, provider="deepseek",
                                           models={"story": "deepseek-reasoner", "plugin": "deepseek-chat"})
        api = ClientApi(client)
        played = session_create(api, WORLD)
        session_setup(played)
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer, provider="deepseek",
                                           models={"story": "deepseek-reasoner", "plugin": "deepseek-reasoner"})
        start = len(peer.requests)
        # when a turn runs
        result = expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "Hello?"}]}))
        seen = peer.requests[start:]

    # then the story was written from a request without tools
    assert seen and all(not r.body.get("tools") for r in seen), [r.tool_names for r in seen]
    assert result.of_type("narrative.completed")
    # and every tool runtime failed before any model call, with a code and message that say why
    failed = {f["payload"]["runtimeId"]: f["payload"]["error"] for f in result.of_type("runtime.failed")}
    assert {"codex", "affinity", "guide", "char-creator/character-tracker"} <= set(failed), failed
    assert {e["code"] for e in failed.values()} == {"tools_unsupported"}
    assert "deepseek-reasoner" in failed["codex"]["message"]
    assert set(_failed(result)) == set(failed)
    assert len(seen) == 1  # only the story call reached the model


def test_a_small_context_window_shrinks_the_prompt(client, tmp_path, settings):
    # given the same world played once on a 128k-token model and once on an 8k one (gpt-4)
    sizes = {}
    for model in ("gpt-4o-mini", "gpt-4"):
        with ModelPeer() as peer:
            settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer, provider="openai", models={"story": model, "plugin": model})
            settings.COVEL_PROVIDER_ORIGINS = {"openai": (peer.origin,)}
            _, seen = _play_one_turn(client, peer)
            story = [r for r in seen if "emit-event" in r.tool_names or not r.tool_names]
            sizes[model] = len(story[0].system)
    # then the small window's story prompt is the smaller one (the world lore is cut to fit)
    assert sizes["gpt-4"] < sizes["gpt-4o-mini"], sizes
