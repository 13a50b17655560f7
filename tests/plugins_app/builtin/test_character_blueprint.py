"""character-blueprint: the import runtime stores a blueprint and, with instantiate, upserts the
session character the narrator then voices (persona in its fields); the presence runtime shares
character-presence's checks under its own namespace; world data fills blueprints on import."""
from __future__ import annotations

import pytest

from sessions.models import Character
from tests.plugins_app.builtin.catalogue_support import play_with, plugin_data
from tests.plugins_app.builtin.rpc_support import rpc, upstream_world
from tests.plugins_app.builtin.test_character_presence import PRESENCE

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "character-blueprint"]
BLUEPRINT = {
    "schemaVersion": 1, "id": "mentor-lin", "name": "Lin Yue", "role": "npc", "aliases": ["the mentor"],
    "description": "A cautious sword mentor.", "attributes": {"realm": "Foundation"},
    "persona": {"summary": "Precise and patient.", "traits": ["disciplined", "observant"], "voice": "Short, exact sentences."},
    "dialogueExamples": [{"user": "I can win quickly.", "character": "Quickly is where errors hide."}],
}


def run(client, played, runtime_id: str, payload: dict) -> dict:
    response = rpc(client, played, {"kind": "runtime", "pluginId": "character-blueprint", "runtimeId": runtime_id, "payload": payload})
    assert response.status_code == 200, response.content
    [result] = [r for r in response.json()["runtimeResults"] if r["runtimeId"] == runtime_id]
    return result


@pytest.mark.django_db(transaction=True)
def test_import_instantiate_and_presence(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, says=["I wait by the quay."], name="Ada Quill")
    # stored only
    assert run(client, played, "character-blueprint/import", {"blueprint": BLUEPRINT})["status"] == "ok"
    assert plugin_data(played.id, "character-blueprint", "blueprints")["mentor-lin"] == BLUEPRINT
    assert not Character.objects.filter(session_id=played.id, character_id="mentor-lin").exists()
    # instantiated: a session character with the attributes and the persona as one line
    assert run(client, played, "character-blueprint/import", {"blueprint": BLUEPRINT, "instantiate": True})["status"] == "ok"
    lin = Character.objects.get(session_id=played.id, character_id="mentor-lin")
    assert (lin.name, lin.type, lin.aliases, lin.description) == ("Lin Yue", "npc", ["the mentor"], "A cautious sword mentor.")
    assert lin.fields == {"realm": "Foundation", "persona": "Precise and patient; disciplined, observant; Short, exact sentences"}
    # the next turn's narrator sees the new character: addressed by name, Lin Yue answers
    from tests.plugins_app.builtin.play_support import act
    frames = act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": "Lin Yue, will you teach me?"}]})
    prose = [f["payload"]["text"] for f in frames if f["type"] == "narrative.completed"][-1]
    assert "Lin Yue" in prose
    # a blueprint that breaks the schema is refused and nothing is stored
    failed = run(client, played, "character-blueprint/import", {"blueprint": {**BLUEPRINT, "id": "bad id!"}})
    assert failed["status"] == "failed" and failed["error"]["message"].startswith("blueprint.id")
    # presence: character-presence's record, this plugin's namespace
    assert run(client, played, "character-blueprint/presence", {"presence": {**PRESENCE, "characterId": "mentor-lin"}})["status"] == "ok"
    assert plugin_data(played.id, "character-blueprint", "presence")["mentor-lin"]["displayName"] == "Lin Yue"


@pytest.mark.django_db(transaction=True)
def test_world_data_fills_the_blueprints(client):
    with upstream_world("haruka-academy"):
        played = play_with(client, "haruka-academy", PLUGINS, says=["I look around the classroom."], name="林照")
        blueprints = plugin_data(played.id, "character-blueprint", "blueprints")
        assert blueprints and all(b.get("name") for b in blueprints.values() if isinstance(b, dict))
