"""The facts a turn's conditions read (conditions.Facts) from a function or tool context: frozen
dimensions, the world clock's numeric fields (world-time-context@1: `tick` split by its calendar,
plus `tick` itself) and the fired ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import events
from .conditions import Facts

_CLOCK: Any = None


def _calendar(definition: dict[str, Any]) -> Any:
    """world-time's Calendar for ``definition`` (its clock module, loaded by path), else None."""
    global _CLOCK
    if _CLOCK is None:
        from plugins_app.toolkit import module_load_by_path

        try:
            _CLOCK = module_load_by_path(Path(__file__).resolve().parents[2] / "world-time", "world-time", "server/clock.py")
        except Exception:  # world-time missing or broken: time leaves then read only `tick`
            _CLOCK = False
    if not _CLOCK:
        return None
    try:
        return _CLOCK.Calendar(definition)
    except Exception:
        return None


def time_fields(world_time: Any) -> dict[str, Any]:
    """Numeric time fields of a world-time-context@1 value ({} without one)."""
    if isinstance(world_time, dict) and isinstance(world_time.get("value"), dict):
        world_time = world_time["value"]
    if not isinstance(world_time, dict) or not isinstance(world_time.get("tick"), int):
        return {}
    out: dict[str, Any] = {"tick": world_time["tick"]}
    calendar = _calendar(world_time.get("definition") or {}) if isinstance(world_time.get("definition"), dict) else None
    if calendar is not None:
        try:
            out.update(calendar.parts_of(world_time["tick"]))
        except Exception:
            pass
    return out


def dimension_values(value: Any) -> dict[str, Any]:
    """Dimension id → value from a `world.dimensions@1` input ({id: value}, or [{id, value}])."""
    if isinstance(value, dict) and isinstance(value.get("value"), (dict, list)) and len(value) <= 2:
        value = value["value"]
    if isinstance(value, list):
        return {d["id"]: d.get("value") for d in value if isinstance(d, dict) and isinstance(d.get("id"), str)}
    if isinstance(value, dict):
        return {k: (v.get("value") if isinstance(v, dict) and "value" in v and "schema" in v else v) for k, v in value.items()}
    return {}


def turn_facts(ctx, turn: int, world_time: Any = None, dimensions: Any = None) -> Facts:
    """Facts for ``turn`` from a FunctionContext (dimensions from the input, else the frozen world)."""
    dims = dimension_values(dimensions) if dimensions is not None else {}
    if not dims:
        dims = dict(ctx.world.dimensions)
    fired = {k: int(v.get("turn") or 0) for k, v in events.ledger(ctx).items()}
    return Facts(dimensions=dims, time=time_fields(world_time), fired=fired, turn=turn)
