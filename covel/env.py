"""Typed access to environment variables; malformed values fail at start-up.

Every setting that can come from the environment is read through these helpers so that a typo in a
deployment (``RATE_LIMIT_RPM=sixty``) stops the process with a clear message instead of silently
falling back to a default.
"""
from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str | None = None) -> str | None:
    """Return the variable stripped of surrounding whitespace, or ``default`` when unset/empty."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return an integer variable. Raises ImproperlyConfigured when it is not an integer in range."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be <= {maximum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    """Return a boolean variable: 1/true/yes/on or 0/false/no/off (case-insensitive)."""
    raw = env_str(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0/true/false), got {raw!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Return a variable that must be one of ``choices``."""
    raw = env_str(name, default)
    if raw not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def env_list(name: str) -> list[str]:
    """Return a comma-separated list variable with blanks removed."""
    raw = env_str(name)
    if raw is None:
        return []
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_path(name: str, default: Path) -> Path:
    """Return a filesystem path variable, ``~`` expanded and made absolute."""
    raw = env_str(name)
    return Path(raw).expanduser().resolve() if raw else default.expanduser().resolve()
