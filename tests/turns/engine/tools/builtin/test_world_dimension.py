"""world-dimension-get and world-dimension-list."""

from tests.turns.engine.tools.support import run
from turns.engine.tools import InMemoryStateView, WorldDimension

STATE = InMemoryStateView(world_dimensions=[
    WorldDimension("reputation", 5, 2, "声望", {"type": "integer", "minimum": 0, "maximum": 100}),
    WorldDimension("map", {"regions": [{"name": "Harbor", "updatedAt": "2025-01-01T00:00:00Z"}, {"name": "Old/Town"}],
                           "a/b": {"~x": 1}}, 4, "Map", {"type": "object"}),
    WorldDimension("log", ["a", "b", "c"], 1),
    WorldDimension("motto", "abcdef", 1),
])


def _get(*queries):
    return run("world-dimension-get", {"queries": list(queries)}, STATE)


def test_reads_a_whole_value_like_the_spec_example():
    out = _get({"dimension": "reputation"})
    assert out.content == {
        "results": [{"dimension": "reputation", "found": True, "value": 5, "name": "声望",
                     "schema": {"type": "integer", "minimum": 0, "maximum": 100}, "version": 2}],
        "text": "reputation (v2) = 5",
    }
    assert out.envelope == {"summary": "reputation (v2) = 5"}


def test_path_forms_dot_index_root_array_and_pointer():
    out = _get(
        {"dimension": "map", "path": "regions[0].name"},
        {"dimension": "log", "path": "[1]"},
        {"dimension": "map", "path": "/regions/1/name"},
        {"dimension": "map", "path": "/a~1b/~0x"},
    )
    assert [r["value"] for r in out.content["results"]] == ["Harbor", "b", "Old/Town", 1]


def test_missing_path_and_syntax_error_and_unknown_dimension():
    out = _get({"dimension": "map", "path": "regions[5].name"}, {"dimension": "map", "path": "regions..name"}, {"dimension": "nope"})
    results = out.content["results"]
    assert results[0] == {"dimension": "map", "found": False, "path": "regions[5].name"}
    assert results[1]["found"] is False and "empty segment" in results[1]["error"]
    assert results[2] == {"dimension": "nope", "found": False}


def test_bookkeeping_fields_are_not_in_the_summary_but_stay_in_results():
    out = _get({"dimension": "map", "path": "regions[0]"})
    assert out.content["results"][0]["value"]["updatedAt"] == "2025-01-01T00:00:00Z"
    assert out.envelope["summary"] == 'map.regions[0] (v4) = {"name": "Harbor"}'


def test_pagination_of_arrays_strings_and_objects():
    out = _get({"dimension": "log", "limit": 2}, {"dimension": "motto", "offset": 4}, {"dimension": "map", "path": "regions[0]", "limit": 1})
    first, second, third = out.content["results"]
    assert first["page"] == {"value": ["a", "b"], "total": 3, "nextOffset": 2}
    assert second["page"] == {"value": "ef", "total": 6}
    assert third["page"]["value"] == {"name": "Harbor"} and third["page"]["nextOffset"] == 1
    assert run("world-dimension-get", {"queries": [{"dimension": "log", "limit": 2001}]}, STATE).envelope["error"]["code"] == "invalid-input"
    assert run("world-dimension-get", {"queries": []}, STATE).envelope["error"]["code"] == "invalid-input"


def test_long_unpaginated_value_is_marked_truncated():
    state = InMemoryStateView(world_dimensions=[WorldDimension("book", "x" * 5000, 1)])
    out = run("world-dimension-get", {"queries": [{"dimension": "book"}]}, state)
    assert "[truncated: 5000 characters in total" in out.envelope["summary"]
    assert out.content["results"][0]["value"] == "x" * 5000


def test_list_shows_ids_names_types_and_versions_only():
    out = run("world-dimension-list", {}, STATE)
    assert out.content["dimensions"][:2] == [
        {"id": "reputation", "name": "声望", "version": 2, "type": "integer"},
        {"id": "map", "name": "Map", "version": 4, "type": "object"},
    ]
    assert out.content["dimensions"][2] == {"id": "log", "name": "log", "version": 1}
    assert "5" not in out.envelope["summary"].split("\n")[0].split("v2")[0]
