"""chat-mode-narrator: the dialogue engine replaces the core narrator (conflict on
narrative-engine@1), reads the active cast, emits stage.direction (one speaker per paragraph) and
scene.set before its prose, and the addressed character answers — played in haruka-academy with the
dialogue-mode plugins, in both of the world's locales."""
from __future__ import annotations

import json

import pytest

from sessions.models import Character
from tests.plugins_app.builtin.catalogue_support import (
    completed,
    failed_runtimes,
    play_with,
    plugin_data,
)
from tests.plugins_app.builtin.rpc_support import session_jobs_finished, upstream_world
from tests.turns.prompt_support import runtime_prompt

DIALOGUE = ["pregame", "world-init", "char-creator", "chat-mode-narrator", "scene-cast", "scene-stage", "scene-prompts",
            "character-blueprint", "character-presence", "living-world-rules", "branch-reply"]


def test_manifest_declares_the_upstream_contracts(builtin_plugins):
    manifest = builtin_plugins.get("chat-mode-narrator").manifest
    assert manifest.provided_contracts == ["narrative-engine@1"] and manifest.conflicts == ["narrative-engine@1"]
    assert manifest.requires == ["scene-cast@1", "scene-stage@1", "scene-prompts@1", "character-blueprint@1",
                                 "character-presence@1", "living-world-rules@1", "branch-reply@1"]
    assert [s["key"] for s in manifest.contributes.settings] == ["narrativePerson", "dialogueRatio", "proseLength"]
    [runtime] = manifest.runtimes
    assert runtime.stage == "narrative" and runtime.visibility == "story" and runtime.agent.advertise_events
    assert set(runtime.inputs) == {"worldTime", "storyEvent", "tabletopCheck", "active-cast", "npc-relationships", "check-results"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("locale, says, addressed, zh", [
    ("zh-CN", ["神代澪，你觉得我该加入哪个社团？"], "npc-kamishiro-mio", True),
    ("en-US", ["Rin Asakura, what is the festival countdown about?"], "npc-asakura-rin", False),
])
def test_a_dialogue_turn(client, locale, says, addressed, zh):
    with upstream_world("haruka-academy"):
        played = play_with(client, "haruka-academy", DIALOGUE, says=says, name="林照" if zh else "Ada Quill", locale=locale)
        active = played.created["activePlugins"]
        assert "chat-mode-narrator" in active and "narrator" not in active, active  # the core narrator is replaced
        assert not failed_runtimes(played, "chat-mode-narrator")
        assert completed(played, "chat-mode-narrator") == ["success", "success"]  # the opening and the turn
        name = Character.objects.get(session_id=played.id, character_id=addressed).name
        prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
        assert name in prose[-1] and "[" not in prose[-1] and "【" not in prose[-1]
        # it read the active cast, led by the addressed character
        assert f"id: {addressed}" in json.dumps(runtime_prompt(played.id, "chat-mode-narrator"), ensure_ascii=False)
        # events before the prose: the stage's direction records one speaker per paragraph
        emitted = [f["payload"] for f in played.frames("tool.completed") if f["payload"]["tool"] == "emit-event"]
        assert emitted
        session_jobs_finished(played.id)
        dialogue = plugin_data(played.id, "scene-stage", "dialogue")
        latest = dialogue["latest"]
        paragraphs = [p for p in prose[-1].split("\n\n") if p.strip()]
        assert len(latest["paragraphSpeakers"]) == len(paragraphs) and latest["unknownIds"] == []
        assert {"characterId": addressed, "displayName": name} in latest["paragraphSpeakers"]
        assert plugin_data(played.id, "scene-stage", "stage")["current"]["source"] in ("registry", "none", "world")
        actors = plugin_data(played.id, "scene-stage", "direction")["current"]["actors"]
        assert any(a["characterId"] == addressed and a["focus"] for a in actors)
