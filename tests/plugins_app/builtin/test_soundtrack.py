"""soundtrack: a world's track list imported into `tracks`; scene.set (scene-stage's event) and
music.cue (its own) run the scene / cue event runtimes, which record the scene and the mood and
choose the track by the documented order — media references only, nothing generated."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from plugins_app.toolkit import module_load_by_path
from tests.plugins_app.builtin.catalogue_support import play_with, plugin_data
from tests.plugins_app.builtin.catalogue_worlds import world_variant
from tests.plugins_app.builtin.rpc_support import event_sent

BUILTIN = Path(__file__).resolve().parents[3] / "plugins_app" / "builtin"
PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "scene-stage", "soundtrack"]
TRACKS = {"schemaVersion": 1, "registryId": "music-registry", "tracks": [
    {"id": "quay-mystery", "title": "Quay Fog", "file": "quay.mp3", "scenes": ["The Quay"], "moods": ["mystery"]},
    {"id": "storm", "title": "Storm Bell", "file": "storm.mp3", "moods": ["tense", "dread"]},
    {"id": "lamp-room", "file": "lamp.mp3", "scenes": ["Lamp Room"]},
    {"id": "theme", "title": "Hollow Reach", "file": "theme.mp3", "theme": True, "volume": 0.7},
]}


def choose(scene, mood):
    module = module_load_by_path(BUILTIN / "soundtrack", "soundtrack", "server/soundtrack.py")
    hit = module.track_choose(TRACKS["tracks"], scene, mood)
    return hit["id"] if hit else None


def test_track_order():
    assert choose("The Quay", "mystery") == "quay-mystery"
    assert choose("Lamp Room", "mystery") == "lamp-room"  # a mood track that names scenes plays only there
    assert choose("Lamp Room", "dread") == "storm"
    assert choose("The Quay", "joy") == "theme" and choose(None, None) == "theme"
    assert choose("The Quay", "silence") is None


@pytest.fixture
def music_world():
    target = world_variant("hollow-reach-music", files={"media/music.yaml": TRACKS}, sources={"music": {
        "kind": "yaml", "path": "media/music.yaml", "schema": "contract:stage.music-tracks@1",
        "to": "contract:stage.music-tracks@1", "key": "registryId"}})
    yield "hollow-reach-music"
    shutil.rmtree(target, ignore_errors=True)


@pytest.mark.django_db(transaction=True)
def test_scene_and_mood_choose_the_track(client, music_world):
    played = play_with(client, music_world, PLUGINS, says=["I walk down to the quay."], name="Ada Quill")
    assert plugin_data(played.id, "soundtrack", "tracks")["music-registry"]["tracks"][0]["id"] == "quay-mystery"
    jobs = event_sent(client, played, "scene-stage", "scene.set", {"location": "The Quay"})
    assert jobs["soundtrack/scene"].status == "succeeded", jobs["soundtrack/scene"].error
    state = plugin_data(played.id, "soundtrack", "state")
    assert state["scene"]["value"] == "The Quay" and state["track"]["track"]["id"] == "theme"
    event_sent(client, played, "soundtrack", "music.cue", {"mood": "mystery"})
    track = plugin_data(played.id, "soundtrack", "state")["track"]
    assert (track["track"]["id"], track["track"]["file"], track["mood"]) == ("quay-mystery", "quay.mp3", "mystery")
    assert track["track"]["asset"] is None  # the world ships no file for it: a reference only
    # a repeated mood writes nothing; silence stops the music
    before = plugin_data(played.id, "soundtrack", "state")
    jobs = event_sent(client, played, "soundtrack", "music.cue", {"mood": "mystery"})
    assert jobs["soundtrack/cue"].status == "succeeded" and plugin_data(played.id, "soundtrack", "state") == before
    event_sent(client, played, "soundtrack", "music.cue", {"mood": "silence"})
    assert plugin_data(played.id, "soundtrack", "state")["track"]["track"] is None


@pytest.mark.django_db(transaction=True)
def test_the_music_slot_plays_the_chosen_track(client, music_world):
    from tests.plugins_app.builtin.play_support import get_json

    def music():
        [item] = get_json(client, played, f"/api/sessions/{played.id}/ui-slots?slot=stage.music@1")["items"]
        return item["value"]

    played = play_with(client, music_world, PLUGINS, says=["I look around."], name="Ada Quill")
    # before a scene or mood: the world's theme
    assert music()["track"]["id"] == "theme" and music()["track"]["volume"] == 0.7
    event_sent(client, played, "scene-stage", "scene.set", {"location": "The Quay"})
    event_sent(client, played, "soundtrack", "music.cue", {"mood": "mystery"})
    value = music()
    assert (value["track"]["id"], value["track"]["file"], value["scene"], value["mood"]) == ("quay-mystery", "quay.mp3", "The Quay", "mystery")
    event_sent(client, played, "soundtrack", "music.cue", {"mood": "silence"})
    assert music()["track"] is None and music()["mood"] == "silence"
