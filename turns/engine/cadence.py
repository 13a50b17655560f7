"""Cadence of auto main-stage runtimes across turns (spec 004 §Turn 执行, §Plugin 摘要: auto runtime
的节奏写在 schedule.every; §事件类型: runtime.skipped 因 cooldown / startTurn / maxTriggerCount).

The trigger ledger lives in the session row (``metadata.runtimeTriggers``): for each main-stage
runtime whose trigger declares ``cooldownTurns`` or ``maxTriggerCount``, the logical turn it was last
triggered in and how many times it was triggered, advanced by the commit of a main turn
(turns.engine.commit). A turn that does not commit leaves it as it was. The scheduler
(turns.engine.schedule) reads it from the execution's frozen snapshot.
"""
from __future__ import annotations

from typing import Any

from plugins_app.manifests import RuntimeManifest

MAIN_STAGES = ("pre-turn", "narrative", "post-turn", "audit")
SKIP_INTERVAL = "interval"
SKIP_COOLDOWN = "cooldown"
SKIP_MAX_TRIGGER_COUNT = "max-trigger-count"
#: Session metadata key of the trigger ledger: ``{runtimeId: {"lastTurn": int, "count": int}}``.
TRIGGER_LEDGER_KEY = "runtimeTriggers"


def trigger_is_ledgered(runtime: RuntimeManifest) -> bool:
    """Whether the trigger ledger (``TRIGGER_LEDGER_KEY``) keeps this runtime's runs: a main-stage
    runtime whose trigger declares ``cooldownTurns`` or ``maxTriggerCount``."""
    return runtime.stage in MAIN_STAGES and bool(runtime.trigger.cooldown_turns or runtime.trigger.max_trigger_count)


def trigger_cadence_skip(runtime: RuntimeManifest, logical_turn: int, entry: dict[str, Any] | None) -> str | None:
    """The cadence decision of an auto / scheduled main-stage runtime for ``logical_turn``
    (spec 004 §Plugin 摘要: auto runtime 的节奏写在 schedule.every; §事件类型: runtime.skipped 因
    cooldown / startTurn / maxTriggerCount). Returns a skip reason or None (it runs):

    - ``every`` (``schedule.every`` / ``trigger.every``, legacy ``trigger.interval``) N: runs on the
      logical turns divisible by N (N = 2: turns 2, 4, 6), on auto and scheduled triggers alike;
    - ``maxTriggerCount`` N: skipped once it has been triggered N times in committed main turns;
    - ``cooldownTurns`` N: skipped while fewer than N logical turns have passed since the turn it
      was last triggered in (N = 1: at most once per logical turn; N = 2: every other turn).

    entry: its trigger-ledger row ``{"lastTurn", "count"}`` or None (never triggered). A manual run
    (a retry naming it) is not judged by these (§event 级: 点击就是触发决定)."""
    trigger = runtime.trigger
    if trigger.interval and logical_turn % trigger.interval:
        return SKIP_INTERVAL
    entry = entry if isinstance(entry, dict) else {}
    if trigger.max_trigger_count and int(entry.get("count") or 0) >= trigger.max_trigger_count:
        return SKIP_MAX_TRIGGER_COUNT
    last = entry.get("lastTurn")
    if trigger.cooldown_turns and isinstance(last, int) and logical_turn - last < trigger.cooldown_turns:
        return SKIP_COOLDOWN
    return None


def trigger_ledger_advance(ledger: dict[str, Any] | None, runtime_ids: list[str], logical_turn: int) -> dict[str, Any]:
    """The trigger ledger after ``runtime_ids`` were triggered in ``logical_turn`` (a committed
    main turn): each one's ``lastTurn`` becomes the turn and its ``count`` goes up by one."""
    out = {k: dict(v) for k, v in (ledger or {}).items() if isinstance(v, dict)}
    for runtime_id in runtime_ids:
        entry = out.get(runtime_id) or {}
        out[runtime_id] = {"lastTurn": logical_turn, "count": int(entry.get("count") or 0) + 1}
    return out
