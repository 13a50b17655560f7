"""scene-stage entry module: the `ui.slot@1` providers of the stage slots, read from the committed
data each extension watches (the host passes it as `pluginData`):

- `cast` → `stage.cast@1`: the active speakers (`active-cast/current`) with the actors on stage
  (`direction/current`) when there are any; no value before the first cast.
- `direction` → `stage.cast@1` (order 10, asked only when `cast` has no value): the actors on stage.
- `backdrop` → `stage.backdrop@1`: the current scene (`stage/current`: location, time of day, the
  matched scene and its backdrop file record).
- `dialogue` → `stage.dialogue@1`: the latest reply's paragraph speakers (`dialogue/latest`).

An answer without `value` (nothing recorded yet) leaves the slot to the next provider or null.
"""

from __future__ import annotations

from typing import Any

from . import stage

ACTIVE_CAST = "active-cast"


def _rows(context: dict[str, Any], namespace: str) -> dict[str, Any]:
    return ((context.get("pluginData") or {}).get(namespace)) or {}


def _actors(context: dict[str, Any]) -> list[dict[str, Any]]:
    record = _rows(context, stage.DIRECTION).get(stage.CURRENT)
    return [a for a in (record or {}).get("actors") or [] if isinstance(a, dict)]


def cast(context: dict[str, Any]) -> dict[str, Any]:
    record = _rows(context, ACTIVE_CAST).get("current")
    if not isinstance(record, dict) or not record.get("speakers"):
        return {}
    return {"value": {"turn": record.get("turn"), "speakers": record["speakers"], "actors": _actors(context)}}


def direction(context: dict[str, Any]) -> dict[str, Any]:
    actors = _actors(context)
    return {"value": {"turn": None, "speakers": [], "actors": actors}} if actors else {}


def backdrop(context: dict[str, Any]) -> dict[str, Any]:
    record = _rows(context, stage.STAGE).get(stage.CURRENT)
    return {"value": record} if isinstance(record, dict) else {}


def dialogue(context: dict[str, Any]) -> dict[str, Any]:
    record = _rows(context, stage.DIALOGUE).get(stage.LATEST)
    return {"value": record} if isinstance(record, dict) else {}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("ui.slot@1", "cast", cast)
    api.register_extension("ui.slot@1", "direction", direction)
    api.register_extension("ui.slot@1", "backdrop", backdrop)
    api.register_extension("ui.slot@1", "dialogue", dialogue)
