"""Conditions of hidden story events (schemas/story-events.schema.json `condition`): `all`, `any`,
`not`, and leaves on a dimension (`dimension` + `path`), a world-time field (`time`), a fired
event (`revealed`, with `turnsSinceGte` / `turnsSinceLte`) or the session turn (`turnGte` /
`turnLte`, planned events only). Comparators: equals, notEquals, in, gte, gt, lte, lt, exists.

A leaf whose value is missing holds only for `exists: false`; a comparison against a value of
the wrong type does not hold (never raises). Hand-rolled: the grammar is this plugin's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMPARATORS = ("equals", "notEquals", "in", "gte", "gt", "lte", "lt", "exists")
_MISSING = object()


@dataclass
class Facts:
    """What conditions read: dimensions (id → value), time fields (name → number), fired events
    (id → turn it last fired), the session turn."""

    dimensions: dict[str, Any] = field(default_factory=dict)
    time: dict[str, Any] = field(default_factory=dict)
    fired: dict[str, int] = field(default_factory=dict)
    turn: int = 0


def _at(value: Any, path: Any) -> Any:
    parts = path if isinstance(path, list) else [p for p in str(path or "").split(".") if p]
    for part in parts:
        if isinstance(value, dict) and str(part) in value:
            value = value[str(part)]
        elif isinstance(value, list) and (isinstance(part, int) or str(part).isdigit()) and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare(leaf: dict[str, Any], value: Any) -> bool:
    if "exists" in leaf and (value is not _MISSING) != bool(leaf["exists"]):
        return False
    if value is _MISSING:
        return "exists" in leaf and not leaf["exists"] and all(k not in leaf for k in COMPARATORS if k != "exists")
    if "equals" in leaf and value != leaf["equals"]:
        return False
    if "notEquals" in leaf and value == leaf["notEquals"]:
        return False
    if "in" in leaf and value not in (leaf["in"] or []):
        return False
    for key, test in (("gte", lambda a, b: a >= b), ("gt", lambda a, b: a > b), ("lte", lambda a, b: a <= b), ("lt", lambda a, b: a < b)):
        if key in leaf and not (_number(value) and test(value, leaf[key])):
            return False
    return True


def holds(condition: Any, facts: Facts) -> bool:
    """True when ``condition`` holds for ``facts``."""
    if not isinstance(condition, dict):
        return False
    if "all" in condition:
        return bool(condition["all"]) and all(holds(c, facts) for c in condition["all"])
    if "any" in condition:
        return any(holds(c, facts) for c in condition["any"] or [])
    if "not" in condition:
        return not holds(condition["not"], facts)
    if "dimension" in condition:
        value = facts.dimensions.get(condition["dimension"], _MISSING)
        if value is not _MISSING and condition.get("path") not in (None, "", []):
            value = _at(value, condition["path"])
        return _compare(condition, value)
    if "time" in condition:
        return _compare(condition, facts.time.get(condition["time"], _MISSING))
    if "revealed" in condition:
        fired = facts.fired.get(condition["revealed"])
        if fired is None:
            return False
        since = facts.turn - fired
        return since >= int(condition.get("turnsSinceGte", 0)) and ("turnsSinceLte" not in condition or since <= condition["turnsSinceLte"])
    if "turnGte" in condition or "turnLte" in condition:
        return facts.turn >= int(condition.get("turnGte", 0)) and ("turnLte" not in condition or facts.turn <= condition["turnLte"])
    return False


def references(condition: Any) -> list[tuple[str, Any]]:
    """Every leaf reference as (kind, value): ("dimension", id, ...) / ("time", name) / ("revealed", id)."""
    out: list[tuple[str, Any]] = []
    if not isinstance(condition, dict):
        return out
    for key in ("all", "any"):
        for item in condition.get(key) or []:
            out.extend(references(item))
    if "not" in condition:
        out.extend(references(condition["not"]))
    for kind in ("dimension", "time", "revealed"):
        if kind in condition:
            out.append((kind, condition[kind] if kind != "dimension" else (condition[kind], condition.get("path"))))
    return out
