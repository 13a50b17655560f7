"""The turn engine's entry point: ``execution_run(execution_id, sink) -> ExecutionOutcome``.

The turn bridge calls it after claiming the Execution row and taking the session lock. It runs
the execution's turn(s), commits each in one transaction, and streams frames to ``sink``:
``interaction.submitted`` (answers), ``execution.started`` per turn, runtime/step/llm/tool
events, ``narrative.delta`` (ephemeral), post-commit domain events, and finally exactly one
``execution.completed`` ({committed, turnId, origin, abortReason?}) — carrying the opening
continuation's data when one ran. A rejection found inside the lock (input_already_committed,
interaction errors, session not active, the retry_source_* / retry_target_* / recovery_unavailable
checks of turns.engine.retry) emits a single ``error.occurred`` instead and returns
``rejected=True``; nothing is written then. The engine never raises for a runtime failure.

Retries (spec 004 §Actions（SSE 桥接）, §重试的事件与状态): retry_runtime / retry_failed_runtimes run
their targets in one manual turn reading the source turn's committed results, with the retry scope
on every event; ``recoverFromTurnId`` runs a recorded turn again (retry_turn: its actions and the
answers it saved). See turns.engine.retry.

Detached runtimes (turns.engine.schedule) become runtime jobs: the turn's commit writes their
RuntimeJob rows through the ``turns.engine.ports.runtime_jobs_stage`` port in the same transaction.
A job worker then calls ``runtime_job_execute(job)`` (runs the runtime with the job's frozen inputs
and settings; no lock, no commit) and, holding the session lock, ``runtime_job_commit(run,
in_transaction=hook)`` (one transaction; the hook checks the job's fencing token).

Steer (spec 004 §回合中控制 steer; turns.engine.steer): when ``cancel`` is a ``TurnControl`` its
steer inbox is open while a turn that runs an agent story runtime is running its runtimes; the
story loop merges the messages into its next model call. A committed turn saves each merged
message in the same transaction as a user ChatMessage (kind ``steer``) and a user TurnMessage
(the model-facing text) placed right before the story runtime's prose; an uncommitted turn
saves none. Accepted messages no model call took leave a ``steer.discarded`` trace row.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from django.conf import settings

from sessions.faults import plugins_paused
from turns.engine import hooks, ports, trace as T
from turns.engine.commit import CommitFailed, CommitPlan, PlayerInput, turn_commit, turn_failure_record
from turns.engine.env import CodeGrants, ExecutionEnv, community_entries_load, tools_for_registry
from turns.engine.followers import followers_plan
from turns.engine.interactions import answers_resolve, form_validator_lookup
from turns.engine.providers.config import ModelRouter, model_config_active
from turns.engine.providers.routing import request_model_router
from turns.engine.render import player_input_render
from turns.engine.retry import (
    SUMMARY_LOGICAL_TURN,
    SUMMARY_RECOVERED_FROM,
    SUMMARY_RETRY,
    Recovery,
    RetryRejected,
    RetryScope,
    recovery_resolve,
    retry_scope_resolve,
)
from turns.engine.runtime import (
    ORIGIN_CONTINUATION,
    ORIGIN_MANUAL,
    ORIGIN_PLAYER,
    STATUS_FAILED,
    STATUS_SKIPPED,
    STATUS_SUCCESS,
    TurnInfo,
)
from turns.engine.cadence import trigger_is_ledgered
from turns.engine.schedule import DeferredResult, runtime_run, turn_runtimes_run
from turns.engine.setup import setup_all_done, setup_states_settle
from turns.engine.suspend import suspension_rows_hook
from turns.engine.snapshot import session_snapshot_load
from turns.engine.steer import STEER_DISCARDED, STEER_MESSAGE_KIND, AppliedSteer, TurnControl, turn_control_of
from turns.engine.tools.context import CancelToken

logger = logging.getLogger(__name__)

ABORTED_BY_PLAYER = "aborted-by-player"
TYPE_SUBMIT_ACTIONS = "submit_actions"
TYPE_START_SESSION = "start_session"
TYPE_RETRY_TURN = "retry_turn"
TYPE_RETRY_RUNTIME = "retry_runtime"
TYPE_RETRY_FAILED_RUNTIMES = "retry_failed_runtimes"
#: TurnResult / turn origin of a runtime job's background turn.
ORIGIN_DETACHED = "detached"
ACTIVATION_STAGE = "stage"


@dataclass
class ExecutionOutcome:
    """committed: the last turn committed. turn_id/origin: the last turn run (the continuation
    when one ran). turn_ids: every turn in order. rejected: refused before anything ran (an
    ``error.occurred`` was emitted, no ``execution.completed``). error: {code, message} when the
    last turn failed or the request was rejected."""

    committed: bool
    turn_id: str | None = None
    origin: str | None = None
    turn_ids: list[str] = field(default_factory=list)
    abort_reason: str | None = None
    rejected: bool = False
    error: dict[str, Any] | None = None
    failed_runtime_ids: list[str] = field(default_factory=list)


def _reject(sink, code: str, message: str, details: dict[str, Any] | None = None, turn_id: str | None = None) -> ExecutionOutcome:
    payload: dict[str, Any] = {"message": message, "code": code}
    if details:
        payload["details"] = details
    sink.emit(T.ERROR_OCCURRED, payload, turn_id=turn_id)
    return ExecutionOutcome(committed=False, rejected=True, error={"code": code, "message": message})


def _plugin_records(registry, active: list[str], metadata: dict[str, Any] | None = None):
    """The loaded records of the session's saved plugins, in order, without the plugins the fault
    breaker paused in the session (``metadata.pluginFaults``, sessions.faults): their runtimes and
    hooks do not run until the player resumes them."""
    paused = plugins_paused(metadata)
    out = []
    for plugin_id in active:
        record = registry.get(plugin_id)
        if record is not None and record.is_loaded and plugin_id not in paused:
            out.append(record)
    return out


def _user_settings(records, world_meta: dict[str, Any], request_settings: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    world = world_meta.get("pluginSettings") if isinstance(world_meta.get("pluginSettings"), dict) else {}
    for record in records:
        merged = {s["key"]: s.get("default") for s in record.manifest.contributes.settings if isinstance(s, dict) and "key" in s}
        merged.update(world.get(record.id) or {})
        merged.update((request_settings or {}).get(record.id) or {})
        out[record.id] = merged
    return out


def _kind_schemas(env: ExecutionEnv) -> dict[str, dict[str, Any]]:
    """``fieldsSchema`` of the active plugins' action kinds, by kind (``<pluginId>/<name>``)."""
    out: dict[str, dict[str, Any]] = {}
    for record in env.plugins:
        for item in record.manifest.contributes.action_kinds:
            if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("fieldsSchema"), dict):
                out[f"{record.id}/{item['name']}"] = item["fieldsSchema"]
    return out


def _setup_runtime_ids(env: ExecutionEnv) -> list[str]:
    return [r.id for r in env.runtimes() if r.stage == "setup" and r.trigger.type == "auto"]


def _plugin_versions(env: ExecutionEnv) -> dict[str, str | None]:
    return {p.id: (str(p.manifest.version) if p.manifest.version is not None else None) for p in env.plugins}


def execution_run(
    execution_id: str,
    sink: T.EventSink,
    *,
    provider_keys: dict[str, str] | None = None,
    plugin_settings: dict[str, Any] | None = None,
    cancel: CancelToken | None = None,
    plugin_registry: Any = None,
    model_router: ModelRouter | None = None,
    code_grants: CodeGrants | None = None,
    model_routing: dict[str, Any] | None = None,
    preloaded: tuple[Any, ...] | None = None,
    commit_best_effort: list[Callable[[Any], list[Any]]] | None = None,
) -> ExecutionOutcome:
    """Run one claimed execution (see module docstring).

    provider_keys: the request's X-Provider-Keys ({provider: key}), kept in memory only.
    plugin_settings: X-Plugin-User-Settings ({pluginId: {key: value}}).
    cancel: set by the bridge on abort (stops the LLM stream, skips later runtimes, no commit:
    execution.completed carries abortReason "aborted-by-player"). A ``TurnControl``
    (turns.engine.steer) also carries /steer messages into the story runtime's next model call;
    a plain CancelToken disables steering.
    plugin_registry / model_router: injectable for tests and embedding hosts; default to the
    process registry (plugins_app.registry.plugin_registry) and COVEL_HOME/llm.toml.
    code_grants: the session's community-code grants (``turns.engine.env.CodeGrants``), asked right
    before a community entry is imported and before each community runtime runs; None runs no
    community code (its runtimes fail with ``approval_required``).
    model_routing: the request's own model routing, kept in memory only like the keys
    (``{"slotConfig"?: <X-Slot-Config JSON>, "relay"?: <X-Model-Relay channel id>}``): bound slots
    use the request's presets (turns.engine.providers.routing), and in the shared tiers their
    loopback/LAN endpoints are reached through that relay channel (covel.model_relay).
    preloaded: ``(execution, session)`` rows the caller read under the session lock, optionally
    followed by the SessionSnapshot it loaded from that session row (so the engine does not read
    them again); default: read here.
    commit_best_effort: hooks every turn commit of this execution runs last in its transaction
    (``CommitPlan.best_effort``: ``hook(session) -> [NewEvent]``; a failing one is left out of the
    commit, not the turn), e.g. the worker's automatic snapshot.
    Preconditions: the caller holds the session lock for the whole call.
    """
    from sessions.models import Session
    from turns.models import Execution

    snapshot = None
    if preloaded is not None:
        execution, session, *rest = preloaded
        snapshot = rest[0] if rest else None
    else:
        execution = Execution.objects.get(pk=execution_id)
        session = Session.objects.get(pk=execution.session_id)
    trace_id = execution.trace_id or str(uuid.uuid4())
    payload = dict(execution.payload or {})
    cancel = cancel or TurnControl()
    if session.status != Session.STATUS_ACTIVE:
        return _reject(sink, "session_not_active", f"Session is {session.status}")
    if plugin_registry is None:
        from plugins_app.registry import plugin_registry as registry_default

        plugin_registry = registry_default()
    if model_router is None:
        config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
        model_router = request_model_router(config, provider_keys=provider_keys, routing=model_routing)
    input_message_id = payload.get("inputMessageId") if execution.type == TYPE_SUBMIT_ACTIONS else None
    if input_message_id:
        from sessions.models import ChatMessage

        if ChatMessage.objects.filter(session=session, message_id=input_message_id).exists():
            return _reject(sink, "input_already_committed", "This input was already committed with a turn; do not resend it.")
    if execution.type == TYPE_START_SESSION and not session.active_plugins:
        return _reject(sink, "invalid_action_request", "Session has no active plugins.")

    runner = _Runner(execution=execution, session_id=session.id, sink=sink, trace_id=trace_id, cancel=cancel,
                     plugin_registry=plugin_registry, router=model_router, plugin_settings=plugin_settings,
                     code_grants=code_grants)
    runner.commit_best_effort = list(commit_best_effort or ())
    runner.session_row = session  # the first snapshot loads from it (nothing committed since it was read)
    runner.snapshot_row = snapshot  # or is this one, loaded from that row
    return runner.run(payload)


def _settlements_pending(snapshot: Any) -> bool:
    """Whether any plugin holds a pending dimension settlement receipt (read from the snapshot, so a
    session without one pays no query for the retry; spec 004 §维度编辑与待结算恢复)."""
    from turns.engine.settlements import SETTLEMENTS_NAMESPACE, STATUS_PENDING

    return any(ns == SETTLEMENTS_NAMESPACE and any(isinstance(v, dict) and v.get("status") == STATUS_PENDING for v in rows.values())
               for (_pid, ns), rows in snapshot.plugin_data.items())


class _Runner:
    def __init__(self, *, execution, session_id, sink, trace_id, cancel, plugin_registry, router, plugin_settings,
                 code_grants=None) -> None:
        self.code_grants = code_grants
        self.execution = execution
        self.session_id = session_id
        self.sink = sink
        self.trace_id = trace_id
        self.cancel = cancel
        self.plugin_registry = plugin_registry
        self.router = router
        self.plugin_settings = plugin_settings
        self.tracer = T.Tracer(sink, trace_id=trace_id, session_id=session_id)
        self.turn_ids: list[str] = []
        self.last_results: list[Any] = []  # the runtime results of the last turn run
        self.recovered_from: str | None = None  # recoverFromTurnId, once checked
        self.session_row: Any = None  # a Session row still current, used once by _env
        self.snapshot_row: Any = None  # a SessionSnapshot still current (of session_row), used once by _env
        self.commit_best_effort: list[Any] = []  # CommitPlan.best_effort of every turn commit

    def _env(self) -> ExecutionEnv:
        from sessions.models import Session

        session, self.session_row = self.session_row, None
        snapshot, self.snapshot_row = self.snapshot_row, None
        if snapshot is None:
            if session is None:
                session = Session.objects.get(pk=self.session_id)
            snapshot = session_snapshot_load(session)
        records = _plugin_records(self.plugin_registry, snapshot.active_plugins, snapshot.metadata)
        community_entries_load(self.plugin_registry, records, self.code_grants)
        tool_registry, executor = tools_for_registry(self.plugin_registry)
        return ExecutionEnv(snapshot=snapshot, plugin_registry=self.plugin_registry, plugins=records,
                            code_grants=self.code_grants,
                            tool_registry=tool_registry, executor=executor, router=self.router, tracer=self.tracer,
                            request_model=self.execution.model or None if hasattr(self.execution, "model") else None,
                            cancel=self.cancel,
                            user_settings=_user_settings(records, snapshot.world.metadata, self.plugin_settings))

    def run(self, payload: dict[str, Any]) -> ExecutionOutcome:
        kind = self.execution.type
        env = self._env()
        snapshot = env.snapshot
        if kind == TYPE_SUBMIT_ACTIONS and snapshot.phase == "playing" and _settlements_pending(snapshot):
            # Pending dimension settlements are retried once first (spec 004 §维度编辑与待结算恢复).
            retried, pending = ports.settlements_retry(self.session_id, plugin_registry=self.plugin_registry, router=self.router,
                                                       code_grants=self.code_grants, plugin_settings=self.plugin_settings)
            if pending:
                from turns.engine.settlements import ABORT_MESSAGE, ABORT_SETTLEMENT_PENDING

                aborted_id = str(uuid.uuid4())
                self.turn_ids.append(aborted_id)
                return self._completed(committed=False, turn_id=aborted_id, origin=ORIGIN_PLAYER,
                                       abort_reason=ABORT_SETTLEMENT_PENDING,
                                       error={"code": ABORT_SETTLEMENT_PENDING, "message": ABORT_MESSAGE, "pending": pending})
            if retried:
                env = self._env()  # the retry committed new dimension values
                snapshot = env.snapshot
        player_input: PlayerInput | None = None
        answers: list[dict[str, Any]] = []
        action_kind = None
        only: frozenset[str] | None = None
        origin = ORIGIN_PLAYER
        lore_override = payload.get("loreOverride") if kind == TYPE_START_SESSION and isinstance(payload.get("loreOverride"), str) else None
        if lore_override is not None:
            snapshot.world.lore = lore_override
            snapshot.metadata["loreOverride"] = lore_override
        # The first turn takes the id the request gave its execution (a fresh uuid4, unused until
        # now), so the execution row names it already; later turns of the execution get new ones.
        turn_id = getattr(self.execution, "turn_id", "") or str(uuid.uuid4())
        scope: RetryScope | None = None
        recovery: Recovery | None = None
        reran_answers = False
        try:
            if isinstance(payload.get("recoverFromTurnId"), str):
                recovery = recovery_resolve(self.session_id, payload["recoverFromTurnId"], execution_pk=self.execution.pk)
                self.recovered_from = recovery.turn_id
            if kind in (TYPE_RETRY_RUNTIME, TYPE_RETRY_FAILED_RUNTIMES):
                ids = [payload["runtimeId"]] if kind == TYPE_RETRY_RUNTIME else list(payload.get("runtimeIds") or [])
                scope = retry_scope_resolve(self.session_id, runtime_ids=ids, source_turn_id=payload.get("retryFromTurnId"),
                                            runtimes={r.id: r for r in env.runtimes()},
                                            completed_player_turns=snapshot.completed_player_turns)
        except RetryRejected as exc:
            return _reject(self.sink, exc.code, exc.message)
        if kind == TYPE_SUBMIT_ACTIONS or (kind == TYPE_RETRY_TURN and recovery is not None and recovery.actions):
            # retry_turn from a recorded turn runs its recorded actions again; answers it saved
            # when it started are not submitted again (spec 004 §玩家交互 连接中断).
            recorded = kind == TYPE_RETRY_TURN
            actions = [dict(a) for a in (recovery.actions if recorded else payload.get("actions") or [])]
            try:
                batch = answers_resolve(actions, snapshot.pending_interactions, locale=snapshot.locale,
                                        session_id=self.session_id, kind_schemas=_kind_schemas(env),
                                        form_validators=lambda plugin_id, name: form_validator_lookup(env, plugin_id, name),
                                        saved=recovery.answered if recovery is not None else None)
            except CommitFailed as exc:
                return _reject(self.sink, exc.code, exc.message, getattr(exc, "details", None))
            answers, actions = batch.answers, batch.actions
            reran_answers = recorded and bool(answers)
            message_id = (recovery.message_id if recorded and recovery is not None else None) or payload.get("inputMessageId")
            player_input = self._player_input(env, actions, message_id)
            action_kind = actions[0].get("kind") if actions else None
            fresh = [a for a in answers if not a["saved"]]
            if fresh:
                self.sink.emit(T.INTERACTION_SUBMITTED, {
                    "interactionTurnId": fresh[0]["turnId"],
                    "results": [{"submissionId": str(uuid.uuid4()), "interactionId": a["interactionId"], "values": a["values"],
                                 "filledNarrative": a["filledNarrative"]} for a in fresh],
                    **({"message": {"id": player_input.message_id, "content": player_input.content}} if player_input else {}),
                }, turn_id=turn_id)
        if recovery is not None and recovery.origin == ORIGIN_CONTINUATION and kind == TYPE_RETRY_TURN:
            origin = ORIGIN_CONTINUATION
        if scope is not None:
            only = frozenset(scope.runtime_ids)
            origin = ORIGIN_MANUAL
            self.tracer.scope = scope.event_fields()
        setup_ids = _setup_runtime_ids(env)
        in_setup = snapshot.phase == "setup" and bool(setup_ids) and not setup_all_done(snapshot.setup_runtimes, setup_ids, _plugin_versions(env))
        if kind == TYPE_START_SESSION and not in_setup:
            origin = ORIGIN_CONTINUATION
        logical_turn = scope.logical_turn if scope is not None and scope.logical_turn else snapshot.completed_player_turns + 1
        turn = TurnInfo(turn_id=turn_id, kind="setup" if in_setup and only is None else "main", origin=origin,
                        player_message=player_input.rendered if player_input else None, action_kind=action_kind,
                        submissions=answers, logical_turn=logical_turn, only_runtime_ids=only,
                        retry_source_turn_id=scope.source_turn_id if scope is not None else None)
        outcome = self._turn(env, turn, player_input=player_input, answers=answers, lore_override=lore_override, scope=scope)
        # A retry_turn continues into the opening only when it re-ran the player's answers (spec §开场接力).
        continues = kind in (TYPE_SUBMIT_ACTIONS, TYPE_START_SESSION) or (kind == TYPE_RETRY_TURN and reran_answers)
        if turn.kind == "setup" and outcome.committed and outcome.phase_became_playing and continues:
            if self.cancel.is_cancelled:
                cont_id = str(uuid.uuid4())
                self.turn_ids.append(cont_id)
                return self._completed(committed=False, turn_id=cont_id, origin=ORIGIN_CONTINUATION, abort_reason=ABORTED_BY_PLAYER)
            env = self._env()
            cont = TurnInfo(turn_id=str(uuid.uuid4()), kind="main", origin=ORIGIN_CONTINUATION,
                            logical_turn=env.snapshot.completed_player_turns + 1)
            outcome = self._turn(env, cont, player_input=None, answers=[], lore_override=None)
            turn = cont
        return self._completed(committed=outcome.committed, turn_id=turn.turn_id, origin=turn.origin,
                               abort_reason=outcome.abort_reason, error=outcome.error, failed=outcome.failed_runtime_ids,
                               scope=scope.event_fields(self.last_results, committed=outcome.committed) if scope else None)

    def _player_input(self, env: ExecutionEnv, actions: list[dict[str, Any]], input_message_id: str | None) -> PlayerInput | None:
        snapshot = env.snapshot
        names = {c.id: c.name for c in snapshot.characters}
        players = [c.id for c in snapshot.characters if c.type == "player"]
        plugin_kinds = {}
        for record in env.plugins:
            for item in record.manifest.contributes.action_kinds:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    plugin_kinds[f"{record.id}/{item['name']}"] = item
        rendered = player_input_render(actions, locale=snapshot.locale, seats=snapshot.seats, characters=names,
                                       player_character_ids=players, plugin_kinds=plugin_kinds)
        if not rendered.rendered and not rendered.content:
            return None
        return PlayerInput(message_id=input_message_id or str(uuid.uuid4()), content=rendered.content, rendered=rendered.rendered,
                           actions=rendered.actions, seat_id=(actions[0].get("seatId") if actions else None) or "main")

    def _turn(self, env: ExecutionEnv, turn: TurnInfo, *, player_input, answers, lore_override,
              scope: RetryScope | None = None) -> "_TurnOutcome":
        from turns.models import Execution

        self.turn_ids.append(turn.turn_id)
        if turn.turn_id != self.execution.turn_id:
            Execution.objects.filter(pk=self.execution.pk).update(turn_id=turn.turn_id)
            self.execution.turn_id = turn.turn_id
        self.tracer.emit(T.EXECUTION_STARTED, {"turnId": turn.turn_id, "origin": turn.origin, "phase": env.snapshot.phase,
                                               "kind": turn.kind,
                                               **({"playerInput": {"actions": player_input.actions, "messageId": player_input.message_id}} if player_input else {})},
                         turn_id=turn.turn_id)
        hooks.turn_start(env, turn)
        steer = turn_control_of(self.cancel)
        if steer is not None:
            if _runs_story_agent(env, turn):
                steer.steer_open()
            else:
                self._steer_discard(turn, steer.steer_close(), "no_story_runtime")
        results = turn_runtimes_run(env, turn, context=scope.context if scope is not None else None)
        self.last_results = results
        applied: list[AppliedSteer] = []
        if steer is not None:
            self._steer_discard(turn, steer.steer_close(), "not_taken")
            applied = steer.steer_applied_take()
        snapshot = env.snapshot
        plan = CommitPlan(turn=turn, execution_id=str(self.execution.pk), trace_id=self.trace_id, player_input=player_input,
                          answers=answers, lore_override=lore_override,
                          summary={"origin": turn.origin, "kind": turn.kind, SUMMARY_LOGICAL_TURN: turn.logical_turn,
                                   **({"playerInput": {"actions": player_input.actions, "messageId": player_input.message_id}} if player_input else {}),
                                   **({SUMMARY_RETRY: scope.summary()} if scope is not None else {}),
                                   **({SUMMARY_RECOVERED_FROM: self.recovered_from} if self.recovered_from else {})},
                          best_effort=list(self.commit_best_effort), memory_index=snapshot.memory_indexed)
        if turn.kind == "main" and turn.only_runtime_ids is None:
            # The cadence ledger (turns.engine.cadence) counts what this turn triggered; a manual re-run does not count.
            ledgered = {r.id for r in env.runtimes() if trigger_is_ledgered(r)}
            plan.triggered = [r.runtime_id for r in results if r.runtime_id in ledgered and r.status != STATUS_SKIPPED]
        if applied:
            plan.summary["steer"] = [{"message": a.message, "runtimeId": a.runtime_id, "step": a.step} for a in applied]
            plan.before_story.append(_steer_messages_hook(turn.turn_id, applied))
        failed_ids = [r.runtime_id for r in results if r.status == STATUS_FAILED]
        # A sourced retry does not widen through event followers (spec 004 §批量恢复的边界).
        plan.followers = [] if turn.retry_source_turn_id else followers_plan(env, turn, results)
        versions = _plugin_versions(env)
        deferred = [r for r in results if isinstance(r, DeferredResult)]
        deferred_jobs = self._deferred_jobs(env, turn, deferred, versions) if deferred else []
        setup_ids = _setup_runtime_ids(env)
        max_counts = {r.id: r.trigger.max_trigger_count for r in env.runtimes() if r.stage == "setup"}
        phase_became_playing = False
        if self.cancel.is_cancelled:
            if turn.kind == "setup":
                plan.setup_runtimes = setup_states_settle(snapshot.setup_runtimes, results, max_trigger_counts=max_counts,
                                                          plugin_versions=versions, committed=False)
            turn_failure_record(session_id=self.session_id, plan=plan, results=results, tracer=self.tracer, abort_reason=ABORTED_BY_PLAYER)
            return _TurnOutcome(committed=False, abort_reason=ABORTED_BY_PLAYER, failed_runtime_ids=failed_ids)
        story_failed = any(r.is_story and r.status == STATUS_FAILED for r in results)
        if turn.kind == "setup":
            plan.setup_runtimes = setup_states_settle(snapshot.setup_runtimes, results, max_trigger_counts=max_counts,
                                                      plugin_versions=versions, committed=True)
            if setup_all_done(plan.setup_runtimes, setup_ids, versions):
                plan.phase = "playing"
                phase_became_playing = snapshot.phase != "playing"
        else:
            if snapshot.phase == "setup" and setup_all_done(snapshot.setup_runtimes, setup_ids, versions):
                plan.phase = "playing"
            # A retry_turn is a new main-loop turn on the committed context: it counts once it
            # commits, input or not (spec 004 §Actions: 提交成功后玩家回合数加一); a recovered
            # continuation has origin continuation and never counts.
            plan.count_player_turn = (turn.origin == ORIGIN_PLAYER
                                      and (player_input is not None or self.execution.type == TYPE_RETRY_TURN)
                                      and (plan.phase or snapshot.phase) == "playing")
        suspensions = suspension_rows_hook(results=results, turn=turn, count_policy=plan.count_player_turn,
                                           player_turns=snapshot.completed_player_turns, plugin_versions=versions,
                                           held_jobs=deferred_jobs)
        if suspensions is not None:
            # Saved with the turn's writes; the player turn counts on the last resume, and the
            # detached jobs wait with the suspension (spec 004 §挂起与回合计数).
            plan.in_transaction.append(suspensions)
            plan.count_player_turn = False
        elif deferred_jobs:
            plan.in_transaction.append(_jobs_enqueue_hook(deferred_jobs))
        if story_failed:
            error = next(r.error for r in results if r.is_story and r.status == STATUS_FAILED)
            turn_failure_record(session_id=self.session_id, plan=plan, results=results, tracer=self.tracer, error=error)
            return _TurnOutcome(committed=False, error=error, failed_runtime_ids=failed_ids)
        try:
            committed = turn_commit(session_id=self.session_id, plan=plan, results=results, tracer=self.tracer)
        except CommitFailed as exc:
            if turn.kind == "setup":
                plan.setup_runtimes = setup_states_settle(snapshot.setup_runtimes, results, max_trigger_counts=max_counts,
                                                          plugin_versions=versions, committed=False)
            error = {"code": exc.code, "message": exc.message}
            self.tracer.emit(T.ERROR_OCCURRED, error, turn_id=turn.turn_id)
            turn_failure_record(session_id=self.session_id, plan=plan, results=results, tracer=self.tracer, error=error)
            return _TurnOutcome(committed=False, error=error, failed_runtime_ids=failed_ids)
        for row in committed.events:
            # The subscribers' commit notice; the action stream ends with its own execution.completed.
            if row.type in T.FORWARDED_EVENT_TYPES and row.type != T.EXECUTION_COMPLETED:
                self.sink.emit(row.type, row.payload, turn_id=turn.turn_id)
        for result in results:
            if result.is_story and result.status == STATUS_SUCCESS and result.text:
                self.sink.emit(T.NARRATIVE_COMPLETED, {"runtimeId": result.runtime_id, "pluginId": result.plugin_id, "text": result.text},
                               turn_id=turn.turn_id)
        return _TurnOutcome(committed=True, phase_became_playing=phase_became_playing, failed_runtime_ids=failed_ids)

    def _steer_discard(self, turn: TurnInfo, messages: list[str], reason: str) -> None:
        for message in messages:
            self.tracer.emit(STEER_DISCARDED, {"message": message, "reason": reason}, turn_id=turn.turn_id)

    def _deferred_jobs(self, env: ExecutionEnv, turn: TurnInfo, deferred: list[DeferredResult],
                       versions: dict[str, str | None]) -> list[dict[str, Any]]:
        """Job specs of the detached runtimes with everything frozen at this turn (spec 004 §Turn
        执行: upstream results, source execution, model and settings)."""
        return [{
            "jobId": r.job_id, "pluginId": r.plugin_id, "runtimeId": r.runtime_id,
            "payload": {
                "origin": {"activation": ACTIVATION_STAGE, "sourceTurnId": turn.turn_id,
                           "sourceExecutionId": str(self.execution.pk), "sourceRuntimeId": r.runtime_id},
                "stage": r.stage, "inputs": r.inputs, "logicalTurn": turn.logical_turn, "playerMessage": turn.player_message,
                "locale": env.snapshot.locale, "model": env.request_model, "userSettings": env.user_settings.get(r.plugin_id, {}),
                "sourceTraceId": self.trace_id, "pluginVersion": versions.get(r.plugin_id), "completion": r.completion,
            },
        } for r in deferred]

    def _completed(self, *, committed: bool, turn_id: str, origin: str, abort_reason: str | None = None,
                   error: dict[str, Any] | None = None, failed: list[str] | None = None,
                   scope: dict[str, Any] | None = None) -> ExecutionOutcome:
        payload: dict[str, Any] = {"committed": committed, "turnId": turn_id, "origin": origin, **(scope or {})}
        if abort_reason:
            payload["abortReason"] = abort_reason
        if error:
            payload["error"] = error
        if failed:
            payload["failedRuntimeIds"] = failed
        self.sink.emit(T.EXECUTION_COMPLETED, payload, turn_id=turn_id)
        return ExecutionOutcome(committed=committed, turn_id=turn_id, origin=origin, turn_ids=list(self.turn_ids),
                                abort_reason=abort_reason, error=error, failed_runtime_ids=list(failed or []))


@dataclass
class _TurnOutcome:
    committed: bool
    phase_became_playing: bool = False
    abort_reason: str | None = None
    error: dict[str, Any] | None = None
    failed_runtime_ids: list[str] = field(default_factory=list)


def _runs_story_agent(env: ExecutionEnv, turn: TurnInfo) -> bool:
    """Whether the turn selects an agent story runtime that runs (the only kind that takes steer)."""
    from turns.engine.agent import is_story_runtime
    from turns.engine.schedule import runtimes_select

    return any(reason is None and runtime.agent is not None and is_story_runtime(runtime)
               for runtime, reason in runtimes_select(env, turn))


def _steer_messages_hook(turn_id: str, applied: list[AppliedSteer]):
    """Commit hook (``CommitPlan.before_story``) saving the merged steer messages (spec 004 §steer:
    回合提交时，它和回合在同一个事务里保存到对话历史和聊天记录): a user ChatMessage (kind ``steer``, the
    player's text) and a user TurnMessage (the model-facing text) each, written just before the
    story prose so the history reads player, steer, story."""

    def hook(session) -> None:
        from sessions.models import ChatMessage, TurnMessage

        for item in applied:
            ChatMessage.objects.create(session=session, message_id=str(uuid.uuid4()), role="user", kind=STEER_MESSAGE_KIND,
                                       content=item.message, turn_id=turn_id,
                                       metadata={"steer": True, "pluginId": item.plugin_id, "runtimeId": item.runtime_id,
                                                 "step": item.step})
            TurnMessage.objects.create(session=session, turn_id=turn_id, runtime_id=item.runtime_id, role="user",
                                       content={"text": item.text, "steer": True})

    return hook


def _jobs_enqueue_hook(jobs: list[dict[str, Any]]):
    def hook(session) -> list:
        return ports.runtime_jobs_stage(session=session, jobs=jobs)

    return hook


class RuntimeJobRejected(Exception):
    """The job's runtime cannot run any more (its plugin or runtime is no longer active)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class RuntimeJobRun:
    """A runtime job's runtime, run and not yet committed. execution_id: the background execution
    identity (also the trace id of its rows); turn: the background turn (origin ``detached``)."""

    job_id: str
    session_id: str
    execution_id: str
    turn: TurnInfo
    result: Any
    plan: CommitPlan
    tracer: T.Tracer


def runtime_job_execute(
    job: Any,
    *,
    sink: T.EventSink | None = None,
    cancel: CancelToken | None = None,
    plugin_registry: Any = None,
    model_router: ModelRouter | None = None,
    code_grants: CodeGrants | None = None,
) -> RuntimeJobRun:
    """Run the runtime of one claimed runtime job without the session
    lock and without committing: a new background turn (``kind`` main, origin ``detached``, the
    source turn's logical turn and player message), the job payload's frozen ``inputs``,
    ``userSettings`` and ``model``, against the committed session state. Frames go to ``sink``
    (default: kept in memory); trace rows are written by the commit.
    job: the job row (``pk``, ``session_id``, ``plugin_id``, ``runtime_id``, ``payload``: frozen
    ``inputs``, ``userSettings``, ``model``, ``origin``, ``playerMessage``, ``logicalTurn``).
    A manual (plugin-rpc) job's ``turnId`` and ``manualPayload`` and an event job's
    ``triggerEvent`` reach the runtime's turn (``ctx.manual_payload`` / ``ctx.trigger_event``).
    code_grants: as for ``execution_run`` (a community runtime without its grants fails).
    Raises RuntimeJobRejected when the plugin or runtime is no longer active in the session.
    Never raises for a runtime failure (``run.result.status`` is ``failed``).
    """
    from sessions.models import Session

    job_id = str(job.pk)
    payload = dict(job.payload or {})
    session = Session.objects.get(pk=job.session_id)
    if plugin_registry is None:
        from plugins_app.registry import plugin_registry as registry_default

        plugin_registry = registry_default()
    if model_router is None:
        config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
        model_router = ModelRouter(config)
    execution_id = str(uuid.uuid4())
    tracer = T.Tracer(sink or T.RecordingSink(), trace_id=execution_id, session_id=session.id)
    snapshot = session_snapshot_load(session)
    records = _plugin_records(plugin_registry, snapshot.active_plugins, snapshot.metadata)
    runtime = next((r for p in records for r in p.manifest.runtimes if r.id == job.runtime_id), None)
    if runtime is None:
        raise RuntimeJobRejected("runtime_not_active", f"Runtime is not active in this session: {job.runtime_id}")
    community_entries_load(plugin_registry, records, code_grants)
    tool_registry, executor = tools_for_registry(plugin_registry)
    frozen_settings = {job.plugin_id: payload.get("userSettings") or {}}
    env = ExecutionEnv(snapshot=snapshot, plugin_registry=plugin_registry, plugins=records, tool_registry=tool_registry,
                       code_grants=code_grants,
                       executor=executor, router=model_router, tracer=tracer, request_model=payload.get("model") or None,
                       cancel=cancel or CancelToken(),
                       user_settings=_user_settings(records, snapshot.world.metadata, frozen_settings))
    origin = payload.get("origin") or {}
    turn = TurnInfo(turn_id=payload.get("turnId") or str(uuid.uuid4()), kind="main", origin=ORIGIN_DETACHED,
                    player_message=payload.get("playerMessage"),
                    logical_turn=int(payload.get("logicalTurn") or snapshot.completed_player_turns + 1),
                    manual_payload=payload.get("manualPayload"), trigger_event=payload.get("triggerEvent"))
    tracer.emit(T.EXECUTION_STARTED, {"turnId": turn.turn_id, "origin": ORIGIN_DETACHED, "phase": snapshot.phase, "kind": "main",
                                      "jobId": job_id}, turn_id=turn.turn_id)
    result = runtime_run(env, runtime, turn, inputs=dict(payload.get("inputs") or {}))
    plan = CommitPlan(turn=turn, execution_id=None, trace_id=execution_id,
                      summary={"origin": ORIGIN_DETACHED, "kind": "main", "jobId": job_id,
                               "sourceTurnId": origin.get("sourceTurnId")},
                      followers=followers_plan(env, turn, [result]))
    return RuntimeJobRun(job_id=job_id, session_id=session.id, execution_id=execution_id, turn=turn, result=result,
                         plan=plan, tracer=tracer)


def runtime_job_commit(run: RuntimeJobRun, *, in_transaction) -> Any:
    """Commit a runtime job's result in one transaction (``turn_commit``); the caller holds the
    session lock. ``in_transaction(session) -> [NewEvent]`` runs inside it (the job's fencing
    check and terminal state), after the run's background followers were staged: it may read
    ``run.plan.followers_staged`` (``[{jobId, runtimeId}]``, the parent job's ``deferredJobs``).
    Returns the CommitOutcome; raises CommitFailed (nothing written)."""
    run.plan.in_transaction = [in_transaction]
    return turn_commit(session_id=run.session_id, plan=run.plan, results=[run.result], tracer=run.tracer)
