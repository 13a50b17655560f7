"""scene-stage: the setup seed from the world's scene registry, the cast runtime, and the
scene.set / stage.direction event runtimes (sent over plugin-rpc, run as event jobs) with their
stage, direction and dialogue records — played in the upstream haruka-academy world."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import (
    completed,
    failed_runtimes,
    play_with,
    plugin_data,
)
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.rpc_support import event_sent, upstream_world

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "scene-stage"]


def test_manifest_declares_the_upstream_runtimes_events_and_slots(builtin_plugins):
    manifest = builtin_plugins.get("scene-stage").manifest
    assert manifest.provided_contracts == ["stage-direction@1", "scene-stage@1", "scene-cast@1"]
    triggers = {r.id: (r.stage, r.trigger.type, r.trigger.topic) for r in manifest.runtimes}
    assert triggers == {"scene-stage/seed": ("setup", "auto", None), "scene-stage/cast": ("pre-turn", "auto", None),
                        "scene-stage/resolver": (None, "event", "scene.set"),
                        "scene-stage/direction": (None, "event", "stage.direction")}
    assert [e["topic"] for e in manifest.contributes.events] == ["stage.direction", "scene.set"]
    assert [(x["id"], x["slot"]) for x in manifest.contributes.extensions] == [
        ("cast", "stage.cast@1"), ("backdrop", "stage.backdrop@1"), ("direction", "stage.cast@1"), ("dialogue", "stage.dialogue@1")]


@pytest.mark.django_db(transaction=True)
def test_seed_cast_scene_and_direction_in_haruka_academy(client):
    with upstream_world("haruka-academy"):
        played = play_with(client, "haruka-academy", PLUGINS, locale="en-US", name="Ada Quill",
                           says=["Mio Kamishiro, which club do you think I should join?"])
        assert not failed_runtimes(played, "scene-stage") and completed(played, "scene-stage/seed") == ["success"]
        stage = plugin_data(played.id, "scene-stage", "stage")["current"]
        assert stage["location"] == "Class 2-B" and stage["source"] == "world" and stage["timeOfDay"] == "day"
        cast = plugin_data(played.id, "scene-stage", "active-cast")["current"]["speakers"]
        assert cast[0]["id"] == "npc-kamishiro-mio" and cast[0]["reason"] == "addressed"

        # a sub-place of a registry scene resolves to that scene; night is kept
        jobs = event_sent(client, played, "scene-stage", "scene.set", {"location": "Old Journal Shelf", "timeOfDay": "night"})
        assert jobs["scene-stage/resolver"].status == "succeeded", jobs["scene-stage/resolver"].error
        stage = plugin_data(played.id, "scene-stage", "stage")["current"]
        assert (stage["location"], stage["timeOfDay"], stage["source"]) == ("Old Journal Shelf", "night", "registry")
        # a place the registry does not know has no backdrop
        event_sent(client, played, "scene-stage", "scene.set", {"location": "Lighthouse"})
        stage = plugin_data(played.id, "scene-stage", "stage")["current"]
        assert (stage["source"], stage["backdrop"], stage["timeOfDay"]) == ("none", None, "night")

        # actor cues and paragraph speakers; an unknown id becomes null, never a guess
        cues = {"cues": [{"type": "actor.enter", "characterId": "npc-kamishiro-mio", "position": "left"},
                         {"type": "actor.focus", "characterId": "npc-kamishiro-mio"},
                         {"type": "actor.enter", "characterId": "nobody-here"}],
                "dialogue": {"paragraphSpeakers": ["npc-kamishiro-mio", None, "nobody-here"]}}
        jobs = event_sent(client, played, "scene-stage", "stage.direction", cues)
        assert jobs["scene-stage/direction"].status == "succeeded", jobs["scene-stage/direction"].error
        [actor] = plugin_data(played.id, "scene-stage", "direction")["current"]["actors"]
        assert (actor["characterId"], actor["position"], actor["focus"]) == ("npc-kamishiro-mio", "left", True)
        dialogue = plugin_data(played.id, "scene-stage", "dialogue")
        speakers = dialogue["latest"]["paragraphSpeakers"]
        assert speakers[0]["characterId"] == "npc-kamishiro-mio" and speakers[1:] == [None, None]
        assert dialogue["latest"]["unknownIds"] == ["nobody-here"] and dialogue["latest"] == dialogue[f"turn-{dialogue['latest']['turn']}"]
        # a dialogue-only event leaves the actors as they were
        event_sent(client, played, "scene-stage", "stage.direction", {"cues": [], "dialogue": {"paragraphSpeakers": [None]}})
        assert len(plugin_data(played.id, "scene-stage", "direction")["current"]["actors"]) == 1
        specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
        mine = [s["id"] for group in specs["right"] if group["pluginId"] == "scene-stage" for s in group["specs"]]
        assert mine == ["scene-stage.panel", "scene-stage.cast-panel"], specs


def _slot(client, played, name):
    [item] = get_json(client, played, f"/api/sessions/{played.id}/ui-slots?slot={name}")["items"]
    return item


@pytest.mark.django_db(transaction=True)
def test_the_stage_slots_follow_the_cast_scene_and_direction(client):
    with upstream_world("haruka-academy"):
        played = play_with(client, "haruka-academy", PLUGINS, locale="en-US", name="Ada Quill",
                           says=["Mio Kamishiro, which club do you think I should join?"])
        # the seeded scene and the chosen cast, before any direction
        backdrop = _slot(client, played, "stage.backdrop@1")
        assert (backdrop["value"]["location"], backdrop["value"]["timeOfDay"]) == ("Class 2-B", "day")
        cast = _slot(client, played, "stage.cast@1")["value"]
        assert cast["speakers"][0]["id"] == "npc-kamishiro-mio" and cast["actors"] == []
        assert _slot(client, played, "stage.dialogue@1")["value"] is None
        # a scene change and a direction reach the slots; the revision names the new value
        before = backdrop["revision"]
        event_sent(client, played, "scene-stage", "scene.set", {"location": "Old Journal Shelf", "timeOfDay": "night"})
        backdrop = _slot(client, played, "stage.backdrop@1")
        assert (backdrop["value"]["location"], backdrop["value"]["timeOfDay"]) == ("Old Journal Shelf", "night")
        assert backdrop["revision"] != before
        event_sent(client, played, "scene-stage", "stage.direction", {
            "cues": [{"type": "actor.enter", "characterId": "npc-kamishiro-mio", "position": "left"}],
            "dialogue": {"paragraphSpeakers": ["npc-kamishiro-mio", None]}})
        [actor] = _slot(client, played, "stage.cast@1")["value"]["actors"]
        assert (actor["characterId"], actor["position"]) == ("npc-kamishiro-mio", "left")
        dialogue = _slot(client, played, "stage.dialogue@1")["value"]
        assert dialogue["paragraphSpeakers"][0]["characterId"] == "npc-kamishiro-mio" and dialogue["paragraphSpeakers"][1] is None
        # the stage prefix lists every stage slot once; music is null without soundtrack
        names = [i["slot"] for i in get_json(client, played, f"/api/sessions/{played.id}/ui-slots?prefix=stage.")["items"]]
        assert set(names) == {"stage.choices@1", "stage.cast@1", "stage.backdrop@1", "stage.dialogue@1", "stage.music@1"}
        assert _slot(client, played, "stage.music@1")["value"] is None
