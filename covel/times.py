"""The spec's timestamp format: ISO 8601 UTC with milliseconds and ``Z`` (spec 004 §响应格式约定)."""
from __future__ import annotations

from datetime import datetime, timezone


def iso(value: datetime | None) -> str | None:
    """``2026-12-01T09:16:45.123Z`` for an aware datetime; None stays None."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def wire_timestamp(moment: datetime | None = None) -> str:
    """The envelope ``timestamp`` of ``moment`` (default: now)."""
    return iso(moment or datetime.now(timezone.utc))
