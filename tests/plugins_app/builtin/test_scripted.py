"""The plugins' offline scripted replies are accepted by their real tools (ToolExecutor)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from plugins_app.registry import module_load_by_path
from turns.engine.tools.context import CharacterRecord, InMemoryStateView

BUILTIN = Path(__file__).resolve().parents[3] / "plugins_app" / "builtin"
WORLD = Path(__file__).resolve().parents[3] / "sessions" / "worlds" / "yanhui-ferry"


def _script(plugin_id: str):
    return module_load_by_path(BUILTIN / plugin_id, plugin_id, "scripted.py").respond


def _tools(*names: str) -> list[dict]:
    return [{"name": n, "description": "", "parameters": {}} for n in names]


def test_story_turn_to_character_codex_and_guide(run_tool):
    world = yaml.safe_load((WORLD / "world.yaml").read_text(encoding="utf-8"))
    chars = json.loads((WORLD / "characters" / "characters.json").read_text(encoding="utf-8"))
    characters = [{"id": c["id"], "name": c["name"], "type": "npc", "aliases": c.get("aliases", []), "fields": c["fields"]} for c in chars]
    characters.append({"id": "player-x", "name": "林照", "type": "player", "aliases": []})
    context = {"locale": "zh-CN", "is_story": True, "turn": 1, "player_message": "我去码头看看那条船", "action_kind": "act",
               "world": {"name": world["name"], "summary": world["summary"], "lore": "雁回渡坐落在急弯处。水门二更落闸，五更开闸。"},
               "characters": characters}
    prose = _script("narrator")(context)["text"]
    assert prose.startswith("林照决定：我去码头看看那条船。")
    assert "船工老周" in prose

    turn = {**context, "is_story": False, "inputs": {"narrative": prose}, "tools": _tools("sync-characters"), "tool_results": []}
    call = _script("char-creator")(turn)["tool_calls"][0]
    assert call["name"] == "sync-characters"
    assert [c["name"] for c in call["arguments"]["creates"]] == ["船工老周"]

    codex_call = _script("codex")({**turn, "tools": _tools("sync-codex-entries", "runtime-done")})["tool_calls"][0]
    outcome = run_tool("codex", "sync-codex-entries", codex_call["arguments"], locale="zh-CN")
    assert outcome.status == "success", outcome.envelope
    assert "codex-船工老周" in outcome.content["created"]

    guide_call = _script("guide")({**turn, "tools": _tools("generate-guide")})["tool_calls"][0]
    assert run_tool("guide", "generate-guide", guide_call["arguments"], locale="zh-CN").status == "success"

    affinity_call = _script("affinity")({**turn, "tools": _tools("update-affinity", "runtime-done")})["tool_calls"][0]
    assert affinity_call["name"] in ("update-affinity", "runtime-done")


def test_character_form_for_a_builtin_world_passes_the_tool(run_tool):
    world = yaml.safe_load((WORLD / "world.yaml").read_text(encoding="utf-8"))
    turn = {"locale": "zh-CN", "world": {"name": world["name"]}, "character_schema": world["characterSchema"],
            "tools": _tools("create-character-form"), "tool_results": [], "inputs": {}}
    call = _script("char-creator")(turn)["tool_calls"][0]
    state = InMemoryStateView(character_schema=world["characterSchema"], characters=[CharacterRecord(id="npc-pei-zhao", name="裴照")])
    outcome = run_tool("char-creator", "create-character-form", call["arguments"], state, locale="zh-CN")
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["interaction"]["validation"]["name"] == "player-name"


def test_world_init_and_world_time_scripts_pass_their_tools(run_tool):
    call = _script("world-init")({"locale": "en-US", "tools": _tools("initialize-world"), "tool_results": []})["tool_calls"][0]
    outcome = run_tool("world-init", "initialize-world", call["arguments"])
    assert outcome.status == "success", outcome.envelope
    assert outcome.envelope["summary"] == "World initialized: 15 attributes, 2 dimensions."

    definition = yaml.safe_load((WORLD / "data" / "time.yaml").read_text(encoding="utf-8"))
    turn = {"locale": "zh-CN", "tools": _tools("advance-world-time"), "tool_results": [],
            "inputs": {"currentTime": {"definition": definition["definition"], "tick": 0}, "narrative": "x"}}
    call = _script("world-time")(turn)["tool_calls"][0]
    state = InMemoryStateView(plugin_data={("world-time", "definitions"): {"world": definition}})
    outcome = run_tool("world-time", "advance-world-time", call["arguments"], state, locale="zh-CN", inputs={"narrative": {"value": "x"}})
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["lastDelta"] == 2
