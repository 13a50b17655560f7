"""scene-prompts: generate-scene-prompts through the ToolExecutor, and a dialogue-style session
played over HTTP with the scripted model (its data, ui block and stage.choices@1 slot)."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data, ui_parts
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.support import error_of, payloads

ARGS = {
    "scene": "Harbour at dusk",
    "recap": "The keeper rang the bell twice and will not say why.",
    "decision": "Do you press the keeper or go to the bell?",
    "prompts": [
        {"text": "Why did you ring it twice?", "kind": "ask"},
        {"text": "I climb to the bell.", "kind": "act"},
        {"text": "I wait and watch the keeper.", "kind": "observe"},
    ],
}


def test_manifest_loads_with_the_upstream_contracts(builtin_plugins):
    record = builtin_plugins.get("scene-prompts")
    assert record.host_state == "loaded" and list(record.registrations.tools) == ["generate-scene-prompts"]
    manifest = record.manifest
    assert [r.stage for r in manifest.runtimes] == ["post-turn"]
    assert manifest.contributes.extensions[0]["slot"] == "stage.choices@1"
    assert manifest.contributes.ui["message"] == ["./ui/scene-prompts-block.json"]


def test_writes_latest_and_turn_and_a_block(run_tool):
    outcome = run_tool("scene-prompts", "generate-scene-prompts", ARGS)
    assert outcome.status == "success", outcome.envelope
    [batch] = payloads(outcome, "plugin.data.batch")
    assert [(e["namespace"], e["key"]) for e in batch["entries"]] == [("scenes", "latest"), ("scenes", "turn-3")]
    assert batch["entries"][0]["value"] == {**ARGS, "turn": 3}
    [ui] = payloads(outcome, "ui.render")
    assert ui["parts"][0]["type"] == "scene-prompts.block"
    assert outcome.envelope["summary"] == "Scene prompts ready: 3 lines."
    assert run_tool("scene-prompts", "generate-scene-prompts", ARGS, locale="zh-CN").envelope["summary"] == "场景快捷回复已生成：3 条。"


@pytest.mark.parametrize("prompts, needle", [
    (ARGS["prompts"][:2], "prompts"),
    (ARGS["prompts"] + [{"text": "i climb to the bell", "kind": "act"}], "appears twice"),
    ([{**p, "kind": "ask"} for p in ARGS["prompts"]], "two different kinds"),
])
def test_refuses_bad_lines(run_tool, prompts, needle):
    outcome = run_tool("scene-prompts", "generate-scene-prompts", {**ARGS, "prompts": prompts})
    code, message = error_of(outcome)
    assert code == "invalid-input" and needle in message and outcome.proposals == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("world, locale, says, hero", [
    ("hollow-reach-light", None, ["I climb the tower stair.", "I ask about the lamp."], "Ada Quill"),
    ("yanhui-ferry", None, ["我去码头看看那条船。", "我向裴照打听押纲官的下落。"], "林照"),
])
def test_a_session_with_scene_prompts_offers_lines_every_turn(client, world, locale, says, hero):
    played = play_with(client, world, ["pregame", "world-init", "char-creator", "narrator", "scene-prompts"],
                       says=says, name=hero, locale=locale)
    assert "scene-prompts" in played.created["activePlugins"] and not failed_runtimes(played)
    assert completed(played, "scene-prompts") == ["success"] * 3  # the opening and each turn
    latest = plugin_data(played.id, "scene-prompts", "scenes")["latest"]
    assert 3 <= len(latest["prompts"]) <= 6 and len({p["kind"] for p in latest["prompts"]}) >= 2
    assert any(p["type"] == "scene-prompts.block" for p in ui_parts(played, len(played.streams) - 1))
    slots = get_json(client, played, f"/api/sessions/{played.id}/ui-slots?slot=stage.choices@1")["items"]
    assert slots[0]["value"]["prompts"] == [{"text": p["text"], "kind": p["kind"]} for p in latest["prompts"]]
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    mine = [s["id"] for group in specs["message"] if group["pluginId"] == "scene-prompts" for s in group["specs"]]
    assert mine == ["scene-prompts.block"], specs
