"""scene-cast: the pre-turn cast choice played over HTTP with the scripted model — the addressed
character leads, the selection is stored under active-cast/current and published as scene-cast@1
(its RuntimeOutput), the activeSpeakerCount setting bounds it, and the panel is listed by ui-specs."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import (
    completed,
    failed_runtimes,
    play_with,
    plugin_data,
)
from tests.plugins_app.builtin.play_support import get_json
from turns.models import RuntimeOutput

BASE = ["pregame", "world-init", "char-creator", "narrator"]


def structured(session_id: str, runtime_id: str) -> list[dict]:
    """The structured outputs of one runtime's successful runs, oldest first."""
    rows = RuntimeOutput.objects.filter(session_id=session_id, runtime_id=runtime_id, status="success").order_by("created_at", "id")
    return [r.output["results"][0]["structured"] for r in rows if (r.output or {}).get("results")]


def test_manifest_declares_the_upstream_contract_setting_and_panel(builtin_plugins):
    record = builtin_plugins.get("scene-cast")
    assert record.host_state == "loaded" and record.manifest.provided_contracts == ["scene-cast@1"]
    [runtime] = record.manifest.runtimes
    assert (runtime.runtime_type, runtime.stage, runtime.output_contract) == ("function", "pre-turn", "scene-cast@1")
    assert [s["key"] for s in record.manifest.contributes.settings] == ["activeSpeakerCount"]
    assert record.manifest.contributes.ui["right"] == ["./ui/scene-cast-panel.json"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("world, says, hero, addressed, context_word", [
    ("hollow-reach-light", ["Wenna Pascoe, what did you see on the stairs?"], "Ada Quill", "npc-wenna-pascoe", "Active cast"),
    ("yanhui-ferry", ["裴照，押纲官到底去了哪里？"], "林照", "npc-pei-zhao", "活跃角色"),
])
def test_the_addressed_character_leads_the_cast(client, world, says, hero, addressed, context_word):
    played = play_with(client, world, [*BASE, "scene-cast"], says=says, name=hero)
    assert "scene-cast" in played.created["activePlugins"] and not failed_runtimes(played)
    assert completed(played, "scene-cast")[-1] == "success"
    current = plugin_data(played.id, "scene-cast", "active-cast")["current"]
    assert current["speakers"][0] == {"id": addressed, "name": current["speakers"][0]["name"], "type": "npc", "reason": "addressed"}
    assert len(current["speakers"]) == 2  # the default activeSpeakerCount
    output = structured(played.id, "scene-cast")[-1]
    assert output["speakers"] == current["speakers"]
    assert context_word in output["activeCastContext"] and f"id: {addressed}" in output["activeCastContext"]
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    mine = [s["id"] for group in specs["right"] if group["pluginId"] == "scene-cast" for s in group["specs"]]
    assert mine == ["scene-cast.panel"], specs
