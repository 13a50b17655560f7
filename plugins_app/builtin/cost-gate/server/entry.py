"""cost-gate entry module: a per-session token budget enforced by hooks (PLUGIN.md).

Counter: tokens spent per session id in this process (input + output of every runtime's model
calls, read at PostRuntime). Hand-rolled on purpose: a dict behind a lock is all an in-process
budget needs, and the host gives hooks no storage of their own.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

logger = logging.getLogger(__name__)

SOFT_DEFAULT, HARD_DEFAULT = 400_000, 600_000
SOFT_ENV, HARD_ENV = "COST_GATE_SOFT_TOKENS", "COST_GATE_HARD_TOKENS"
KEPT_STAGES = ("setup", "narrative")

_spent: dict[str, int] = {}
_lock = threading.Lock()
_warned: set[tuple[int, int]] = set()


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


def _env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    try:
        return _number(float(raw)) if raw else None
    except ValueError:
        return None


def caps(settings: dict[str, Any] | None) -> tuple[int, int]:
    """(soft, hard) tokens: user setting → environment variable → default."""
    settings = settings or {}
    soft = _number(settings.get("softTokens")) or _env(SOFT_ENV) or SOFT_DEFAULT
    hard = _number(settings.get("hardTokens")) or _env(HARD_ENV) or HARD_DEFAULT
    if soft >= hard and (soft, hard) not in _warned:
        _warned.add((soft, hard))
        logger.warning("cost-gate: soft cap %s is not below hard cap %s; nothing is trimmed before the turn stops", soft, hard)
    return soft, hard


def spent(session_id: str) -> int:
    """Tokens counted for ``session_id`` in this process."""
    with _lock:
        return _spent.get(session_id, 0)


def post_runtime(event: dict[str, Any]) -> None:
    usage = (event.get("result") or {}).get("usage") or {}
    tokens = sum(int(v) for v in (usage.get("input"), usage.get("output")) if isinstance(v, int) and not isinstance(v, bool))
    if tokens > 0:
        with _lock:
            _spent[event["sessionId"]] = _spent.get(event["sessionId"], 0) + tokens


def pre_schedule(event: dict[str, Any]) -> dict[str, Any] | None:
    soft, _hard = caps(event.get("settings"))
    if spent(event["sessionId"]) < soft:
        return None
    triggered = event.get("triggered") or []
    kept = [r["name"] for r in triggered if r.get("stage") in KEPT_STAGES or r.get("type") == "function"]
    if len(kept) == len(triggered):
        return None
    return {"action": "continue", "replace": {"triggered": kept}}


def pre_runtime(event: dict[str, Any]) -> dict[str, Any] | None:
    if ((event.get("manifest") or {}).get("stage")) == "setup":
        return None
    _soft, hard = caps(event.get("settings"))
    used = spent(event["sessionId"])
    if used < hard:
        return None
    return {"action": "abort", "reason": f"cost-gate: hard cap reached ({used} of {hard} tokens)"}


def session_end(event: dict[str, Any]) -> None:
    with _lock:
        _spent.pop(event.get("sessionId"), None)


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_hook("PostRuntime", post_runtime, enforce="post")
    api.register_hook("PreSchedule", pre_schedule, enforce="normal")
    api.register_hook("PreRuntime", pre_runtime, enforce="pre")
    api.register_hook("SessionEnd", session_end, enforce="normal")
