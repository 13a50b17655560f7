"""The plugins' offline scripted replies are accepted by their real tools (ToolExecutor)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from plugins_app.registry import module_load_by_path
from turns.engine.tools.context import InMemoryStateView
from plugins_app.toolkit.state import CharacterRecord

BUILTIN = Path(__file__).resolve().parents[3] / "plugins_app" / "builtin"
WORLD = Path(__file__).resolve().parents[3] / "sessions" / "worlds" / "yanhui-ferry"


def _script(plugin_id: str):
    return module_load_by_path(BUILTIN / plugin_id, plugin_id, "scripted.py").respond


def _tools(*names: str) -> list[dict]:
    return [{"name": n, "description": "", "parameters": {}} for n in names]


def test_story_turn_to_character_codex_and_guide(run_tool):
    world = yaml.safe_load((WORLD / "world.yaml").read_text(encoding="utf-8"))
    chars = json.loads((WORLD / "characters" / "characters.json").read_text(encoding="utf-8"))
    lorebook = yaml.safe_load((WORLD / "data" / "lorebook.yaml").read_text(encoding="utf-8"))
    characters = [{"id": c["id"], "name": c["name"], "type": "npc", "aliases": c.get("aliases", []), "fields": c["fields"],
                   "description": c["description"]} for c in chars]
    characters.append({"id": "player-x", "name": "林照", "type": "player", "aliases": []})
    context = {"session_id": "s-1", "locale": "zh-CN", "is_story": True, "turn": 1, "player_message": "我向四娘打听漕帮的事",
               "action_kind": "say", "world": {"name": world["name"], "summary": world["summary"], "lore": ""},
               "lorebook": lorebook, "characters": characters, "character_schema": world["characterSchema"],
               "messages": [{"role": "assistant", "content": "小满一声尖叫。"}]}
    prose = _script("narrator")(context)["text"]
    assert prose.startswith("林照向四娘打听漕帮的事。韩四娘泼辣爽利")  # first person → the hero; the alias's owner answers
    assert "漕帮是跑船的船户、纤夫结成的帮会，管着上下游的码头活计，也做些见不得光的买卖。" in prose  # keyed lore, whole sentences
    assert _script("narrator")(context)["text"] == prose  # deterministic

    turn = {**context, "is_story": False, "inputs": {"narrative": prose}, "tools": _tools("sync-characters"), "tool_results": []}
    call = _script("char-creator")(turn)["tool_calls"][0]
    assert call["name"] == "sync-characters" and call["arguments"]["creates"] == []
    assert call["arguments"]["updates"] == [{"id": "npc-han-siniang", "fields": {"attitude": call["arguments"]["updates"][0]["fields"]["attitude"]}}]
    assert call["arguments"]["updates"][0]["fields"]["attitude"].endswith("和林照谈过「漕帮」。")

    codex_call = _script("codex")({**turn, "tools": _tools("sync-codex-entries", "runtime-done")})["tool_calls"][0]
    outcome = run_tool("codex", "sync-codex-entries", codex_call["arguments"], locale="zh-CN")
    assert outcome.status == "success", outcome.envelope
    assert [e["title"] for e in codex_call["arguments"]["entries"]][:2] == ["漕帮", "韩四娘"]

    guide_call = _script("guide")({**turn, "tools": _tools("generate-guide")})["tool_calls"][0]
    assert run_tool("guide", "generate-guide", guide_call["arguments"], locale="zh-CN").status == "success"
    assert "韩四娘" in guide_call["arguments"]["prompts"][2]["text"]

    affinity_call = _script("affinity")({**turn, "tools": _tools("update-affinity", "runtime-done")})["tool_calls"][0]
    assert affinity_call["arguments"]["changes"][0]["name"] == "韩四娘" and affinity_call["arguments"]["changes"][0]["delta"] == 3


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
