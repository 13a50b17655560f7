"""director: the localized director's note heads the story runtime's system prompt (read back from
the stored full prompt of the turn) and no other runtime's; the prompt.segment@1 provider answers
the same note for the story audience only."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import failed_runtimes, play_with
from tests.turns.prompt_support import runtime_prompts

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "director"]


def system_prompts(session_id: str, runtime_id: str) -> list[str]:
    return [m["content"] for prompt in runtime_prompts(session_id, runtime_id) for m in prompt[:1]
            if isinstance(m, dict) and m.get("role") == "system"]


def test_segment_provider(builtin_plugins):
    provider = builtin_plugins.get("director").registrations.extensions["direction"].target
    zh = provider({"audience": "story", "locale": "zh-CN"})["segment"]
    assert zh["id"] == "director.direction" and zh["content"].startswith("[导演前言]")
    assert provider({"audience": "story", "locale": "en-US"})["segment"]["content"].startswith("[DIRECTOR'S NOTE]")
    assert provider({"audience": "plugin", "locale": "en-US"}) == {"segment": None}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("world, says, hero, head", [
    ("yanhui-ferry", ["我去码头看看那条船。"], "林照", "[导演前言]"),
])
def test_the_note_heads_story_prompts_only(client, world, says, hero, head):
    played = play_with(client, world, PLUGINS, says=says, name=hero)
    assert not failed_runtimes(played, "narrator")
    story = system_prompts(played.id, "narrator")
    assert story and all(p.startswith(head) and p.count(head) == 1 for p in story)
    others = system_prompts(played.id, "char-creator/character-tracker") + system_prompts(played.id, "world-init/dimension-tracker")
    assert others and not any(head in p for p in others)
    fired = [f["payload"] for f in played.frames("hook.fired") if f["payload"]["pluginId"] == "director"]
    assert fired and {f["runtimeId"] for f in fired} >= {"narrator"}
