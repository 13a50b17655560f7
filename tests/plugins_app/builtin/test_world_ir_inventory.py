"""world-ir and inventory: submit-world-facts through the ToolExecutor, and sessions played over
HTTP with the scripted model where the hero's items reach the bag (ledger, vocabulary, ui)."""
from __future__ import annotations

import json

import pytest

from turns.engine.tools.context import InMemoryStateView
from plugins_app.toolkit import CharacterRecord
from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data, ui_parts
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.support import error_of, payloads

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "world-ir", "inventory"]
HERO = CharacterRecord(id="player-ada", name="Ada", type="player")
FACTS = {
    "summary": "Ada takes the brass key from the keeper.",
    "entities": [{"id": "brass-key", "type": "item", "name": "Brass key"}],
    "relations": [],
    "events": [{"id": "key-given", "type": "inventory_change", "participantIds": ["player-ada"],
                "attributes": {"item": "brass-key", "holder": "player-ada", "operation": "gain"}}],
    "statements": [],
}


def _state() -> InMemoryStateView:
    return InMemoryStateView(characters=[HERO])


def test_manifests_load(builtin_plugins):
    world_ir = builtin_plugins.get("world-ir")
    assert world_ir.host_state == "loaded" and list(world_ir.registrations.tools) == ["submit-world-facts"]
    inventory = builtin_plugins.get("inventory")
    assert inventory.host_state == "loaded" and sorted(inventory.registrations.rpcs) == ["item-op", "open-bag"]
    assert {r.id: r.stage for r in inventory.manifest.runtimes} == {"inventory/ledger": "post-turn", "inventory/vocabulary": "pre-turn"}


def test_facts_declare_roster_characters_and_are_the_content(run_tool):
    outcome = run_tool("world-ir", "submit-world-facts", FACTS, _state())
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["schemaVersion"] == 1
    assert outcome.content["entities"][-1] == {"id": "player-ada", "type": "character", "name": "Ada"}
    # the facts are the runtime's output (its result, runtime output and trace keep them): no plugin-data copy
    assert outcome.proposals == []


@pytest.mark.parametrize("change, needle", [
    ({"events": [{**FACTS["events"][0], "attributes": {**FACTS["events"][0]["attributes"], "item": "nothing"}}]}, "attributes.item"),
    ({"events": [{**FACTS["events"][0], "attributes": {**FACTS["events"][0]["attributes"], "operation": "steal"}}]}, "attributes.operation"),
    ({"relations": [{"id": "r", "type": "TRUSTS", "from": "player-ada", "to": "ghost"}]}, "relations[0].to"),
    ({"events": [{"id": "q", "type": "quest_change", "attributes": {"quest": "Find the key", "status": "maybe"}}]}, "attributes.status"),
    ({"statements": [{"id": "brass-key", "type": "lore", "content": "x"}]}, "already used"),
])
def test_refuses_broken_references(run_tool, change, needle):
    code, message = error_of(run_tool("world-ir", "submit-world-facts", {**FACTS, **change}, _state()))
    assert code == "invalid-input" and needle in message


@pytest.mark.django_db(transaction=True)
def test_items_the_hero_takes_and_wears_reach_the_bag(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, kind="act", name="Ada Quill",
                       says=["I pick up the brass key and put on the oilskin coat.", "I climb the tower stair.",
                             "I drop the brass key."])
    assert {"world-ir", "inventory"} <= set(played.created["activePlugins"]) and not failed_runtimes(played)
    assert not played.created.get("unmetRequirements")
    assert completed(played, "world-ir") == ["success"] * 4
    assert completed(played, "inventory/ledger") == ["success"] * 4
    items = plugin_data(played.id, "inventory", "items")
    assert items["oilskin-coat"] == {**items["oilskin-coat"], "name": "Oilskin coat", "quantity": 1, "equipped": True}
    assert items["brass-key"]["quantity"] == 0  # dropped on the last turn: a tombstone
    changes = [p["content"]["changes"] for p in ui_parts(played) if p["type"] == "inventory.changes"]
    assert [[c["operation"] for c in turn] for turn in changes] == [["equip", "gain"], ["lose"]]
    # a quiet turn wrote nothing; the vocabulary told the extractor what the bag holds
    last = [c for c in played.model_calls(4) if c["runtimeId"] == "world-ir"][0]
    assert '"name": "Oilskin coat"' in last["messages"][0]["content"]  # runtime-inputs.vocabulary
    # the panel's actions over plugin-rpc
    rpc = lambda action, payload=None: client.post(f"/api/sessions/{played.id}/plugin-rpc", json.dumps(
        {"kind": "action", "pluginId": "inventory", "action": action, "payload": payload or {}}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {played.token}")
    opened = rpc("open-bag")
    assert opened.status_code == 200, opened.content
    assert [i["id"] for i in opened.json()["result"]["items"]] == ["oilskin-coat"]
    assert rpc("item-op", {"itemId": "oilskin-coat", "op": "unequip"}).json()["result"]["item"]["equipped"] is False
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    right = [s["id"] for g in specs["right"] if g["pluginId"] == "inventory" for s in g["specs"]]
    assert right == ["inventory.panel"]


@pytest.mark.django_db(transaction=True)
def test_zh_session_records_what_the_hero_takes(client):
    played = play_with(client, "yanhui-ferry", PLUGINS, kind="act", name="林照", says=["我拿起船舱里的灯笼，仔细照了照。"])
    assert not failed_runtimes(played)
    facts = [f["payload"]["input"] for f in played.frames("tool.calling") if f["payload"]["tool"] == "submit-world-facts"]
    assert len(facts) == 2 and all(f["schemaVersion"] == 1 for f in facts)
    assert not plugin_data(played.id, "world-ir", "facts")  # the facts travel as the runtime's output only
    items = plugin_data(played.id, "inventory", "items")
    assert [(v["name"], v["quantity"]) for v in items.values()] == [("船舱里的灯笼", 1)]


@pytest.mark.django_db(transaction=True)
def test_emberback_seeds_the_bag_and_pulls_in_world_ir(client, settings):
    import shutil
    from pathlib import Path

    from tests.shared_paths import FIXTURES_DIR

    target = Path(settings.COVEL_HOME) / "worlds" / "emberback"
    shutil.copytree(FIXTURES_DIR / "upstream" / "worlds" / "emberback", target)
    try:
        plan = client.get("/api/worlds/emberback/plugin-plan").json()
        assert "inventory" in plan["defaultPluginIds"]
        assert "inventory" not in {m["pluginId"] for m in plan["missing"]}
        played = play_with(client, "emberback", None, kind="act", name="Ada Quill", locale="en-US",
                           says=["I pick up the signal probe."])
        # inventory requires world-ir-provider@1; world-ir, its sole provider, joined by itself
        assert {"inventory", "world-ir"} <= set(played.created["activePlugins"]) and not failed_runtimes(played)
        opened = client.post(f"/api/sessions/{played.id}/plugin-rpc", json.dumps(
            {"kind": "action", "pluginId": "inventory", "action": "open-bag"}), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {played.token}").json()["result"]
        names = [i["name"] for i in opened["items"]]
        assert {"Field radio", "Trade chits", "Signal probe"} <= set(names), names
        assert names[:2] == ["Field radio", "Linekeeper kit"]  # equipped first
    finally:
        shutil.rmtree(target, ignore_errors=True)
