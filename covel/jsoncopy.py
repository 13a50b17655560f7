"""Fast deep copies of JSON-shaped values for the engine's defensive copies.

The engine hands plugin code and tools private copies of snapshot data (world metadata, dimension
values, plugin data, characters' fields) so a handler that mutates what it read never changes the
snapshot other runtimes see. Those values are JSON (dict / list / str / int / float / bool / None,
plus tuples from dataclasses); ``copy.deepcopy`` pays for memo bookkeeping and dispatch that JSON
never needs and was the largest CPU cost of a builtin-plugin turn (profile, issue 6).
"""
from __future__ import annotations

import copy
from dataclasses import is_dataclass, replace
from typing import Any

_ATOMIC = (str, int, float, bool, type(None))


def json_copy(value: Any) -> Any:
    """A deep copy of ``value``: dicts and lists are rebuilt recursively, tuples kept as tuples,
    str/int/float/bool/None shared (immutable); anything else goes to ``copy.deepcopy``.

    Shared sub-objects are copied once per reference (JSON has no aliasing to preserve)."""
    kind = type(value)
    if kind is dict:
        return {k: (v if type(v) in _ATOMIC else json_copy(v)) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMIC else json_copy(v) for v in value]
    if kind in _ATOMIC:
        return value
    if kind is tuple:
        return tuple(json_copy(v) for v in value)
    return copy.deepcopy(value)


def dimension_copy(dimension: Any) -> Any:
    """A copy of a frozen ``WorldDimension`` (dataclass) whose ``value`` / ``schema`` are private."""
    if is_dataclass(dimension):
        return replace(dimension, value=json_copy(dimension.value), schema=json_copy(dimension.schema))
    return json_copy(dimension)
