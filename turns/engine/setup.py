"""The setup state machine: ``session.setupRuntimes`` (spec 004 §会话 SetupRuntimeState,
§Setup runtime 控制).

States: ``pending {generation, attempts, lastError?}``, ``done {resolution: completed|waived,
generation, attempts, completedAt, warning?}``, ``blocked {generation, attempts, reason,
blockedAt, lastError?}``; every state carries ``pluginVersion`` and a done state from another
plugin version is stale (the runtime reruns as a new generation). A runtime missing from the
map is pending generation 1 with 0 attempts.

An attempt ends: done when the runtime succeeded with ``preGameDone``; still pending (attempt
not counted) when it is waiting for the player (it asked an interaction, suspended, or its guard
skipped it); otherwise attempts + 1 with ``lastError``, and blocked once attempts reach
``maxTriggerCount`` (default 3). Attempts are settled even when the turn's transaction rolled
back (spec: 回滚的尝试仍然消耗次数).
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any, Iterable

from turns.engine.runtime import STATUS_FAILED, STATUS_SKIPPED, STATUS_SUCCESS, STATUS_SUSPENDED, RuntimeResult

PENDING = "pending"
DONE = "done"
BLOCKED = "blocked"
RESOLUTION_COMPLETED = "completed"
RESOLUTION_WAIVED = "waived"
DEFAULT_MAX_TRIGGER_COUNT = 3
BLOCK_REASON = "max-trigger-count"
WAIVE_WARNING = "Setup step was skipped by the player; the plugin runs in a degraded mode."


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def setup_state_of(states: dict[str, Any], runtime_id: str, plugin_version: str | None = None) -> dict[str, Any]:
    """The runtime's state, defaulting to pending gen 1; a done state of another plugin version
    becomes pending with generation + 1."""
    state = states.get(runtime_id)
    if not isinstance(state, dict) or state.get("state") not in (PENDING, DONE, BLOCKED):
        return {"state": PENDING, "generation": 1, "attempts": 0, **({"pluginVersion": plugin_version} if plugin_version else {})}
    if (plugin_version is not None and state.get("state") == DONE and state.get("pluginVersion") not in (None, plugin_version)):
        return {"state": PENDING, "generation": int(state.get("generation") or 1) + 1, "attempts": 0, "pluginVersion": plugin_version}
    return copy.deepcopy(state)


def setup_states_settle(
    states: dict[str, Any],
    results: Iterable[RuntimeResult],
    *,
    max_trigger_counts: dict[str, int | None],
    plugin_versions: dict[str, str | None],
    committed: bool,
) -> dict[str, Any]:
    """New setupRuntimes after a setup turn's results. ``committed=False`` (rolled back): no
    runtime becomes done, but failed attempts still count."""
    out = copy.deepcopy(states)
    for result in results:
        if result.stage != "setup":
            continue
        version = plugin_versions.get(result.plugin_id)
        state = setup_state_of(out, result.runtime_id, version)
        if version:
            state["pluginVersion"] = version
        waiting = result.status == STATUS_SUSPENDED or result.status == STATUS_SKIPPED or (
            result.status == STATUS_SUCCESS and not result.pre_game_done and bool(result.pending_inputs))
        if result.status == STATUS_SUCCESS and result.pre_game_done and committed:
            out[result.runtime_id] = {
                "state": DONE, "resolution": RESOLUTION_COMPLETED, "generation": state.get("generation", 1),
                "attempts": int(state.get("attempts", 0)) + 1, "completedAt": _now(),
                **({"pluginVersion": state["pluginVersion"]} if state.get("pluginVersion") else {}),
            }
            continue
        if waiting and committed:
            out[result.runtime_id] = state
            continue
        state["attempts"] = int(state.get("attempts", 0)) + 1
        if result.status == STATUS_FAILED and result.error:
            state["lastError"] = str(result.error.get("message"))[:500]
        elif not committed:
            state["lastError"] = "the turn was not committed"
        elif not result.pre_game_done:
            state["lastError"] = "the runtime ended without preGameDone"
        limit = max_trigger_counts.get(result.runtime_id) or DEFAULT_MAX_TRIGGER_COUNT
        if state["attempts"] >= limit:
            state = {"state": BLOCKED, "generation": state.get("generation", 1), "attempts": state["attempts"],
                     "reason": BLOCK_REASON, "blockedAt": _now(),
                     **({"lastError": state["lastError"]} if state.get("lastError") else {}),
                     **({"pluginVersion": state["pluginVersion"]} if state.get("pluginVersion") else {})}
        else:
            state["state"] = PENDING
        out[result.runtime_id] = state
    return out


def setup_all_done(states: dict[str, Any], setup_runtime_ids: Iterable[str], plugin_versions: dict[str, str | None] | None = None) -> bool:
    """True when every setup runtime is done (completed or waived)."""
    for runtime_id in setup_runtime_ids:
        version = (plugin_versions or {}).get(runtime_id.split("/", 1)[0])
        if setup_state_of(states, runtime_id, version)["state"] != DONE:
            return False
    return True


def setup_retry_state(state: dict[str, Any]) -> dict[str, Any]:
    """retry: a blocked runtime becomes a fresh pending one (generation + 1, attempts 0)."""
    out = {"state": PENDING, "generation": int(state.get("generation") or 1) + 1, "attempts": 0}
    if state.get("pluginVersion"):
        out["pluginVersion"] = state["pluginVersion"]
    return out


def setup_waive_state(state: dict[str, Any]) -> dict[str, Any]:
    """waive: done {resolution: waived} with a degradation warning."""
    out = {"state": DONE, "resolution": RESOLUTION_WAIVED, "generation": int(state.get("generation") or 1),
           "attempts": int(state.get("attempts") or 0), "completedAt": _now(), "warning": WAIVE_WARNING}
    if state.get("pluginVersion"):
        out["pluginVersion"] = state["pluginVersion"]
    return out


class SetupNotBlocked(Exception):
    """The target is not blocked (409): only blocked setup runtimes can be retried or waived."""

    def __init__(self, runtime_id: str, state: dict[str, Any]) -> None:
        super().__init__(f"Setup runtime {runtime_id} is {state.get('state')}"
                         f"{'/' + state['resolution'] if state.get('resolution') else ''}; only a blocked runtime can be retried or waived")
        self.state = state


def setup_runtime_retry(session_id: str, runtime_id: str) -> dict[str, Any]:
    """POST /api/sessions/:id/setup/:runtimeId/retry: blocked → pending (generation + 1,
    attempts 0). Idempotent for a pending target. Returns the new state. Raises SetupNotBlocked.
    Only setupRuntimes changes; the phase moves in the next turn's finalize (spec 004)."""
    return _setup_runtime_change(session_id, runtime_id, PENDING, setup_retry_state)


def setup_runtime_waive(session_id: str, runtime_id: str) -> dict[str, Any]:
    """POST .../waive: blocked → done {resolution: waived, warning}. Idempotent for a waived
    target. Raises SetupNotBlocked."""
    return _setup_runtime_change(session_id, runtime_id, RESOLUTION_WAIVED, setup_waive_state)


def _setup_runtime_change(session_id: str, runtime_id: str, idempotent: str, change) -> dict[str, Any]:
    from django.db import transaction

    from sessions.models import Session

    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        states = dict(session.setup_runtimes or {})
        state = setup_state_of(states, runtime_id)
        if state["state"] == BLOCKED:
            new_state = change(state)
            states[runtime_id] = new_state
            session.setup_runtimes = states
            session.save(update_fields=["setup_runtimes", "updated_at"])
            return new_state
        if (idempotent == PENDING and state["state"] == PENDING and runtime_id in states) or (
                idempotent == RESOLUTION_WAIVED and state["state"] == DONE and state.get("resolution") == RESOLUTION_WAIVED):
            return state
        raise SetupNotBlocked(runtime_id, state)
