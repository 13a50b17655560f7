"""Mutation helpers shared by the golden tests of plugin manifests and world packages
(tests/plugins_app/test_manifests_golden.py, tests/sessions/test_world_packages_golden.py): walk a
document's paths, cut a small copy around one path, and the other-shaped values to put there."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any


def paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield (*prefix, index)
            yield from paths(value, (*prefix, index))


def spine(doc: Any, path: tuple) -> tuple[Any, tuple]:
    """A small copy of `doc` around `path`: each object on the way keeps its scalar fields and the
    step taken, each list only the item taken (so its index becomes 0); the node at `path` is kept
    whole. Keeps every case cheap to parse while each field is still checked in its place.
    Returns (copy, path inside the copy)."""
    if not path:
        return copy.deepcopy(doc), ()
    step, rest = path[0], path[1:]
    child, child_path = spine(doc[step], rest)
    if isinstance(doc, list):
        return [child], (0, *child_path)
    kept = {k: copy.deepcopy(v) for k, v in doc.items() if not isinstance(v, (dict, list)) or k == step}
    kept[step] = child
    return kept, (step, *child_path)


def variants(value: Any) -> list[str]:
    """Replacement values for a field holding `value`: the other shapes (kept short per shape)."""
    if isinstance(value, bool):
        return ["int", "str", "null"]
    if isinstance(value, int | float):
        return ["float", "str", "bool", "null"]
    if isinstance(value, str):
        return ["int", "bool", "null", "list", "obj"]
    if isinstance(value, list):
        return ["int", "str", "list", "strlist", "obj"]
    if isinstance(value, dict):
        return ["int", "str", "null", "strlist", "emptyobj"]
    return ["int", "str", "obj"]
