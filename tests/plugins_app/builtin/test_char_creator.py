"""char-creator: create-character-form and the player-name form validator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turns.engine.tools.context import InMemoryStateView
from plugins_app.toolkit.state import CharacterRecord
from tests.plugins_app.builtin.support import error_of

WORLD = Path(__file__).resolve().parents[3] / "sessions" / "worlds" / "yanhui-ferry"


def _state() -> InMemoryStateView:
    import yaml

    world = yaml.safe_load((WORLD / "world.yaml").read_text(encoding="utf-8"))
    characters = [
        CharacterRecord(id=c["id"], name=c["name"], aliases=tuple(c.get("aliases") or ()), type=c.get("type", "npc"))
        for c in json.loads((WORLD / "characters" / "characters.json").read_text(encoding="utf-8"))
    ]
    return InMemoryStateView(characters=characters, character_schema=world["characterSchema"])


FORM = {
    "title": "你是谁",
    "submitLabel": "上船",
    "narrativeTemplate": "你叫{{characterName}}，在雁回渡做{{calling}}，是{{origin}}。",
    "fields": [
        {"type": "text", "name": "characterName", "label": "姓名"},
        {"type": "text", "name": "calling", "label": "营生", "defaultValue": "说书人"},
        {"type": "select", "name": "origin", "label": "来历", "options": ["本镇人", "外乡客"], "defaultValue": "外乡客"},
    ],
}


def _validator(builtin_plugins):
    return builtin_plugins.get("char-creator").registrations.form_validators["player-name"].target


def test_manifest_registers_the_tool_and_the_player_name_validator(builtin_plugins):
    record = builtin_plugins.get("char-creator")
    assert record.host_state == "loaded"
    assert list(record.registrations.tools) == ["create-character-form"]
    assert list(record.registrations.form_validators) == ["player-name"]


def test_emits_the_form_with_the_player_name_validator_and_a_preview(run_tool, builtin_plugins):
    outcome = run_tool("char-creator", "create-character-form", {**FORM, "validation": {"name": "other"}}, _state(), locale="zh-CN")
    assert outcome.status == "success", outcome.envelope
    interaction = outcome.content["interaction"]
    assert interaction["interactionId"] == "char-creation"
    assert interaction["fields"][0]["required"] is True
    assert interaction["validation"]["name"] == "player-name"
    assert "裴照" not in json.dumps(interaction["validation"], ensure_ascii=False)  # only salted digests travel
    assert outcome.content["filledNarrative"] == "你叫<characterName>，在雁回渡做说书人，是外乡客。"
    assert outcome.envelope == {"summary": "角色表单已发给玩家。预览：你叫<characterName>，在雁回渡做说书人，是外乡客。"}
    validate = _validator(builtin_plugins)
    data = interaction["validation"]["data"]
    assert validate({"characterName": "林照"}, data, {"locale": "zh-CN"}) is None
    assert validate({"characterName": " 裴 巡检"}, data, {"locale": "zh-CN"}) == {
        "field": "characterName", "message": "「裴 巡检」已经是这个世界里另一个角色的名字或别名，请换一个名字。"}
    assert validate({"characterName": "钱伯庸"}, data, {"locale": "en-US"}) == {
        "field": "characterName",
        "message": '"钱伯庸" is already the name or alias of another character in this world. Please choose a different name.'}


def test_lists_every_rejected_field_with_the_collectable_attributes(run_tool):
    form = {**FORM, "fields": FORM["fields"] + [
        {"type": "number", "name": "hp", "label": "HP", "defaultValue": 10},
        {"type": "text", "name": "condition", "label": "状况"},
    ]}
    schema = {"types": ["npc"], "attributes": [
        {"id": "calling", "name": "营生", "type": "string", "category": "bio"},
        {"id": "origin", "name": "来历", "type": "enum", "category": "bio", "options": ["本镇人", "外乡客"]},
        {"id": "hp", "name": "HP", "type": "number", "category": "stats"},
    ]}
    outcome = run_tool("char-creator", "create-character-form", form, InMemoryStateView(character_schema=schema))
    code, message = error_of(outcome)
    assert code == "invalid-input"
    assert message == (
        "These fields cannot be collected: hp: a number attribute keeps its default and is not collected; "
        "condition: not a world attribute. Collectable attributes in this world: calling (string), origin (enum: 本镇人, 外乡客)."
    )


def test_world_without_string_attributes_collects_only_the_name(run_tool):
    schema = {"types": ["npc"], "attributes": [{"id": "hp", "name": "HP", "type": "number", "category": "stats"}]}
    code, message = error_of(run_tool("char-creator", "create-character-form", FORM, InMemoryStateView(character_schema=schema)))
    assert code == "invalid-input"
    assert "This world has no string or enum attributes, so the form has only the characterName field." in message


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"fields": FORM["fields"][1:]}, "the required text field characterName is missing"),
        ({"narrativeTemplate": "你在雁回渡做{{calling}}。"}, "the {{characterName}} placeholder is missing"),
        ({"fields": [FORM["fields"][0], {**FORM["fields"][2], "options": ["本镇人", "海外来客"]}]}, "海外来客 are not options"),
        ({"fields": [FORM["fields"][0], {**FORM["fields"][1], "type": "number", "defaultValue": 1}]}, "a string attribute needs a text"),
        ({"fields": [FORM["fields"][0], {**FORM["fields"][1], "defaultValue": "未定"}]}, "'未定' is a placeholder"),
        ({"fields": [FORM["fields"][0], {**FORM["fields"][1], "defaultValue": "TBD"}]}, "'TBD' is a placeholder"),
        ({"fields": [FORM["fields"][0], {**FORM["fields"][1], "defaultValue": "做说书的"}], "narrativeTemplate": "{{characterName}}在渡口做{{calling}}。"},
         '"做" repeats at the placeholder boundary. Preview: <characterName>在渡口做做说书的。'),
    ],
)
def test_field_template_and_default_checks(run_tool, change, fragment):
    outcome = run_tool("char-creator", "create-character-form", {**FORM, **change}, _state())
    code, message = error_of(outcome)
    assert code == "invalid-input" and fragment in message


def test_english_boundary_repeat_and_enum_placeholder_allowed(run_tool):
    form = {
        "title": "Who are you", "submitLabel": "Go",
        "narrativeTemplate": "You are {{characterName}}, a {{calling}} keeper.",
        "fields": [{"type": "text", "name": "characterName", "label": "Name"},
                   {"type": "text", "name": "calling", "label": "Calling", "defaultValue": "lamp keeper"}],
    }
    schema = {"types": ["npc"], "attributes": [
        {"id": "calling", "name": "Calling", "type": "string", "category": "bio"},
        {"id": "origin", "name": "Origin", "type": "enum", "category": "bio", "options": ["unknown", "local"]},
    ]}
    code, message = error_of(run_tool("char-creator", "create-character-form", form, InMemoryStateView(character_schema=schema)))
    assert code == "invalid-input" and '"keeper" repeats at the placeholder boundary' in message
    ok = {**form, "narrativeTemplate": "You are {{characterName}}, {{origin}} by birth.",
          "fields": [form["fields"][0], {"type": "select", "name": "origin", "label": "Origin", "defaultValue": "unknown"}]}
    outcome = run_tool("char-creator", "create-character-form", ok, InMemoryStateView(character_schema=schema))
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["interaction"]["fields"][1]["options"] == ["unknown", "local"]
    assert outcome.envelope["summary"] == "Character form sent to the player. Preview: You are <characterName>, unknown by birth."


def test_same_turn_upstream_schema_wins_over_the_committed_one(run_tool):
    upstream = {"types": ["npc"], "attributes": [{"id": "calling", "name": "Calling", "type": "string", "category": "bio"}]}
    form = {**FORM, "narrativeTemplate": "你叫{{characterName}}，做{{calling}}。", "fields": FORM["fields"][:2]}
    outcome = run_tool("char-creator", "create-character-form", form, InMemoryStateView(), inputs={"worldSchema": {"value": upstream}})
    assert outcome.status == "success", outcome.envelope
