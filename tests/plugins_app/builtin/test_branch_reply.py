"""branch-reply: each story reply is seeded as candidate 0 (post-turn, whichever engine wrote it)
with its message block; createCandidates asks the plugin's model (offline: the scripted takes) for
alternatives and acceptCandidate keeps one — through plugin-rpc, on the stored turns/message data."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import (
    completed,
    failed_runtimes,
    play_with,
    plugin_data,
    ui_parts,
)
from tests.plugins_app.builtin.rpc_support import rpc

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "branch-reply"]


def run(client, played, payload: dict) -> dict:
    response = rpc(client, played, {"kind": "runtime", "pluginId": "branch-reply", "runtimeId": "branch-reply", "payload": payload})
    assert response.status_code == 200, response.content
    [result] = [r for r in response.json()["runtimeResults"] if r["runtimeId"] == "branch-reply"]
    return result


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("world, says, hero", [
    ("yanhui-ferry", ["裴照，押纲官到底去了哪里？"], "林照"),
])
def test_seed_create_and_accept(client, world, says, hero):
    played = play_with(client, world, PLUGINS, says=says, name=hero)
    assert not failed_runtimes(played, "branch-reply") and completed(played, "branch-reply")[-1] == "success"
    prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
    turns = plugin_data(played.id, "branch-reply", "turns")
    key = max(turns, key=lambda k: turns[k]["turn"])
    seeded = turns[key]
    assert seeded["baseText"] == prose[-1] and seeded["candidates"] == [{"id": f"{key}-candidate-0", "text": prose[-1], "source": "original"}]
    assert plugin_data(played.id, "branch-reply", "message")[key]["acceptedIndex"] == 0
    assert any(p["type"] == "branch-reply.block" for p in ui_parts(played, len(played.streams) - 1))

    made = run(client, played, {"action": "createCandidates", "turnId": key, "count": 3})
    assert made["status"] == "ok", made
    candidates = plugin_data(played.id, "branch-reply", "turns")[key]["candidates"]
    texts = [c["text"] for c in candidates]
    assert [c["source"] for c in candidates] == ["original", "alternative", "alternative"] and len(set(texts)) == 3
    assert all(t.strip() for t in texts)

    assert run(client, played, {"action": "acceptCandidate", "turnId": key, "candidateId": f"{key}-candidate-2"})["status"] == "ok"
    message = plugin_data(played.id, "branch-reply", "message")[key]
    assert (message["acceptedIndex"], message["count"], message["text"]) == (2, 3, texts[2])
    missing = run(client, played, {"action": "acceptCandidate", "turnId": key, "candidateId": "nope"})
    assert missing["status"] == "failed" and missing["error"]["code"] == "not-found"
    assert run(client, played, {"action": "createCandidates", "turnId": key, "count": 7})["error"]["code"] == "invalid-input"


@pytest.mark.django_db(transaction=True)
def test_the_accepted_telling_replaces_the_reply_in_later_story_prompts(client):
    from tests.plugins_app.builtin.play_support import act

    # given a played turn whose reply got alternatives and the second one accepted
    played = play_with(client, "yanhui-ferry", PLUGINS, says=["裴照，押纲官到底去了哪里？"], name="林照")
    turns = plugin_data(played.id, "branch-reply", "turns")
    key = max(turns, key=lambda k: turns[k]["turn"])
    original = turns[key]["baseText"]
    assert run(client, played, {"action": "createCandidates", "turnId": key, "count": 2})["status"] == "ok"
    alternative = plugin_data(played.id, "branch-reply", "turns")[key]["candidates"][1]["text"]
    assert run(client, played, {"action": "acceptCandidate", "turnId": key, "candidateId": f"{key}-candidate-1"})["status"] == "ok"
    # when the next turn runs
    act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": "那我们去渡口看看。"}]})
    # then the narrator's history holds the accepted telling, not the reply as first written
    [call] = [c for c in played.model_calls(len(played.streams) - 1) if c["runtimeId"] == "narrator"][:1]
    history = [m["content"] for m in call["messages"][1:-1] if m["role"] == "assistant"]
    assert alternative in history and original not in history
    # and accepting the original again restores it
    assert run(client, played, {"action": "acceptCandidate", "turnId": key, "candidateId": f"{key}-candidate-0"})["status"] == "ok"
    act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": "再说一遍。"}]})
    [call] = [c for c in played.model_calls(len(played.streams) - 1) if c["runtimeId"] == "narrator"][:1]
    history = [m["content"] for m in call["messages"][1:-1] if m["role"] == "assistant"]
    assert original in history and alternative not in history
