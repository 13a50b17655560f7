"""covel.jsoncopy: the engine's defensive copies are deep, keep JSON types, and never let
a handler's mutation reach the snapshot."""
from __future__ import annotations

from datetime import datetime, timezone

from covel.jsoncopy import dimension_copy, json_copy
from plugins_app.toolkit.state import WorldDimension


def test_json_copy_is_deep_and_equal():
    value = {"a": [1, {"b": [2, 3]}, ("x", ["y"])], "c": None, "d": 1.5, "e": True, "f": "s"}
    copied = json_copy(value)
    assert copied == value
    copied["a"][1]["b"].append(4)
    copied["a"][2][1].append("z")
    assert value["a"][1]["b"] == [2, 3] and value["a"][2][1] == ["y"]
    assert isinstance(copied["a"][2], tuple)


def test_json_copy_falls_back_to_deepcopy_for_other_objects():
    stamp = {"when": datetime(2026, 1, 1, tzinfo=timezone.utc), "tags": {"a", "b"}}
    copied = json_copy(stamp)
    assert copied == stamp and copied["tags"] is not stamp["tags"]


def test_dimension_copy_keeps_the_frozen_dimension_private():
    dim = WorldDimension(id="night", value={"minutes": [340]}, version=2, name="Night", schema={"type": "object"})
    copied = dimension_copy(dim)
    assert copied == dim
    copied.value["minutes"].append(1)
    copied.schema["required"] = ["minutes"]
    assert dim.value == {"minutes": [340]} and dim.schema == {"type": "object"}
