"""world-init: initialize-world, update-dimensions and dimension-rule-get through the ToolExecutor."""

from __future__ import annotations

import copy

import pytest

from turns.engine.tools.context import InMemoryStateView
from plugins_app.toolkit.state import WorldDimension
from tests.plugins_app.builtin.support import error_of, payloads

CATEGORIES = ["stats", "bio", "abilities", "equipment", "social"]


def _attributes(n: int = 15) -> list[dict]:
    attrs = [
        {"id": "fullName", "name": "Name", "type": "string", "category": "bio", "defaultValue": "Mira Vale"},
        {"id": "origin", "name": "Origin", "type": "enum", "category": "bio", "options": ["local", "stranger"], "defaultValue": "local"},
        {"id": "history", "name": "History", "type": "array", "category": "bio", "itemType": "string", "defaultValue": ["sailor"]},
        {"id": "family", "name": "Family", "type": "object", "category": "bio", "defaultValue": {"mother": "Ada"},
         "subSchema": [{"id": "mother", "name": "Mother", "type": "string", "category": "bio", "defaultValue": "Ada"}]},
        {"id": "grit", "name": "Grit", "type": "number", "category": "stats", "min": 0, "max": 10, "defaultValue": 5},
        {"id": "hurt", "name": "Hurt", "type": "boolean", "category": "stats", "defaultValue": False},
        {"id": "lamp", "name": "Lamp", "type": "string", "category": "equipment", "defaultValue": "storm lantern"},
        {"id": "knack", "name": "Knack", "type": "string", "category": "abilities"},
        {"id": "ties", "name": "Ties", "type": "map", "category": "social", "valueType": "string"},
    ]
    while len(attrs) < n:
        i = len(attrs)
        attrs.append({"id": f"extra{i}", "name": f"Extra {i}", "type": "number", "category": CATEGORIES[i % 5], "defaultValue": i})
    return attrs


DIMENSION = {
    "name": "Storm",
    "description": "How close the storm is.",
    "schema": {"type": "object", "properties": {"hoursLeft": {"type": "integer", "minimum": 0}, "note": {"type": "string", "maxLength": 20}},
               "required": ["hoursLeft"], "additionalProperties": False},
    "initialValue": {"hoursLeft": 12, "note": "far"},
    "updateRule": {"en-US": "Subtract the hours the clock moved.", "zh-CN": "按时钟走过的小时数递减。"},
}


def test_manifest_loads_with_three_tools(builtin_plugins):
    record = builtin_plugins.get("world-init")
    assert record.host_state == "loaded"
    assert sorted(record.registrations.tools) == ["dimension-rule-get", "initialize-world", "update-dimensions"]
    assert builtin_plugins.get("world-init").registrations.tools["dimension-rule-get"].options["definition"].annotations.read_only


def test_initialize_world_stages_schema_and_dimensions_together(run_tool):
    outcome = run_tool("world-init", "initialize-world", {"attributes": _attributes(), "definitions": {"storm": DIMENSION}})
    assert outcome.status == "success", outcome.envelope
    assert outcome.envelope == {
        "summary": "World initialized: 15 attributes, 1 dimensions.",
        "staged": {"count": 3, "kinds": ["character.schema.set", "dimension.initialize", "plugin.data.batch"],
                   "notice": "Staged: it takes effect when the turn ends and may still be rejected."},
    }
    [schema] = payloads(outcome, "character.schema.set")
    assert schema["types"] == ["npc", "companion"]
    by_id = {a["id"]: a for a in schema["attributes"]}
    # generated bio defaults are neutral starting values; numbers and booleans keep theirs
    assert by_id["fullName"]["defaultValue"] == ""
    assert "defaultValue" not in by_id["origin"]
    assert by_id["history"]["defaultValue"] == []
    assert by_id["family"]["defaultValue"] == {} and by_id["family"]["subSchema"][0]["defaultValue"] == ""
    assert by_id["grit"]["defaultValue"] == 5 and by_id["hurt"]["defaultValue"] is False
    assert by_id["lamp"]["defaultValue"] == "storm lantern"
    [init] = payloads(outcome, "dimension.initialize")
    assert init["values"] == {"storm": {"hoursLeft": 12, "note": "far"}}
    assert "updateRule" not in init["definitions"]["storm"]
    [batch] = payloads(outcome, "plugin.data.batch")
    assert batch["entries"][0]["key"] == "storm" and batch["entries"][0]["value"]["updateRule"] == DIMENSION["updateRule"]
    assert outcome.content["preGameDone"] is True and outcome.content["worldSchema"] == schema


def test_initialize_world_summary_in_chinese(run_tool):
    outcome = run_tool("world-init", "initialize-world", {"attributes": _attributes(16)}, locale="zh-CN")
    assert outcome.envelope["summary"] == "世界已初始化：16 项属性，0 个维度。"
    assert [p.kind for p in outcome.proposals] == ["character.schema.set"]


def test_author_dimensions_win_over_generated_definitions(run_tool):
    authored = {"tide": {"name": "Tide", "schema": {"type": "integer"}, "initialValue": 3, "updateRule": "x"}}
    outcome = run_tool("world-init", "initialize-world", {"attributes": _attributes(), "definitions": {"storm": DIMENSION}},
                       inputs={"worldDimensions": {"value": authored}})
    assert outcome.status == "success"
    [init] = payloads(outcome, "dimension.initialize")
    assert list(init["definitions"]) == ["tide"] and init["values"] == {"tide": 3}


@pytest.mark.parametrize(
    ("attributes", "definitions", "fragment"),
    [
        (_attributes()[:14], {}, "14 given, at least 15"),
        ([a for a in _attributes(20) if a["category"] != "social"], {}, "no attribute in category social"),
        (_attributes() + [dict(_attributes()[0])], {}, "'fullName' is used by another attribute"),
        (_attributes(), {"storm": {**DIMENSION, "initialValue": {"hoursLeft": -1}}}, "definitions.storm.initialValue"),
        ([{**_attributes()[0], "type": "enum"}] + _attributes()[1:], {}, "an enum attribute needs options"),
    ],
)
def test_initialize_world_rejects_invalid_input_and_stages_nothing(run_tool, attributes, definitions, fragment):
    outcome = run_tool("world-init", "initialize-world", {"attributes": attributes, "definitions": definitions})
    code, message = error_of(outcome)
    assert code == "invalid-input" and fragment in message
    assert outcome.proposals == []


# ---------------------------------------------------------------- update-dimensions


def _dims_state(settled: bool = False) -> InMemoryStateView:
    schema = DIMENSION["schema"]
    rooms_schema = {"type": "object", "additionalProperties": {"type": "object"}}
    data = {("world-init", "definitions"): {"storm": DIMENSION, "rooms": {"name": "Rooms", "schema": rooms_schema,
                                                                          "initialValue": {}, "updateRule": "Track rooms."}}}
    if settled:
        data[("world-init", "settlements")] = {"res-1": {"status": "settled"}}
    return InMemoryStateView(
        world_dimensions=[
            WorldDimension("storm", {"hoursLeft": 12, "note": "far"}, 2, "Storm", schema),
            WorldDimension("rooms", {"cellar": {"status": "locked"}, "call/0614": {"status": "open"}}, 5, "Rooms", rooms_schema),
        ],
        plugin_data=data,
    )


NARR = {"narrative": {"value": "The storm nears.", "source": {"resultId": "res-1", "turnNumber": 4}}}


def test_update_dimensions_stages_full_values_with_versions(run_tool):
    args = {
        "followsClock": ["storm"],
        "reason": "stray top-level reason is dropped",
        "updates": [
            {"id": "storm", "changes": [{"path": "hoursLeft", "value": 10, "reason": "dropped"}], "reason": "Two hours passed", "expectedVersion": 1},
            {"id": "rooms", "changes": [{"path": "cellar/status", "value": "open"}], "updates": []},
            {"id": "rooms", "changes": [{"path": "attic.status", "value": "found"}], "reason": "Found the attic"},
        ],
    }
    outcome = run_tool("world-init", "update-dimensions", args, _dims_state(), inputs={**NARR, "worldTime": {"value": {"elapsedThisTurn": 120}}})
    assert outcome.status == "success", outcome.envelope
    assert outcome.envelope["summary"] == "Dimensions updated: 2 change(s)."
    assert "data" not in outcome.envelope
    [update] = payloads(outcome, "dimension.update")
    assert update == {
        "updates": [
            {"id": "storm", "value": {"hoursLeft": 10, "note": "far"}, "expectedVersion": 2, "reason": "Two hours passed"},
            {"id": "rooms", "value": {"cellar": {"status": "open"}, "call/0614": {"status": "open"}, "attic": {"status": "found"}},
             "expectedVersion": 5, "reason": "Found the attic"},
        ],
        "source": {"resultId": "res-1", "turnNumber": 4},
    }
    # the receipt is the host's: the dimension.update applier writes it with the outcome (issue 25)
    assert payloads(outcome, "plugin.data") == []


def test_slash_is_kept_when_the_value_has_such_a_key(run_tool):
    args = {"updates": [{"id": "rooms", "changes": [{"path": "call/0614", "value": {"status": "closed"}}]}]}
    outcome = run_tool("world-init", "update-dimensions", args, _dims_state(), inputs=NARR)
    [update] = payloads(outcome, "dimension.update")
    assert update["updates"][0]["value"]["call/0614"] == {"status": "closed"}


def test_no_change_and_already_settled_texts(run_tool):
    outcome = run_tool("world-init", "update-dimensions", {"updates": []}, _dims_state(), inputs=NARR, locale="zh-CN")
    assert outcome.envelope["summary"] == "未记录改动。"
    assert payloads(outcome, "dimension.update") == [{"updates": [], "source": {"resultId": "res-1", "turnNumber": 4}}]
    assert run_tool("world-init", "update-dimensions", {"updates": []}, _dims_state(), inputs=NARR).envelope["summary"] == "No change recorded."
    settled = run_tool("world-init", "update-dimensions", {"updates": [{"id": "storm", "value": {"hoursLeft": 1}}]},
                       _dims_state(settled=True), inputs=NARR)
    assert settled.content == {"alreadySettled": True}
    assert settled.envelope == {"summary": "This turn's dimensions were already settled."}
    assert settled.proposals == []
    zh = run_tool("world-init", "update-dimensions", {"updates": []}, _dims_state(settled=True), inputs=NARR, locale="zh-CN")
    assert zh.envelope == {"summary": "本回合的维度已结算。"}
    changed = run_tool("world-init", "update-dimensions", {"updates": [{"id": "storm", "value": {"hoursLeft": 3}}]}, _dims_state(),
                       inputs=NARR, locale="zh-CN")
    assert changed.envelope["summary"] == "维度已更新：1 项改动。"


@pytest.mark.parametrize(
    ("updates", "code", "fragment"),
    [
        ([{"id": "storm", "value": {"hoursLeft": 1}, "changes": [{"path": "note", "value": "x"}]}], "invalid-input", "either value or changes"),
        ([{"id": "storm", "value": {"hoursLeft": 1}}, {"id": "storm", "reason": "again"}], "invalid-input", "appears more than once"),
        ([{"id": "rooms", "changes": [{"path": "__proto__.x", "value": 1}]}], "invalid-input", "reserved segment"),
        ([{"id": "storm", "changes": [{"path": "note", "value": "x" * 30}]}], "invalid-input", "storm: note"),
        ([{"id": "weather", "value": 1}], "not-found", '"weather" is not a dimension. Known dimensions: storm, rooms.'),
        ([{"id": "cellar", "changes": [{"path": "status", "value": "x"}]}], "not-found", 'it is an entry of dimension "rooms"'),
    ],
)
def test_update_dimensions_rejections(run_tool, updates, code, fragment):
    outcome = run_tool("world-init", "update-dimensions", {"updates": updates}, _dims_state(), inputs=NARR)
    got_code, message = error_of(outcome)
    assert got_code == code and fragment in message
    assert outcome.proposals == []


def test_clock_followers_must_be_settled_when_the_clock_moved(run_tool):
    inputs = {**NARR, "worldTime": {"value": {"display": "Nov 14, 19:40", "unit": "minute", "elapsedSinceStart": 180, "elapsedThisTurn": 120}}}
    code, message = error_of(run_tool("world-init", "update-dimensions", {"followsClock": ["storm", "nope"], "updates": []}, _dims_state(), inputs=inputs))
    assert code == "invalid-input"
    assert message.startswith("The world clock moved this turn: it is now Nov 14, 19:40; 120 minute(s) passed this turn and 180 minute(s)")
    assert "need an entry: storm." in message
    ok = run_tool("world-init", "update-dimensions", {"followsClock": ["storm"], "updates": [{"id": "storm", "reason": "Rule gives the same."}]},
                  _dims_state(), inputs=inputs)
    assert ok.status == "success" and ok.content == {"updateCount": 0}
    still = {**inputs, "worldTime": {"value": {**inputs["worldTime"]["value"], "elapsedThisTurn": 0}}}
    assert run_tool("world-init", "update-dimensions", {"followsClock": ["storm"], "updates": []}, _dims_state(), inputs=still).status == "success"


def test_unavailable_without_narrative_and_conflict_on_versions(run_tool):
    code, _ = error_of(run_tool("world-init", "update-dimensions", {"updates": []}, _dims_state()))
    assert code == "unavailable"
    inputs = {"narrative": {**NARR["narrative"], "readVersions": {"storm": 1}}}
    code, message = error_of(run_tool("world-init", "update-dimensions", {"updates": []}, _dims_state(), inputs=inputs))
    assert code == "conflict" and "v1 → v2" in message


# ---------------------------------------------------------------- dimension-rule-get


def test_dimension_rule_get_pages_the_localized_rule(run_tool):
    outcome = run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule", "limit": 10}, _dims_state(), inputs=NARR)
    assert outcome.status == "success"
    assert outcome.content == {"id": "storm", "version": 2, "content": "Subtract t", "complete": False, "nextOffset": 10}
    rest = run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule", "offset": 10}, _dims_state(), inputs=NARR)
    assert rest.content["complete"] is True and rest.content["content"] == "he hours the clock moved."
    zh = run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule"}, _dims_state(), inputs=NARR, locale="zh-CN")
    assert zh.content["content"] == "按时钟走过的小时数递减。"
    schema = run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "schema"}, _dims_state(), inputs=NARR)
    assert '"hoursLeft"' in schema.content["content"]


def test_dimension_rule_get_errors(run_tool):
    assert error_of(run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule"}, _dims_state()))[0] == "unavailable"
    code, message = error_of(run_tool("world-init", "dimension-rule-get", {"id": "fog", "part": "rule"}, _dims_state(), inputs=NARR))
    assert code == "not-found" and message == 'Dimension "fog" does not exist. Known dimensions: rooms, storm.'
    inputs = {"narrative": {**NARR["narrative"], "readVersions": {"rooms": 4}}}
    assert error_of(run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule"}, _dims_state(), inputs=inputs))[0] == "conflict"
    assert error_of(run_tool("world-init", "dimension-rule-get", {"id": "storm", "part": "rule", "limit": 6001}, _dims_state(), inputs=NARR))[0] == "invalid-input"
