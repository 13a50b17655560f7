"""Resume one suspension (spec 004 §Suspend / Resume): continue the suspended runtime with the
player's data and commit — the agent loop from its saved conversation, a function runtime's
handler again with ``ctx.resume_data``. The rows and staleness rules are turns.engine.suspend.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from covel.jsoncopy import json_copy
from turns.engine import trace as T
from turns.engine.runtime import STATUS_SUSPENDED, RuntimeResult, TurnInfo
from turns.engine.suspend import (
    STATUS_PENDING,
    STATUS_RESOLVED,
    STATUS_RESUMING,
    TURN_RESUMED,
    SuspensionOutdated,
    held_jobs_release,
    logical_turn_waiting,
    proposal_from_json,
    records_content,
    suspension_rows_hook,
)
from turns.events import NewEvent


@dataclass
class ResumeOutcome:
    """status: success | suspended | failed. suspension_id: the new one when it suspended again;
    error: ``{code, message}`` when the runtime failed (nothing committed); events: the NewEvent
    rows the commit appended (as SessionEvent dicts)."""

    status: str
    result: RuntimeResult
    turn_id: str
    suspension_id: str | None = None
    error: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    counted: bool = False


def suspension_resume_run(session_id: str, row: Any, data: dict[str, Any], *, provider_keys: dict[str, str] | None = None,
                          plugin_settings: dict[str, Any] | None = None, plugin_registry: Any = None,
                          code_grants: Any = None) -> ResumeOutcome:
    """Continue ``row`` (a claimed Suspension) with ``data`` and commit (caller holds the session
    lock). The buffered writes of the chain and the resumed run's writes commit in one
    transaction, which also resolves the row, counts the player turn once when the chain ends and
    no other suspension of its logical turn waits (staging the detached jobs the turn held, spec
    004 §挂起与回合计数), and re-checks ``data-changed`` (SuspensionOutdated, nothing written). A setup
    runtime's resume settles its setup state in that transaction and switches the phase when it
    completes the last setup (no opening relay; spec 004 §恢复 setup runtime). A re-suspension hands
    the held jobs to the new row. A runtime failure commits nothing (status failed)."""
    from sessions.models import Session
    from turns.engine.agent import agent_runtime_run
    from turns.engine.commit import CommitPlan, turn_commit
    from turns.engine.env import ExecutionEnv, community_entries_load, tools_for_registry
    from turns.engine.providers.config import ModelRouter, model_config_active
    from turns.engine.run import _plugin_records, _user_settings
    from turns.engine.snapshot import session_snapshot_load
    from turns.engine.tools.context import CancelToken
    from turns.models import Suspension

    started = time.monotonic()
    session = Session.objects.get(pk=session_id)
    if plugin_registry is None:
        from plugins_app.registry import plugin_registry as registry_default

        plugin_registry = registry_default()
    config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    router = ModelRouter(config, provider_keys=provider_keys)
    trace_id = str(uuid.uuid4())
    sink = T.RecordingSink()
    tracer = T.Tracer(sink, trace_id=trace_id, session_id=session_id)
    snapshot = session_snapshot_load(session)
    records = _plugin_records(plugin_registry, snapshot.active_plugins, snapshot.metadata)
    runtime = next((r for p in records for r in p.manifest.runtimes if r.id == row.runtime_id), None)
    if runtime is None or (runtime.agent is None and runtime.function is None):
        raise LookupError(row.runtime_id)
    community_entries_load(plugin_registry, records, code_grants)
    tool_registry, executor = tools_for_registry(plugin_registry)
    env = ExecutionEnv(snapshot=snapshot, plugin_registry=plugin_registry, plugins=records, tool_registry=tool_registry,
                       executor=executor, router=router, tracer=tracer, cancel=CancelToken(), code_grants=code_grants,
                       user_settings=_user_settings(records, snapshot.world.metadata, plugin_settings))
    payload = row.payload or {}
    is_setup = payload.get("stage") == "setup" or runtime.stage == "setup"
    turn = TurnInfo(turn_id=str(uuid.uuid4()), kind="setup" if is_setup else "main", origin="resume", logical_turn=int(payload.get("logicalTurn") or 1),
                    resume_data=json_copy(data), resumed_from_suspension_id=row.suspension_id)
    tracer.emit(TURN_RESUMED, {"suspensionId": row.suspension_id, "runtimeId": row.runtime_id, "pluginId": row.plugin_id,
                               "turnId": turn.turn_id, "sourceTurnId": row.turn_id}, turn_id=turn.turn_id)
    saved = [proposal_from_json(p) for p in payload.get("proposals") or []]
    if runtime.agent is not None and (payload.get("continuation") or {}).get("kind") == "agent":
        result = agent_runtime_run(env, runtime, turn, upstream=[], inputs={}, upstream_texts=[], run_id=str(uuid.uuid4()),
                                   resume={"continuation": payload["continuation"], "data": data, "proposals": saved})
    else:
        # A function runtime's handler runs again with ctx.resume_data; the writes staged before
        # the suspension commit first, then its own (spec 004 §Suspend / Resume).
        from turns.engine.function import function_runtime_run

        inputs = (payload.get("continuation") or {}).get("inputs") or {}
        result = function_runtime_run(env, runtime, turn, upstream=[], inputs=inputs, run_id=str(uuid.uuid4()),
                                      progress_job_id=(payload.get("continuation") or {}).get("progressJobId"))
        if result.status in ("success", STATUS_SUSPENDED):
            result.proposals = saved + list(result.proposals)
    if result.status not in ("success", STATUS_SUSPENDED) or (result.status == STATUS_SUSPENDED and result.suspension is None):
        return ResumeOutcome(status="failed", result=result, turn_id=turn.turn_id,
                             error=result.error or {"code": "runtime_error", "message": "the runtime failed"})
    suspended_again = result.status == STATUS_SUSPENDED
    outcome = ResumeOutcome(status="suspended" if suspended_again else "success", result=result, turn_id=turn.turn_id)

    def unchanged(locked) -> None:
        # data-changed again when the commit starts: a write that raced the resumed run voids it.
        touched = payload.get("touched") or {}
        if touched and records_content(locked.pk, list(touched)) != touched:
            raise SuspensionOutdated("data-changed")

    def resolve(locked) -> list[NewEvent]:
        Suspension.objects.filter(pk=row.pk).update(status=STATUS_RESOLVED, resolved_at=timezone.now())
        events: list[NewEvent] = []
        waiting = logical_turn_waiting(locked, payload, exclude_pk=row.pk)
        if not suspended_again and not waiting:
            # the logical turn ends with this commit: the detached jobs it held are staged now
            events.extend(held_jobs_release(locked, payload))
        if not suspended_again:
            events.append(NewEvent(type=TURN_RESUMED, topic="turn", turn_id=turn.turn_id, payload={
                "suspensionId": row.suspension_id, "runtimeId": row.runtime_id, "pluginId": row.plugin_id,
                "turnId": turn.turn_id, "sourceTurnId": row.turn_id}))
        if not suspended_again and payload.get("countPolicy") and not waiting:
            locked.completed_player_turns += 1
            locked.save(update_fields=["completed_player_turns", "updated_at"])
            outcome.counted = True
        return events

    plan = CommitPlan(turn=turn, execution_id=None, trace_id=trace_id,
                      summary={"origin": "resume", "kind": "main", "suspensionId": row.suspension_id, "runtimeId": row.runtime_id})
    plan.before_apply.append(unchanged)
    plan.in_transaction.append(resolve)
    if is_setup and not suspended_again:
        # The done mark (and the phase when this was the last setup) commit with the resume; the
        # attempt is the one that suspended (spec 004 §恢复 setup runtime).
        from turns.engine.run import _plugin_versions, _setup_runtime_ids
        from turns.engine.setup import setup_all_done, setup_states_settle

        versions = _plugin_versions(env)
        limits = {r.id: r.trigger.max_trigger_count for r in env.runtimes() if r.stage == "setup"}
        plan.setup_runtimes = setup_states_settle(snapshot.setup_runtimes, [result], max_trigger_counts=limits,
                                                  plugin_versions=versions, committed=True)
        if setup_all_done(plan.setup_runtimes, _setup_runtime_ids(env), versions):
            plan.phase = "playing"
    if suspended_again:
        # The chain goes on: the new row inherits the logical turn, its count policy and the
        # player-turn count at the first suspension; every buffered write waits for the last resume.
        hook = suspension_rows_hook(results=[result], turn=TurnInfo(turn_id=row.turn_id, kind=payload.get("turnKind") or "main",
                                                                   origin="resume", logical_turn=turn.logical_turn),
                                    count_policy=bool(payload.get("countPolicy")), player_turns=int(payload.get("playerTurns", 0)),
                                    plugin_versions={row.plugin_id: payload.get("pluginVersion")},
                                    held_jobs=payload.get("heldJobs"))
        plan.in_transaction.append(hook)
        # a suspended result contributes nothing to this commit: its writes move to the new row
        committed = turn_commit(session_id=session_id, plan=plan, results=[result], tracer=tracer)
        outcome.suspension_id = result.suspension.get("suspensionId")
        new = Suspension.objects.filter(suspension_id=outcome.suspension_id).first()
        if new is not None:
            new.payload = {**new.payload, "logicalTurnId": payload.get("logicalTurnId"), "touched": {
                **(payload.get("touched") or {}), **(new.payload.get("touched") or {})}}
            new.save(update_fields=["payload"])
    else:
        committed = turn_commit(session_id=session_id, plan=plan, results=[result], tracer=tracer)
    outcome.events = [{"type": e.type, "payload": e.payload, "id": getattr(e, "event_id", None)} for e in committed.events]
    # The resumed run's ctx.progress frames (the chain's job ends succeeded, or waits again).
    outcome.events += [{"type": T.JOB_STATUS_UPDATED, "payload": p, "id": None} for p in sink.of_type(T.JOB_STATUS_UPDATED)]
    outcome.result.duration_ms = int((time.monotonic() - started) * 1000)
    return outcome
