"""Character delegation, a turn-policy import, delegation to another package's sub-agent through its
write service and ctx.agents.run, against a model that is not ours: every slot points at
``tests.model_peer.ModelPeer`` (real HTTP on 127.0.0.1, tool-call arguments streamed without
``index``), whose brain calls only what each request offers. Plugins: tests/turns/cast_support.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import Character
from tests.model_peer import ModelPeer, Quirks, Reply
from tests.turns.cast_support import builtin_dir_with_cast
from tests.turns.test_actions_helpers import (
    action_body,
    post_action,
    session_make,
    stream_read,
)
from tests.turns.test_real_model_game import llm_toml
from tests.turns.test_tools_peer import _done

pytestmark = pytest.mark.django_db(transaction=True)

ACTOR_ANSWER = {"segments": [{"type": "dialogue", "text": "Mind the stairs."}], "intent": "Keep the hero away from the oil store."}


def brain(body: dict[str, Any]) -> Reply:
    """A model that uses what it is offered, one step at a time."""
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    done = _done(body)
    system = (body.get("messages") or [{}])[0].get("content") or ""

    def next_of(*plan: tuple[str, dict]) -> Reply:
        for name, args in plan:
            if name in offered and name not in done:
                return Reply(calls=[(name, args)])
        return Reply(calls=[("runtime-done", {})]) if "runtime-done" in offered else Reply(text="Done.")

    if "You direct the scene." in system:
        return next_of(("delegate", {"target": {"contract": "character-actor@1"}, "character": "Mara",
                                     "brief": "The hero asks the way up.", "instruction": "Sound tired."}),
                       ("turn-policy", {"present": ["Mara"]}))
    if "You play one character." in system:
        return Reply(text=json.dumps(ACTOR_ANSWER))
    if "You keep the granary's books." in system:
        return next_of(("take-sacks", {"count": 2})) if "take-sacks" not in done else Reply(text="Took two sacks.")
    if "You grind the grain." in system:
        return next_of(("delegate", {"target": {"contract": "granary.clerk@1"}, "brief": "Two sacks, please."}))
    return Reply(text="The lighthouse stairs creak as the wind rises.")


@pytest.fixture
def peer(tmp_path, settings):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_cast(tmp_path / "builtin"))
    for path in Path(settings.COVEL_HOME).glob("casting-*.json"):
        path.unlink()
    registry_reset()
    with ModelPeer(quirks=Quirks(indexless=True), brain=brain) as server:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, server)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        yield server
    registry_reset()


def _sacks(session):
    return PluginData.objects.get(session=session, plugin_id="granary", namespace="stock", key="barn").value["sacks"]


def test_a_foreign_model_delegates_to_a_character_a_policy_and_another_packages_sub_agent(api, peer):
    session = session_make(plugins=("narrator", "troupe", "casting", "granary", "miller"),
                           characters=[("hero", "Hero", "player")])
    Character.objects.create(session=session, character_id="mara-id", name="Mara", type="npc")
    Character.objects.create(session=session, character_id="bram-id", name="Bram", type="npc")
    PluginData.objects.create(session=session, plugin_id="granary", namespace="stock", key="barn", value={"sacks": 10})
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]["payload"]
    # the director's model read the character's segments and intent; the stream kept no intent
    director = [r for r in peer.requests if "You direct the scene." in r.system]
    assert any("Keep the hero away from the oil store." in json.dumps(r.body["messages"]) for r in director)
    assert "oil store" not in json.dumps(frames) and "Sound tired." not in json.dumps(frames)
    actor = [r for r in peer.requests if "You play one character." in r.system]
    assert len(actor) == 1 and "Name: Mara" in actor[0].body["messages"][-1]["content"]
    assert "delegate" not in actor[0].tool_names  # a sub-agent cannot delegate further
    policy = [f for f in frames if f["type"] == "tool.completed" and f["payload"].get("tool") == "turn-policy"]
    assert policy[0]["payload"]["output"]["data"]["actors"][0] == {"character": "Bram", "why": "closest to the door"}
    # miller's delegation to granary's clerk: the clerk's write service committed with miller's turn
    assert _sacks(session) == 8
    assert not peer.errors, json.dumps(peer.errors)[:500]
