"""The builtin packs with the catalogue plugins (issue 20): plugin-plan and session creation
resolve traditional-story and low-cost (requires → auto-added providers, the core-replacement
rule, no unmet requirements), the upstream worlds start with nothing unmet, and one 10-turn
traditional-story game in an upstream world with 0 failed runtimes."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.plugins_app.builtin.catalogue_support import failed_runtimes, play_with, plugin_data
from tests.plugins_app.builtin.catalogue_worlds import upstream_world, world_variant

pytestmark = pytest.mark.django_db(transaction=True)

PACKS = yaml.safe_load(open(__import__("pathlib").Path(__file__).resolve().parents[3] / "plugins_app" / "packs" / "builtin.yaml", encoding="utf-8"))
MY_PLUGINS = {"core-quest", "story-events", "dice-check", "tabletop-rules", "npc-graph", "living-world-rules"}


def _pack(pack_id: str) -> dict:
    return next(p for p in PACKS if p["id"] == pack_id)


def _create(client, body) -> dict:
    response = client.post("/api/sessions", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def test_traditional_story_resolves_with_its_providers(client):
    plan = client.get("/api/worlds/hollow-reach-light/plugin-plan").json()
    assert plan["selectedPackId"] == "traditional-story" and not plan["unmetRequirements"] and not plan["missing"]
    assert {"npc-graph", "living-world-rules"} <= set(plan["defaultPluginIds"])
    created = _create(client, {"worldId": "hollow-reach-light", "plugins": plan["defaultPluginIds"]})
    # npc-graph requires world-ir-provider@1: world-ir, its sole provider, joined by itself
    assert {"npc-graph", "world-ir", "living-world-rules"} <= set(created["activePlugins"])
    assert not created.get("unmetRequirements")


def test_low_cost_resolves(client):
    target = world_variant("reach-low-cost", manifest={"pluginPolicy": {"presetId": "low-cost"}})
    try:
        plan = client.get("/api/worlds/reach-low-cost/plugin-plan").json()
        assert plan["selectedPackId"] == "low-cost" and not plan["unmetRequirements"] and not plan["missing"], plan
        assert plan["defaultPluginIds"][: len(_pack("low-cost")["requested"])] == _pack("low-cost")["requested"]
        created = _create(client, {"worldId": "reach-low-cost", "plugins": plan["defaultPluginIds"]})
        assert {"living-world-rules", "cost-gate", "narrator"} <= set(created["activePlugins"])
        assert not created.get("unmetRequirements")
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_requested_narrative_engine_replaces_the_core_narrator(client, builtin_plugins):
    engine = builtin_plugins.get("chat-mode-narrator")
    assert engine is not None and engine.is_loaded  # a builtin plugin: never skipped
    requested = [p if p != "narrator" else "chat-mode-narrator" for p in _pack("traditional-story")["requested"]]
    requested += ["scene-cast", "scene-stage"]  # what chat-mode-narrator itself requires
    created = _create(client, {"worldId": "hollow-reach-light", "plugins": requested})
    assert "chat-mode-narrator" in created["activePlugins"] and "narrator" not in created["activePlugins"], created["metadata"]
    assert {"npc-graph", "world-ir"} <= set(created["activePlugins"])


@pytest.mark.parametrize("world_id", ["emberback", "haruka-academy", "mistport"])
def test_upstream_worlds_start_with_nothing_unmet(client, world_id):
    target = upstream_world(world_id)
    try:
        plan = client.get(f"/api/worlds/{world_id}/plugin-plan").json()
        assert not plan["unmetRequirements"] and not plan["missing"], (plan["unmetRequirements"], plan["missing"])
        created = _create(client, {"worldId": world_id, "plugins": plan["defaultPluginIds"]})
        assert not created.get("unmetRequirements"), created["unmetRequirements"]
        assert set(plan["defaultPluginIds"]) <= set(created["activePlugins"])
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_ten_turns_of_traditional_story_in_mistport(client):
    target = upstream_world("mistport")
    try:
        plan = client.get("/api/worlds/mistport/plugin-plan").json()
        assert plan["selectedPackId"] == "traditional-story"
        played = play_with(client, "mistport", plan["defaultPluginIds"], name="Ada Quill", locale="en-US", says=[
            "I look around the harbour.", "I ask who runs the Salt Fangs.", "I follow the fog line to the old pier.",
            "I wait and listen.", "I promise to find Old Qi before the tide turns.", "I ask about the Key.",
            "I search the archive shelves.", "I rest for a moment.", "I ask Iron Meg what she wants.", "I head back to the inn."])
        assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
        assert len(played.frames("narrative.completed")) == 11
        assert plugin_data(played.id, "living-world-rules", "rules")  # the tide rules were delivered
        assert plugin_data(played.id, "npc-graph", "nodes")
    finally:
        shutil.rmtree(target, ignore_errors=True)
