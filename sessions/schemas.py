"""Request shapes of the sessions endpoints (wire names in camelCase, as the spec writes them).

Endpoints parse bodies after authorization (see sessions/api_scope.py), so these models are applied
in the endpoint rather than as ninja body parameters.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SeatPatch(BaseModel):
    """PATCH /api/sessions/:id/seats/:seatId — exactly ``{currentCharacterId}``."""

    model_config = ConfigDict(extra="forbid")
    current_character_id: str = Field(alias="currentCharacterId", min_length=1, max_length=160)


class LorebookEnabledPatch(BaseModel):
    """PATCH /api/sessions/:id/lorebook/:entryId — ``{enabled}``."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool


def seat_patch_parse(data: dict) -> SeatPatch | None:
    try:
        return SeatPatch.model_validate(data)
    except Exception:
        return None
