"""Operation-style writes on one plugin-data value (applyDataOps), shared by the dataset tools
and, later, the plugin.data.update applier so both compute the same result.

Ops (each a JSON object with "op"):
  set       {path?, value}           replace the value at path (whole record without path)
  merge     {path?, value: object}   shallow-merge into the object at path
  append    {path, value, unique?}   push onto the array at path; unique rejects an equal item
  insert    {path, index, value}     insert into the array at path, 0 ≤ index ≤ len
  remove    {path, index}            remove array element, 0 ≤ index < len
  increment {path, by}               add a number to the number at path
  delete    {path?}                  delete the key at path, or the whole record
Paths are dot-separated; numeric segments index arrays; __proto__/constructor/prototype are
invalid. Errors carry a code: invalid-op / invalid-path (the op is written wrong) or
path-not-found / type-mismatch / out-of-bounds / index-out-of-range / duplicate-item (the op
does not fit the current value).
"""

from __future__ import annotations

import copy
import math
from typing import Any

DATA_OPS = ("set", "merge", "append", "insert", "remove", "increment", "delete")
#: Codes meaning "the op is malformed" (→ invalid-input); the others mean conflict.
MALFORMED_OP_CODES = frozenset({"invalid-op", "invalid-path"})
_FORBIDDEN_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})

OP_SCHEMAS: dict[str, dict[str, Any]] = {
    "set": {"required": ["op", "value"], "properties": {"op": {"const": "set"}, "path": {"type": "string"}, "value": {}}},
    "merge": {
        "required": ["op", "value"],
        "properties": {"op": {"const": "merge"}, "path": {"type": "string"}, "value": {"type": "object"}},
    },
    "append": {
        "required": ["op", "path", "value"],
        "properties": {
            "op": {"const": "append"},
            "path": {"type": "string", "minLength": 1},
            "value": {},
            "unique": {"type": "boolean"},
        },
    },
    "insert": {
        "required": ["op", "path", "index", "value"],
        "properties": {
            "op": {"const": "insert"},
            "path": {"type": "string", "minLength": 1},
            "index": {"type": "integer"},
            "value": {},
        },
    },
    "remove": {
        "required": ["op", "path", "index"],
        "properties": {"op": {"const": "remove"}, "path": {"type": "string", "minLength": 1}, "index": {"type": "integer"}},
    },
    "increment": {
        "required": ["op", "path", "by"],
        "properties": {"op": {"const": "increment"}, "path": {"type": "string", "minLength": 1}, "by": {"type": "number"}},
    },
    "delete": {"required": ["op"], "properties": {"op": {"const": "delete"}, "path": {"type": "string"}}},
}


class DataOpError(ValueError):
    """code: see module docstring; index: position of the failing op."""

    def __init__(self, code: str, index: int, message: str) -> None:
        self.code = code
        self.index = index
        super().__init__(f"ops[{index}] ({code}): {message}")


def _segments(path: str | None, index: int) -> list[str]:
    if path is None or path == "":
        return []
    parts = path.split(".")
    if any(p == "" for p in parts):
        raise DataOpError("invalid-path", index, f"path {path!r} has an empty segment")
    if any(p in _FORBIDDEN_SEGMENTS for p in parts):
        raise DataOpError("invalid-path", index, f"path {path!r} uses a forbidden segment")
    return parts


def _step(node: Any, seg: str, index: int, path: str) -> Any:
    if isinstance(node, dict):
        if seg not in node:
            raise DataOpError("path-not-found", index, f"{path!r} does not exist")
        return node[seg]
    if isinstance(node, list):
        if not seg.isdigit():
            raise DataOpError("type-mismatch", index, f"{path!r}: {seg!r} is not an array index")
        i = int(seg)
        if i >= len(node):
            raise DataOpError("index-out-of-range", index, f"{path!r}: index {i} is past the end")
        return node[i]
    raise DataOpError("type-mismatch", index, f"{path!r} goes through a {type(node).__name__}")


def _get(root: Any, segs: list[str], index: int, path: str) -> Any:
    node = root
    for seg in segs:
        node = _step(node, seg, index, path)
    return node


def _assign(parent: Any, seg: str, value: Any, index: int, path: str) -> None:
    if isinstance(parent, dict):
        parent[seg] = value
    elif isinstance(parent, list):
        if not seg.isdigit():
            raise DataOpError("type-mismatch", index, f"{path!r}: {seg!r} is not an array index")
        i = int(seg)
        if i > len(parent):
            raise DataOpError("out-of-bounds", index, f"{path!r}: index {i} is beyond the array")
        if i == len(parent):
            parent.append(value)
        else:
            parent[i] = value
    else:
        raise DataOpError("type-mismatch", index, f"{path!r}: the parent is not an object or array")


def apply_data_ops(exists: bool, value: Any, ops: list[dict[str, Any]]) -> tuple[bool, Any]:
    """Apply ops in order to (exists, value); returns the new (exists, value). Input untouched.

    Raises DataOpError on the first failing op.
    """
    current = copy.deepcopy(value) if exists else None
    present = exists
    for index, op in enumerate(ops):
        kind = op.get("op") if isinstance(op, dict) else None
        if kind not in DATA_OPS:
            raise DataOpError("invalid-op", index, f"unknown op {kind!r}")
        path = op.get("path")
        if path is not None and not isinstance(path, str):
            raise DataOpError("invalid-path", index, "path must be a string")
        segs = _segments(path, index)
        if kind == "delete" and not segs:
            present, current = False, None
            continue
        if kind == "set" and not segs:
            present, current = True, copy.deepcopy(op.get("value"))
            continue
        if not present:
            if kind == "merge" and not segs and isinstance(op.get("value"), dict):
                present, current = True, copy.deepcopy(op["value"])
                continue
            raise DataOpError("path-not-found", index, "the record does not exist")
        if kind in ("set", "delete"):
            parent = _get(current, segs[:-1], index, path)
            if kind == "set":
                _assign(parent, segs[-1], copy.deepcopy(op.get("value")), index, path)
            elif isinstance(parent, dict):
                if segs[-1] not in parent:
                    raise DataOpError("path-not-found", index, f"{path!r} does not exist")
                del parent[segs[-1]]
            elif isinstance(parent, list) and segs[-1].isdigit():
                i = int(segs[-1])
                if i >= len(parent):
                    raise DataOpError("index-out-of-range", index, f"{path!r}: index {i} is past the end")
                del parent[i]
            else:
                raise DataOpError("type-mismatch", index, f"{path!r} cannot be deleted")
            continue
        target = _get(current, segs, index, path)
        if kind == "merge":
            if not isinstance(target, dict) or not isinstance(op.get("value"), dict):
                raise DataOpError("type-mismatch", index, f"{path or 'the record'} is not an object")
            target.update(copy.deepcopy(op["value"]))
        elif kind in ("append", "insert", "remove"):
            if not isinstance(target, list):
                raise DataOpError("type-mismatch", index, f"{path!r} is not an array")
            if kind == "append":
                if op.get("unique") and op.get("value") in target:
                    raise DataOpError("duplicate-item", index, f"{path!r} already holds this item")
                target.append(copy.deepcopy(op.get("value")))
            else:
                at = op.get("index")
                if not isinstance(at, int) or isinstance(at, bool):
                    raise DataOpError("invalid-op", index, "index must be an integer")
                if kind == "insert":
                    if not 0 <= at <= len(target):
                        raise DataOpError("out-of-bounds", index, f"{path!r}: index {at} is outside 0..{len(target)}")
                    target.insert(at, copy.deepcopy(op.get("value")))
                else:
                    if not 0 <= at < len(target):
                        raise DataOpError("index-out-of-range", index, f"{path!r}: no element {at}")
                    del target[at]
        elif kind == "increment":
            by = op.get("by")
            if isinstance(by, bool) or not isinstance(by, (int, float)) or not math.isfinite(by):
                raise DataOpError("invalid-op", index, "by must be a finite number")
            if isinstance(target, bool) or not isinstance(target, (int, float)):
                raise DataOpError("type-mismatch", index, f"{path!r} is not a number")
            parent = _get(current, segs[:-1], index, path)
            _assign(parent, segs[-1], target + by, index, path)
    return present, current
