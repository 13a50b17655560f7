"""character-presence manual runtime: store one character's presence record (see presence.py)."""

from __future__ import annotations

from typing import Any

from . import presence


def handle(ctx) -> dict[str, Any]:
    return presence.store(ctx, ctx.manual_payload)
