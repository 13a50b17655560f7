"""dice-check entry module: the player's `roll` action (also /roll, /r)."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import INVALID_INPUT

from . import dice


def roll(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{notation?: "NdM[+K]"}` → `{notation, dice, bonus, total}`; bad notation → `{error, code:
    "invalid-input"}` (a player's typo is an answer, not a failed action)."""
    notation = (payload or {}).get("notation")
    try:
        if notation is not None and not isinstance(notation, str):
            raise ValueError("notation: a string such as 2d6")
        return dice.roll_notation(notation)
    except ValueError as exc:
        return {"error": str(exc), "code": INVALID_INPUT}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_rpc("roll", roll)
