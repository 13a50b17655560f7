"""The process's window of recent calls into plugin code (spec 004 GET /api/sessions/:id/plugin-diagnostics
``calls[]`` / ``extensionCalls[]`` / ``history``). Pure Python, no Django.

Every completed call the host makes into a plugin's registered code on behalf of a session is
recorded here with ``call_record``: today the plugin-rpc action handlers (``contract``
``covel.rpc-action@1``, ``callerPluginId`` ``framework``); service and extension calls are recorded
the same way once the host makes them (``extension: {point, id, slot?}``). The window keeps the
newest ``WINDOW_CALLS`` (500) calls of the whole process; ``calls_for`` returns at most
``SESSION_CALLS`` (100) of one session *incarnation*, newest first, so a session re-created with the
same id never sees the old one's calls. Records are not shared between processes and not stored.
They hold no inputs, outputs, raw errors, credentials or private scopes: only identities, timing,
the outcome and a fixed error category. Display strings are cut to 256 UTF-16 code units, ending
``...[truncated]``; the session identity used for matching is kept whole. A name that matched no
registered descriptor is recorded as ``<unavailable>`` so request text is never copied in.
"""
from __future__ import annotations

import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

WINDOW_CALLS = 500
SESSION_CALLS = 100
DISPLAY_MAX_UTF16 = 256
TRUNCATED = "...[truncated]"
UNAVAILABLE = "<unavailable>"
CONTRACT_RPC_ACTION = "covel.rpc-action@1"
CALLER_FRAMEWORK = "framework"
OUTCOMES = ("success", "timeout", "cancelled", "error")
#: The fixed error categories a record may carry (spec: 可选的 errorCode，取自一组固定分类).
ERROR_CODES = ("handler-error", "timeout", "cancelled", "output-validation", "not-found", "load-failed")


def display(text: str | None) -> str | None:
    """``text`` cut to DISPLAY_MAX_UTF16 UTF-16 code units (ending ``...[truncated]`` when cut)."""
    if text is None:
        return None
    if len(text.encode("utf-16-le")) // 2 <= DISPLAY_MAX_UTF16:
        return text
    budget = DISPLAY_MAX_UTF16 - len(TRUNCATED)
    out, used = [], 0
    for ch in text:
        units = len(ch.encode("utf-16-le")) // 2
        if used + units > budget:
            break
        out.append(ch)
        used += units
    return "".join(out) + TRUNCATED


@dataclass
class CallRecord:
    """One completed call. ``session_key`` = (session id, incarnation) is private (never returned)."""

    session_key: tuple[str, str]
    caller_plugin_id: str
    provider_plugin_id: str
    name: str
    contract: str
    outcome: str
    duration_ms: int
    completed_at: str
    call_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    parent_call_id: str | None = None
    turn_id: str | None = None
    runtime_id: str | None = None
    error_code: str | None = None
    extension: dict[str, Any] | None = None

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "callId": self.call_id, "callerPluginId": display(self.caller_plugin_id),
            "providerPluginId": display(self.provider_plugin_id), "name": display(self.name),
            "contract": display(self.contract), "completedAt": self.completed_at, "durationMs": self.duration_ms,
            "outcome": self.outcome,
        }
        for key, value in (("parentCallId", self.parent_call_id), ("turnId", self.turn_id), ("runtimeId", display(self.runtime_id)),
                           ("errorCode", self.error_code), ("extension", self.extension)):
            if value is not None:
                out[key] = value
        return out


_window: deque[CallRecord] = deque(maxlen=WINDOW_CALLS)
_lock = threading.Lock()


def call_record(*, session_id: str, incarnation: str, caller_plugin_id: str, provider_plugin_id: str, name: str | None,
                contract: str, outcome: str, duration_ms: float, error_code: str | None = None, turn_id: str | None = None,
                runtime_id: str | None = None, parent_call_id: str | None = None,
                extension: dict[str, Any] | None = None) -> CallRecord:
    """Add one completed call to the window (see the module docstring). ``name`` None: the request
    matched no registered descriptor (shown as ``<unavailable>``). ``outcome``: one of OUTCOMES;
    ``error_code``: one of ERROR_CODES or None. duration_ms: the provider's own time. Returns the record."""
    record = CallRecord(
        session_key=(session_id, incarnation), caller_plugin_id=caller_plugin_id, provider_plugin_id=provider_plugin_id,
        name=name if name is not None else UNAVAILABLE, contract=contract,
        outcome=outcome if outcome in OUTCOMES else "error", duration_ms=max(0, int(round(duration_ms))),
        completed_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        error_code=error_code if error_code in ERROR_CODES else None, turn_id=turn_id, runtime_id=runtime_id,
        parent_call_id=parent_call_id, extension=extension,
    )
    with _lock:
        _window.append(record)
    return record


def calls_for(session_id: str, incarnation: str, *, plugin_id: str | None = None) -> list[dict[str, Any]]:
    """The public records of one session incarnation, newest first, at most SESSION_CALLS; with
    ``plugin_id``, only calls where it is the caller or the provider."""
    with _lock:
        records = [r for r in reversed(_window) if r.session_key == (session_id, incarnation)]
    if plugin_id is not None:
        records = [r for r in records if plugin_id in (r.caller_plugin_id, r.provider_plugin_id)]
    return [r.public() for r in records[:SESSION_CALLS]]


def extension_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``extensionCalls[]``: the extension calls among ``calls`` counted per (point, providerPluginId)
    — ``{point, providerPluginId, total, success, error, timeout, cancelled}``."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for call in calls:
        extension = call.get("extension")
        if not isinstance(extension, dict):
            continue
        key = (str(extension.get("point")), str(call.get("providerPluginId")))
        item = totals.setdefault(key, {"point": key[0], "providerPluginId": key[1], "total": 0, "success": 0, "error": 0,
                                       "timeout": 0, "cancelled": 0})
        item["total"] += 1
        item[call["outcome"]] += 1
    return list(totals.values())


def window_clear() -> None:
    """Forget every record (tests)."""
    with _lock:
        _window.clear()
