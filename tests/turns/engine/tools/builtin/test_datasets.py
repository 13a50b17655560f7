"""Dataset tools <d>-get|list|upsert|update generated from contributes.datasets."""

import pytest

from tests.turns.engine.tools.support import run
from turns.engine.tools import DatasetDeclaration, InMemoryStateView
from turns.engine.tools.builtin.datasets import DatasetSelectionError, dataset_tools
from plugins_app.toolkit.ids import dataset_key

ITEM_SCHEMA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "weight": {"type": "number", "minimum": 0}, "tags": {"type": "array", "items": {"type": "string"}}}}
ITEMS = DatasetDeclaration("items", ITEM_SCHEMA, key_field="name", ops=("set", "merge", "append", "delete", "increment"),
                           description="Things the party carries.")
NOTES = DatasetDeclaration("notes", {"type": "object"}, ops=("set",))


def _state(rows=None):
    return InMemoryStateView(plugin_data={("demo", "items"): rows or {}, ("demo", "notes"): {}})


def _tools(selection=("items",)):
    return dataset_tools({"items": ITEMS, "notes": NOTES}, list(selection))


def test_dataset_key_normalises_like_the_spec():
    assert dataset_key("  Iron\u3000 Sword ") == "iron sword"
    assert dataset_key("ＡＢＣ") == "abc"


def test_tools_are_derived_from_ops_and_selection():
    assert sorted(_tools()) == ["items-get", "items-list", "items-update", "items-upsert"]
    assert sorted(_tools(["notes"])) == ["notes-get", "notes-list", "notes-upsert"]
    assert sorted(_tools([{"dataset": "items", "tools": ["get"]}])) == ["items-get"]
    tools = _tools()
    assert tools["items-get"].annotations.concurrency_safe is True
    assert tools["items-upsert"].annotations.to_json() == {"readOnly": False, "stagesWrites": True, "idempotent": True, "concurrencySafe": False}
    assert tools["items-update"].annotations.idempotent is False
    assert tools["items-upsert"].description.endswith("Things the party carries.")


@pytest.mark.parametrize(("selection", "field"), [
    (["ghost"], "agent.tools.datasets.0"),
    (["items", "items"], "agent.tools.datasets.1"),
    ([{"dataset": "notes", "tools": ["update"]}], "agent.tools.datasets.0.tools.0"),
])
def test_bad_selections_are_reported_on_their_field(selection, field):
    with pytest.raises(DatasetSelectionError) as info:
        _tools(selection)
    assert info.value.field == field


def test_generated_names_may_not_clash_or_exceed_64_chars():
    with pytest.raises(DatasetSelectionError):
        dataset_tools({"world-dimension": DatasetDeclaration("world-dimension", {"type": "object"})}, ["world-dimension"])
    long = "d" * 58
    with pytest.raises(DatasetSelectionError):
        dataset_tools({long: DatasetDeclaration(long, {"type": "object"})}, [long])


def test_upsert_stores_under_the_normalised_key_and_keeps_the_field():
    out = run("items-upsert", {"record": {"name": "Iron Sword", "weight": 3}}, _state(), runtime_tools=_tools())
    assert out.content == {"key": "iron sword", "record": {"name": "Iron Sword", "weight": 3}, "created": True}
    assert out.proposals[0].payload == {"namespace": "items", "key": "iron sword", "ops": [{"op": "set", "value": {"name": "Iron Sword", "weight": 3}}]}
    assert out.envelope["staged"]["kinds"] == ["plugin.data.update"]


def test_upsert_replaces_a_row_found_by_exact_then_normalised_key():
    state = _state({"Sword_01": {"name": "Sword_01"}, "sword_01": {"name": "sword_01"}, "iron sword": {"name": "Iron Sword"}})
    exact = run("items-upsert", {"record": {"name": "Sword_01", "weight": 1}}, state, runtime_tools=_tools())
    assert exact.content["key"] == "Sword_01" and exact.content["created"] is False
    normal = run("items-get", {"key": "IRON  SWORD"}, state, runtime_tools=_tools())
    assert normal.content["key"] == "iron sword"
    assert run("items-get", {"key": "sword_01"}, state, runtime_tools=_tools()).content["record"] == {"name": "sword_01"}


def test_upsert_without_key_field_needs_a_key_and_rejects_empty_or_long_keys():
    tools = _tools(["notes"])
    assert run("notes-upsert", {"key": "Gate", "record": {"open": True}}, _state(), runtime_tools=tools).content["key"] == "gate"
    assert run("notes-upsert", {"key": "   ", "record": {}}, _state(), runtime_tools=tools).envelope["error"]["code"] == "invalid-input"
    assert run("notes-upsert", {"key": "k" * 257, "record": {}}, _state(), runtime_tools=tools).envelope["error"]["code"] == "invalid-input"


def test_schema_violation_lists_errors_and_size_limit_is_checked():
    bad = run("items-upsert", {"record": {"name": "Rock", "weight": -1}}, _state(), runtime_tools=_tools())
    assert bad.envelope["error"]["code"] == "invalid-input" and "weight" in bad.envelope["error"]["message"]
    huge = run("notes-upsert", {"key": "big", "record": {"text": "x" * (256 * 1024)}}, _state(), runtime_tools=_tools(["notes"]))
    assert huge.envelope["error"]["message"].startswith("The value for notes/big is 262155 bytes; the limit for one value is 262144 bytes.")


def test_get_and_update_not_found_hints_depend_on_selected_tools():
    miss = run("items-get", {"key": "nope"}, _state(), runtime_tools=_tools())
    assert miss.envelope["error"] == {"code": "not-found", "message": "No items record 'nope'.", "hint": "List records with items-list."}
    only_get = _tools([{"dataset": "items", "tools": ["get"]}])
    assert "hint" not in run("items-get", {"key": "nope"}, _state(), runtime_tools=only_get).envelope["error"]
    upd = run("items-update", {"key": "nope", "ops": [{"op": "increment", "path": "weight", "by": 1}]}, _state(), runtime_tools=_tools())
    assert upd.envelope["error"]["hint"] == "Create it with items-upsert."


def test_update_applies_ops_and_stages_them():
    state = _state({"rope": {"name": "Rope", "weight": 2, "tags": []}})
    out = run("items-update", {"key": "Rope", "ops": [{"op": "increment", "path": "weight", "by": 1}, {"op": "append", "path": "tags", "value": "long"}]},
              state, runtime_tools=_tools())
    assert out.content == {"key": "rope", "record": {"name": "Rope", "weight": 3, "tags": ["long"]}}
    assert out.proposals[0].payload["ops"][0] == {"op": "increment", "path": "weight", "by": 1}
    gone = run("items-update", {"key": "rope", "ops": [{"op": "delete"}]}, state, runtime_tools=_tools())
    assert gone.content == {"key": "rope", "deleted": True}


def test_update_errors_invalid_op_conflict_and_key_change():
    state = _state({"rope": {"name": "Rope", "weight": 2, "tags": []}})
    tools = _tools()
    not_allowed = run("items-update", {"key": "rope", "ops": [{"op": "set", "value": {}}]}, state, runtime_tools=tools)
    assert not_allowed.envelope["error"]["code"] == "invalid-input"
    conflict = run("items-update", {"key": "rope", "ops": [{"op": "increment", "path": "missing", "by": 1}]}, state, runtime_tools=tools)
    assert conflict.envelope["error"] == {"code": "conflict", "message": "items: ops[0] (path-not-found): 'missing' does not exist",
                                          "hint": "Read the record with items-get and adjust."}
    bad_path = run("items-update", {"key": "rope", "ops": [{"op": "merge", "path": "a..b", "value": {}}]}, state, runtime_tools=tools)
    assert bad_path.envelope["error"]["code"] == "invalid-input"
    rename = run("items-update", {"key": "rope", "ops": [{"op": "merge", "value": {"name": "Cord"}}]}, state, runtime_tools=tools)
    assert rename.envelope["error"]["message"] == "update cannot change name; upsert a new record and delete this one"


def test_list_sorts_filters_and_pages():
    rows = {f"k{i:02d}": {"name": f"k{i:02d}", "weight": i % 2} for i in range(25)}
    out = run("items-list", {"where": {"weight": 1}, "limit": 5}, _state(rows), runtime_tools=_tools())
    assert out.content["total"] == 12 and out.content["nextOffset"] == 5
    assert [i["key"] for i in out.content["items"]] == ["k01", "k03", "k05", "k07", "k09"]
    assert run("items-list", {"limit": 51}, _state(rows), runtime_tools=_tools()).envelope["error"]["code"] == "invalid-input"


def test_unusable_schema_is_internal():
    broken = DatasetDeclaration("junk", {"type": "nonsense"})
    tools = dataset_tools({"junk": broken}, ["junk"])
    out = run("junk-upsert", {"key": "a", "record": {}}, _state(), runtime_tools=tools)
    assert out.envelope["error"] == {"code": "internal", "message": "The junk dataset's schema cannot be used."}
