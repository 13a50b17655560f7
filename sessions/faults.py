"""The plugin fault breaker of a session (spec 004 §会话插件管理 ``paused`` / resume-fault, trace table
``plugin.fault.counted`` / ``plugin.fault.latched`` / ``plugin.fault.cleared``).

A plugin's *own* faults — its code raised, its entry or handler would not load, it ran past its
time (``OWN_FAULT_CODES``) — are counted per session. Failures that are not the plugin's doing
(the model provider, a missing approval, an abort, a session lock) are not counted and do not
reset the count. ``COVEL_PLUGIN_FAULT_THRESHOLD`` own faults in a row (one per execution at most)
latch the breaker: the plugin is *paused* in that session — its runtimes and hooks no longer run —
while it stays in the saved selection (``active`` keeps meaning "chosen"). An execution in which the
plugin ran normally resets the count (``cleared`` when it was not zero); the player's
``POST /api/sessions/:id/plugins/:pluginId/resume-fault`` clears a latched one.

State lives in the session row (``metadata.pluginFaults``: ``{pluginId: {count, lastCode, pausedAt?,
reason?}}``), so every web process and worker sees the same breaker. Snapshots and forks do not
carry it (they copy a fixed list of metadata keys). Writers hold the session row lock; the commit
chain (turns.engine.commit) settles a turn's outcomes in the turn's own transaction and appends the
events these functions return. Pure Python over the Session row; no event writing here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from sessions.errors import PluginNotPaused

FAULTS_KEY = "pluginFaults"
TYPE_COUNTED = "plugin.fault.counted"
TYPE_LATCHED = "plugin.fault.latched"
TYPE_CLEARED = "plugin.fault.cleared"
REASON_REPEATED_FAULTS = "repeated-faults"
CLEARED_RECOVERED, CLEARED_RESUMED = "recovered", "resumed"

#: Runtime error codes that are the plugin's own fault (its code, its package, its time budget).
OWN_FAULT_CODES = frozenset({
    "handler_error", "guard_error", "runtime_error", "entry_failed", "handler_not_loadable", "tool_not_registered",
    "timeout", "dependency_cycle",
})


@dataclass
class FaultEvent:
    """One breaker event: ``type`` (TYPE_*), ``payload`` (wire shape), and whether the player sees it
    (``is_visible``: latched / cleared go to the action stream and the session event log; counted is
    trace only)."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def is_visible(self) -> bool:
        return self.type != TYPE_COUNTED


def fault_is_own(error: dict[str, Any] | None) -> bool:
    """Whether a runtime error ``{code, message}`` is the plugin's own fault."""
    return isinstance(error, dict) and error.get("code") in OWN_FAULT_CODES


def plugins_paused(metadata: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{pluginId: {reason, pausedAt}}`` of the plugins the breaker paused (``items[].paused``)."""
    faults = (metadata or {}).get(FAULTS_KEY)
    if not isinstance(faults, dict):
        return {}
    return {pid: {"reason": state.get("reason") or REASON_REPEATED_FAULTS, "pausedAt": state["pausedAt"]}
            for pid, state in faults.items() if isinstance(state, dict) and state.get("pausedAt")}


def _hint(kind: str, plugin_id: str, locale: str) -> str:
    """The fixed player text of a latched / cleared breaker (spec: 固定玩家提示)."""
    zh = (locale or "").lower().startswith("zh")
    if kind == TYPE_LATCHED:
        return (f"插件 {plugin_id} 反复出错，已在本会话暂停。可在插件列表里重新启用。" if zh
                else f"The plugin {plugin_id} kept failing and is paused in this session. Resume it from the plugin list.")
    return (f"插件 {plugin_id} 已恢复正常。" if zh else f"The plugin {plugin_id} is working again.")


def plugin_faults_settle(session, outcomes: dict[str, dict[str, Any] | None], *, threshold: int | None = None) -> list[FaultEvent]:
    """Apply one execution's outcomes to the breaker of the locked ``session`` (mutates
    ``session.metadata``; the caller saves it in its transaction and appends the visible events).

    outcomes: ``{pluginId: own fault {code, runtimeId} | None}`` — None: the plugin ran normally in
    this execution; plugins that did not run (or failed for a host reason) are left out. A paused
    plugin is never in it (it does not run). threshold: default COVEL_PLUGIN_FAULT_THRESHOLD.
    Returns the events in order: ``counted`` per fault, ``latched`` when the count reached the
    threshold, ``cleared`` (reason ``recovered``) when a normal run reset a non-zero count.
    """
    limit = threshold or int(settings.COVEL_PLUGIN_FAULT_THRESHOLD)
    meta = dict(session.metadata or {})
    faults = {k: dict(v) for k, v in (meta.get(FAULTS_KEY) or {}).items() if isinstance(v, dict)}
    events: list[FaultEvent] = []
    for plugin_id, fault in outcomes.items():
        state = faults.get(plugin_id) or {"count": 0}
        if state.get("pausedAt"):
            continue
        if fault is None:
            if state.get("count"):
                faults.pop(plugin_id, None)
                events.append(FaultEvent(TYPE_CLEARED, {"pluginId": plugin_id, "reason": CLEARED_RECOVERED,
                                                        "message": _hint(TYPE_CLEARED, plugin_id, session.locale)}))
            continue
        state["count"] = int(state.get("count") or 0) + 1
        state["lastCode"] = fault.get("code")
        events.append(FaultEvent(TYPE_COUNTED, {"pluginId": plugin_id, "count": state["count"], "threshold": limit,
                                                "code": fault.get("code"), "runtimeId": fault.get("runtimeId")}))
        if state["count"] >= limit:
            state["pausedAt"] = timezone.now().isoformat().replace("+00:00", "Z")
            state["reason"] = REASON_REPEATED_FAULTS
            events.append(FaultEvent(TYPE_LATCHED, {"pluginId": plugin_id, "count": state["count"], "reason": REASON_REPEATED_FAULTS,
                                                    "message": _hint(TYPE_LATCHED, plugin_id, session.locale)}))
        faults[plugin_id] = state
    if faults:
        meta[FAULTS_KEY] = faults
    else:
        meta.pop(FAULTS_KEY, None)
    session.metadata = meta
    return events


def plugin_fault_resume(session, plugin_id: str) -> FaultEvent:
    """Clear the latched breaker of ``plugin_id`` on the locked ``session`` (mutates its metadata;
    the caller saves it and appends the returned ``cleared`` event, reason ``resumed``). Changes
    nothing else: not the plugin selection, grants, plugin data or snapshots.
    Raises PluginNotPaused (409 plugin_not_paused) when the plugin is not paused."""
    meta = dict(session.metadata or {})
    faults = {k: dict(v) for k, v in (meta.get(FAULTS_KEY) or {}).items() if isinstance(v, dict)}
    if not (faults.get(plugin_id) or {}).get("pausedAt"):
        raise PluginNotPaused(plugin_id)
    faults.pop(plugin_id)
    if faults:
        meta[FAULTS_KEY] = faults
    else:
        meta.pop(FAULTS_KEY, None)
    session.metadata = meta
    return FaultEvent(TYPE_CLEARED, {"pluginId": plugin_id, "reason": CLEARED_RESUMED,
                                     "message": _hint(TYPE_CLEARED, plugin_id, session.locale)})
