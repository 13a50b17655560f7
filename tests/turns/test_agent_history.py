"""What the agent loop tells a real model between calls (issue 14; spec 000 §参数修复, §读到的是哪一份数据),
seen from the model's side: the HTTP peer (tests.model_peer) records every request.

- Repaired arguments go back into the history as valid JSON; unrepairable ones as the raw text in a
  JSON string, never as an empty object pretending the call ran.
- A character one call of a reply stages is visible to the next call of the same reply.
"""
from __future__ import annotations

import json

import pytest

from tests.e2e.play import expect_committed, session_create, session_setup
from tests.model_peer import GameBrain, ModelPeer, Reply
from tests.turns.test_real_model_game import ClientApi, llm_toml

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"
REPAIRABLE = '{"name": "Nell Marrick"}}'  # one closer too many (repair rule 1)
BROKEN = '{"type": "np'  # truncated: no rule repairs it


class SloppyNarrator(GameBrain):
    """The story runtime first looks two things up with badly written arguments, then writes prose."""

    def _story(self, system, user, messages):
        if not any(m.get("role") == "tool" for m in messages):
            return Reply(calls=[("get-character", REPAIRABLE), ("list-characters", BROKEN)])
        return super()._story(system, user, messages)


class EagerTracker(GameBrain):
    """The character tracker creates a person and reads them back in the same reply."""

    def _characters(self, tools, system, user):
        return Reply(calls=[("sync-characters", {"creates": [{"name": "Ada Brine", "type": "npc", "description": "A net mender."}]}),
                            ("get-character", {"name": "Ada Brine"})])


def _played(client, tmp_path, settings, brain):
    peer = ModelPeer(brain=brain)
    peer.__enter__()
    settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
    played = session_create(ClientApi(client), WORLD)
    session_setup(played)
    return peer, played


def test_repaired_arguments_are_what_the_next_request_carries(client, tmp_path, settings):
    peer, played = _played(client, tmp_path, settings, SloppyNarrator())
    try:
        start = len(peer.requests)
        result = expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "Who keeps the light?"}]}))
        story = [r for r in peer.requests[start:] if "emit-event" in r.tool_names]
    finally:
        peer.__exit__()
    # the second story request carries the first reply's calls as they ran
    assert len(story) >= 2, [r.tool_names for r in peer.requests[start:]]
    assistant = [m for m in story[1].body["messages"] if m.get("role") == "assistant"][-1]
    by_name = {c["function"]["name"]: c["function"]["arguments"] for c in assistant["tool_calls"]}
    assert json.loads(by_name["get-character"]) == {"name": "Nell Marrick"}  # repaired, valid JSON text
    assert by_name["get-character"] != REPAIRABLE
    assert json.loads(by_name["list-characters"]) == BROKEN  # the raw text, kept as a JSON string
    names = {c["id"]: c["function"]["name"] for c in assistant["tool_calls"]}
    tools = {names[m["tool_call_id"]]: json.loads(m["content"]) for m in story[1].body["messages"] if m.get("role") == "tool"}
    assert tools["list-characters"]["error"]["code"] == "invalid-input"
    assert "Nell Marrick" in json.dumps(tools["get-character"], ensure_ascii=False)
    assert result.of_type("narrative.completed")


def test_a_character_staged_by_one_call_is_read_by_the_next_call_of_the_same_reply(client, tmp_path, settings):
    peer, played = _played(client, tmp_path, settings, EagerTracker())
    try:
        result = expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "I greet the harbour."}]}))
    finally:
        peer.__exit__()
    reads = [f for f in result.frames if f.get("type") in ("tool.completed", "tool.failed")
             and f["payload"].get("tool") == "get-character" and f["payload"].get("runtimeId") == "char-creator/character-tracker"]
    assert [f["type"] for f in reads] == ["tool.completed"], reads
    assert "Ada Brine" in json.dumps(reads[0]["payload"]["output"], ensure_ascii=False)
    # and the commit wrote it once
    characters = played.api.json("GET", f"/api/sessions/{played.id}/characters")["items"]
    assert [c["name"] for c in characters].count("Ada Brine") == 1
