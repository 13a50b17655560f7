"""character-presence: the manual runtime (plugin-rpc kind runtime) checks a presence record
against its schema, stores it under presence/<characterId> with the character's name, refuses a bad
record without writing, and picks stage variants in the documented fallback order."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.toolkit import module_load_by_path
from tests.plugins_app.builtin.catalogue_support import play_with, plugin_data
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.rpc_support import rpc

BUILTIN = Path(__file__).resolve().parents[3] / "plugins_app" / "builtin"
PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "character-presence"]
SPRITE = {"id": "b" * 64, "mime": "image/png", "size": 5678}
PRESENCE = {
    "schemaVersion": 1, "characterId": "npc-wenna-pascoe",
    "avatar": {"id": "a" * 64, "mime": "image/png", "size": 1234},
    "visuals": {"defaultVariant": "coat-neutral", "variants": [
        {"id": "coat-neutral", "outfit": "coat", "expression": "neutral", "pose": "default", "sprite": SPRITE},
        {"id": "coat-smile", "outfit": "coat", "expression": "smile", "pose": "default",
         "sprite": {**SPRITE, "id": "c" * 64}, "stage": {"scale": 1.1, "offsetX": 0, "offsetY": -5}},
    ]},
    "voice": {"id": "d" * 64, "mime": "audio/wav", "size": 4321},
}


def presence_module():
    return module_load_by_path(BUILTIN / "character-presence", "character-presence", "server/presence.py")


def runtime_run(client, played, plugin_id: str, runtime_id: str, payload: dict) -> dict:
    response = rpc(client, played, {"kind": "runtime", "pluginId": plugin_id, "runtimeId": runtime_id, "payload": payload})
    assert response.status_code == 200, response.content
    return response.json()


def test_variant_fallbacks():
    pick = presence_module().variant_pick
    assert pick(PRESENCE, variant_id="coat-smile")["id"] == "c" * 64
    assert pick(PRESENCE, outfit="coat", expression="smile", pose="sitting")["id"] == "c" * 64  # default pose
    assert pick(PRESENCE, outfit="coat", expression="angry")["id"] == "b" * 64  # neutral expression
    assert pick(PRESENCE, outfit="gown")["id"] == "b" * 64  # the catalogue default
    assert pick({"schemaVersion": 1, "characterId": "x", "avatar": PRESENCE["avatar"]})["id"] == "a" * 64


@pytest.mark.django_db(transaction=True)
def test_presence_records_through_the_manual_runtime(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, says=["I look for Wenna Pascoe."], name="Ada Quill")
    body = runtime_run(client, played, "character-presence", "character-presence", {"presenceJson": json.dumps(PRESENCE)})
    [result] = [r for r in body["runtimeResults"] if r["runtimeId"] == "character-presence"]
    assert result["status"] == "ok", body
    stored = plugin_data(played.id, "character-presence", "presence")["npc-wenna-pascoe"]
    assert stored == {**PRESENCE, "displayName": "Wenna Pascoe"}
    # a bad media reference fails the run and writes nothing
    bad = {**PRESENCE, "characterId": "npc-nell-marrick", "voice": {"id": "not-a-hash", "mime": "audio/wav", "size": 1}}
    body = rpc(client, played, {"kind": "runtime", "pluginId": "character-presence", "runtimeId": "character-presence",
                                "payload": {"presence": bad}})
    assert body.status_code == 200, body.content
    [result] = [r for r in body.json()["runtimeResults"] if r["runtimeId"] == "character-presence"]
    assert result["status"] == "failed" and result["error"]["code"] == "invalid-input"
    assert result["error"]["message"].startswith("presence.voice/id")
    assert "npc-nell-marrick" not in plugin_data(played.id, "character-presence", "presence")
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "character-presence" for s in g["specs"]] == ["character-presence.panel"]
