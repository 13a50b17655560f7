"""The commit chain: one transaction per turn applies everything a turn produced.

``turn_commit`` writes, in one ``transaction.atomic()``: the player message (chat + prompt
history), interaction answers, every successful runtime's proposals (no savepoints: an optional runtime
whose writes fail makes the commit run again without it, see ``turn_commit``), story messages, pending interactions, RuntimeOutput rows, the TurnResult, the
session clock (phase, completedPlayerTurns, setupRuntimes, loreOverride), trace rows and the
SessionEvents (published after commit by turns.events). Failure policy (spec 000 §Proposal 类型):
a rejected proposal of an optional runtime next to committed story prose drops only that
runtime's writes (``proposal.failed``); in a turn without story prose (setup, manual) or for a
story runtime, it fails the whole commit (nothing is written). Failed/suspended runtimes never
contribute proposals.

``CommitPlan.in_transaction`` hooks run inside the same transaction (after the TurnResult, before
the session events are appended): the detached runtimes' job rows are written this way, and a
runtime job's commit checks its fencing token there (jobs app). A hook gets the locked Session,
returns extra events, and raises CommitFailed to roll the whole turn back.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from django.db import IntegrityError, transaction
from django.utils import timezone

from covel.sqlrows import rows_insert

from turns.engine import ports, trace as T
from turns.engine.appliers import appliers
from turns.engine.cadence import TRIGGER_LEDGER_KEY, trigger_ledger_advance
from turns.engine.appliers.narrative import story_content, story_segments
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.appliers.dimensions import dimension_receipt_keys
from turns.engine.appliers.plugin_data import plugin_data_flush, plugin_data_prefetch
from turns.engine.appliers.interaction import InteractionInputsFailed, interaction_inputs_record, interaction_record
from turns.engine.runtime import STATUS_FAILED, STATUS_SUCCESS, RuntimeResult, TurnInfo
from plugins_app.toolkit import proposals as P
from sessions import faults
from turns.events import NewEvent, session_events_append

logger = logging.getLogger("covel.turns")
TURN_COMPLETED = "turn.completed"
#: RuntimeResult status of a detached runtime handed to a runtime job (turns.engine.schedule).
STATUS_DEFERRED = "deferred"


class CommitFailed(Exception):
    """The turn could not be committed; nothing was written. code/message for the stream."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InputAlreadyCommitted(CommitFailed):
    def __init__(self) -> None:
        super().__init__("input_already_committed", "This input was already committed with a turn; do not resend it.")


@dataclass
class PlayerInput:
    """The player's message of a turn. message_id: inputMessageId or a new id."""

    message_id: str
    content: str
    rendered: str
    actions: list[dict[str, Any]]
    seat_id: str = "main"


@dataclass
class CommitPlan:
    """What turn_commit writes besides the runtime results."""

    turn: TurnInfo
    execution_id: str | None
    trace_id: str
    player_input: PlayerInput | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)  # {turnId, interactionId, values, filledNarrative}
    setup_runtimes: dict[str, Any] | None = None
    #: Runtime ids this main turn triggered whose cadence the trigger ledger keeps
    #: (turns.engine.schedule.trigger_is_ledgered); written to the session with the commit.
    triggered: list[str] = field(default_factory=list)
    phase: str | None = None
    count_player_turn: bool = False
    lore_override: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: Called first inside the commit transaction with the locked Session, before any write (a
    #: check that may raise to roll the commit back, e.g. a resume's data-changed check).
    before_apply: list[Callable[[Any], None]] = field(default_factory=list)
    #: Called inside the commit transaction with the locked Session; returns extra NewEvents.
    in_transaction: list[Callable[[Any], list[NewEvent]]] = field(default_factory=list)
    #: Called inside the commit transaction with the locked Session right before the story prose is
    #: saved, so what they write (e.g. merged steer messages) precedes the prose in the history.
    before_story: list[Callable[[Any], None]] = field(default_factory=list)
    #: Background follower job specs (turns.engine.followers); staged in the transaction unless
    #: their source runtime's writes were dropped. ``followers_staged``: ``[{jobId, runtimeId}]`` of
    #: the ones written, filled by ``turn_commit`` before the ``in_transaction`` hooks run.
    followers: list[dict[str, Any]] = field(default_factory=list)
    followers_staged: list[dict[str, str]] = field(default_factory=list)
    #: Called last inside the commit transaction with the locked Session (its fields as this commit
    #: leaves them), after the turn's own events; returns extra NewEvents, appended after
    #: execution.completed. Best effort: when one raises, the attempt is rolled back and the turn
    #: commits again without them (logged), e.g. the automatic snapshot (turns.snapshots).
    best_effort: list[Callable[[Any], list[NewEvent]]] = field(default_factory=list)
    #: Send the background memory-index update after the commit (turns.engine.memory_index); the
    #: turn runner clears it for a session without a memory index (SessionSnapshot.memory_indexed).
    memory_index: bool = True


@dataclass
class CommitOutcome:
    committed: bool
    failed_proposals: list[dict[str, Any]] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    player_message_id: str | None = None


def _apply_runtime(ctx: CommitContext, table, result: RuntimeResult) -> None:
    for proposal in result.proposals:
        if proposal.meta.get("invalid"):  # failed its payload check when a tool staged it
            raise ProposalRejected(P.PROPOSAL_INVALID, str(proposal.meta["invalid"]))
        try:
            proposal.payload = P.proposal_validate(proposal)
        except P.ProposalInvalid as exc:
            raise ProposalRejected(exc.code, str(exc)) from None
        applier = table.get(proposal.kind)
        if applier is None:
            raise ProposalRejected("proposal-invalid", f"no applier for {proposal.kind}")
        applier(ctx, proposal)
    for interaction in result.pending_inputs:
        interaction_record(ctx, interaction, plugin_id=result.plugin_id, runtime_id=result.runtime_id)


class _OptionalRuntimeFailed(Exception):
    """An optional runtime's writes failed inside a commit attempt: the attempt is rolled back and
    the commit runs again without that runtime (``turn_commit``)."""

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        super().__init__(item["message"])
        self.index, self.item = index, item


def turn_commit(*, session_id: str, plan: CommitPlan, results: list[RuntimeResult], tracer: T.Tracer) -> CommitOutcome:
    """Commit one turn (see module docstring). Raises CommitFailed (nothing written) or
    InputAlreadyCommitted when the player's inputMessageId is already stored.

    Optimistic: the turn's writes go into one transaction without a savepoint per runtime. When an
    optional runtime's writes fail (a rejected proposal, a constraint), that attempt is rolled
    back whole and the commit runs again without the runtime, which is then reported in
    ``failedProposals`` (spec 004: 非故事 runtime 的写入失败只丢弃它自己的写入). A failure is rare, so
    the usual turn pays no savepoint round trips; a failing one pays one attempt per failed runtime.
    Nothing of an aborted attempt is emitted: the appliers only collect events, which are emitted
    after the loop.
    """
    excluded: dict[int, dict[str, Any]] = {}
    record_inputs = best_effort = True
    while True:
        try:
            return _turn_commit_attempt(session_id=session_id, plan=plan, results=results, tracer=tracer, excluded=excluded,
                                        record_inputs=record_inputs, best_effort=best_effort)
        except _OptionalRuntimeFailed as failure:
            excluded[failure.index] = failure.item
        except _BestEffortFailed as failure:
            logger.warning("turn %s: %s not written with the commit", plan.turn.turn_id, failure.args[0],
                           exc_info=failure.__cause__)
            best_effort = False
        except InteractionInputsFailed as failure:
            # Best effort (spec 004 §统一翻译层: 写入失败只记一条警告日志): the turn commits without them.
            logger.warning("turn %s: interaction records not written", failure.args[0], exc_info=failure.__cause__)
            record_inputs = False


class _BestEffortFailed(Exception):
    """A ``CommitPlan.best_effort`` hook raised: the attempt is rolled back and runs again without them."""


def _turn_commit_attempt(*, session_id: str, plan: CommitPlan, results: list[RuntimeResult], tracer: T.Tracer,
                         excluded: dict[int, dict[str, Any]], record_inputs: bool = True,
                         best_effort: bool = True) -> CommitOutcome:
    from sessions.models import ChatMessage, Session, TurnMessage
    from turns.models import RuntimeOutput, TurnResult

    table = appliers()
    # Runtimes dropped by earlier attempts, in the order of ``results``.
    failed: list[dict[str, Any]] = [excluded[i] for i in sorted(excluded)]
    turn = plan.turn
    has_story = any(r.is_story and r.status == STATUS_SUCCESS and r.text for r in results)
    try:
        with transaction.atomic():
            session = Session.objects.select_for_update().get(pk=session_id)
            for check in plan.before_apply:
                check(session)
            ctx = CommitContext(session=session, turn_id=turn.turn_id)
            player_message_id = None
            if plan.player_input is not None:
                pi = plan.player_input
                # Queued with the turn's other messages (CommitContext.messages_flush); the
                # (session, message_id) unique constraint is the already-committed check.
                ctx.message_add(ChatMessage(session=session, message_id=pi.message_id, role="user", kind="text",
                                            content=pi.content, seat_id=pi.seat_id, turn_id=turn.turn_id,
                                            metadata={"actions": pi.actions}),
                                TurnMessage(session=session, turn_id=turn.turn_id, runtime_id="", role="user",
                                            content={"text": pi.rendered}))
                player_message_id = pi.message_id
            answers_save(session, plan.answers, turn.turn_id)
            if record_inputs:
                interaction_inputs_record(session, turn.turn_id, plan.player_input, plan.answers)
            # Every plugin-data row the proposals name, in one query (see appliers/plugin_data.py).
            staged = [p for r in results if r.contributes for p in r.proposals]
            plugin_data_prefetch(ctx, staged, extra=dimension_receipt_keys(staged))
            for index, result in enumerate(results):
                if index in excluded or not result.contributes or (not result.proposals and not result.pending_inputs):
                    continue
                optional = has_story and not result.is_story and turn.kind == "main"
                try:
                    _apply_runtime(ctx, table, result)
                except (ProposalRejected, IntegrityError) as exc:
                    code = getattr(exc, "code", "conflict")
                    message = getattr(exc, "message", str(exc))
                    if not optional:
                        raise CommitFailed("proposal_failed", f"{result.runtime_id}: {message}") from None
                    # Leaves the transaction (rolled back whole); turn_commit runs it again without this runtime.
                    raise _OptionalRuntimeFailed(index, {"runtimeId": result.runtime_id, "pluginId": result.plugin_id,
                                                         "code": code, "message": message}) from None
            plugin_data_flush(ctx)  # the runtimes' plugin-data rows, in at most three statements
            if plan.before_story:
                _messages_flush(ctx, player_message_id)  # the hooks write messages of their own after these
            for hook in plan.before_story:
                hook(session)
            for result in results:
                if result.is_story and result.status == STATUS_SUCCESS and result.text:
                    segments = story_segments(result.text)
                    ctx.message_add(
                        ChatMessage(session=session, message_id=str(uuid.uuid4()), role="assistant", kind="story",
                                    content=story_content(segments, result.text), turn_id=turn.turn_id,
                                    metadata={"pluginId": result.plugin_id, "runtimeId": result.runtime_id,
                                              "segments": segments}),
                        TurnMessage(session=session, turn_id=turn.turn_id, runtime_id=result.runtime_id,
                                    role="assistant", content={"text": result.text}))
            _messages_flush(ctx, player_message_id)
            # Plain multi-row INSERTs for the runtime outputs and the turn result below (covel.sqlrows:
            # the ORM's per-object preparation cost more than the statements, issue 18).
            committed_at = timezone.now()
            rows_insert(RuntimeOutput, ("session", "output_id", "turn_id", "plugin_id", "runtime_id", "status", "output",
                                        "created_at"),
                        [(session.pk, str(uuid.uuid4()), turn.turn_id, r.plugin_id, r.runtime_id, r.status,
                          _runtime_output_json(r, session), committed_at)
                         for r in results if r.status != STATUS_DEFERRED])
            summary = {**plan.summary, "runtimeResults": [r.summary() for r in results]}
            if failed:
                summary["failedProposals"] = failed
            pending = [i for r in results if r.contributes for i in r.pending_inputs]
            if pending:
                summary["pendingInputs"] = pending
            player_turn_index = None
            fields = ["updated_at"]
            if plan.count_player_turn:
                session.completed_player_turns += 1
                player_turn_index = session.completed_player_turns
                fields.append("completed_player_turns")
            if plan.setup_runtimes is not None:
                session.setup_runtimes = plan.setup_runtimes
                fields.append("setup_runtimes")
            if plan.phase is not None and plan.phase != session.phase:
                session.phase = plan.phase
                fields.append("phase")
            if plan.lore_override is not None:
                session.metadata = {**(session.metadata or {}), "loreOverride": plan.lore_override}
                fields.append("metadata")
            if plan.triggered:
                ledger = trigger_ledger_advance((session.metadata or {}).get(TRIGGER_LEDGER_KEY), plan.triggered, turn.logical_turn)
                session.metadata = {**(session.metadata or {}), TRIGGER_LEDGER_KEY: ledger}
                if "metadata" not in fields:
                    fields.append("metadata")
            fault_events = plugin_faults_settle(session, results, tracer, turn.turn_id)
            if fault_events is not None and "metadata" not in fields:
                fields.append("metadata")
            ctx.events.extend(fault_events or [])
            # Written with the event head at the end of the commit (session_events_append's
            # session_fields: one UPDATE); the hooks below see and change this same row object.
            session.updated_at = timezone.now()
            rows_insert(TurnResult, ("session", "execution", "turn_id", "origin", "committed", "abort_reason",
                                     "player_turn_index", "input_message_id", "summary", "created_at"),
                        [(session.pk, plan.execution_id, turn.turn_id, turn.origin, True, "", player_turn_index,
                          plan.player_input.message_id if plan.player_input else "", summary, committed_at)])
            dropped = {item["runtimeId"] for item in failed}
            followers = [spec for spec in plan.followers if spec.get("sourceRuntimeId") not in dropped]
            if followers:
                ctx.events.extend(ports.runtime_jobs_stage(session=session, jobs=[
                    {k: v for k, v in spec.items() if k != "sourceRuntimeId"} for spec in followers]))
            plan.followers_staged = [{"jobId": spec["jobId"], "runtimeId": spec["runtimeId"]} for spec in followers]
            for hook in plan.in_transaction:
                ctx.events.extend(hook(session))
            for item in failed:
                tracer.emit(T.PROPOSAL_FAILED, item, turn_id=turn.turn_id, plugin_id=item["pluginId"], runtime_id=item["runtimeId"])
            done = {"turnId": turn.turn_id, "origin": turn.origin, "committed": True, "phase": session.phase,
                    "completedPlayerTurns": session.completed_player_turns, "runtimeCount": len(results),
                    "resultCount": sum(1 for r in results if r.status == STATUS_SUCCESS)}
            # The persisted debug record the spec reads an abort reason from (§回合保存之后的收尾):
            # a trace row only. Subscribers learn of the commit from execution.completed (spec 004
            # §GET /api/events/stream example), on the runtime topic.
            tracer.emit(TURN_COMPLETED, done, turn_id=turn.turn_id, forward=False)
            T.trace_rows_write(session_id, plan.trace_id, tracer.take_records())
            ctx.events.append(NewEvent(type=T.EXECUTION_COMPLETED, topic="runtime", turn_id=turn.turn_id, payload=done))
            for hook in (plan.best_effort if best_effort else ()):
                try:
                    ctx.events.extend(hook(session))
                except Exception as exc:  # any failure: the turn commits without the hooks
                    raise _BestEffortFailed(getattr(hook, "__name__", repr(hook))) from exc
            # The semantic memory index follows the commit in the background (turns.engine.memory_index).
            if plan.memory_index:
                ports.memory_index_changed(session_id)
            rows = session_events_append(session_id, ctx.events,
                                         session_fields={name: getattr(session, name) for name in fields})
    except IntegrityError as exc:
        raise CommitFailed("commit_conflict", f"the turn could not be committed: {exc}") from None
    return CommitOutcome(committed=True, failed_proposals=failed, events=rows, player_message_id=player_message_id)


def _messages_flush(ctx: CommitContext, player_message_id: str | None) -> None:
    """Insert the commit's queued chat and history rows; a player message id already stored (the
    rows' unique constraint) is InputAlreadyCommitted, and the failed statement ends the attempt."""
    try:
        ctx.messages_flush()
    except IntegrityError:
        if player_message_id is None:
            raise
        raise InputAlreadyCommitted() from None


def turn_failure_record(*, session_id: str, plan: CommitPlan, results: list[RuntimeResult], tracer: T.Tracer,
                        abort_reason: str = "", error: dict[str, Any] | None = None) -> None:
    """Record a turn that committed nothing: its TurnResult (committed false), trace rows, the
    settled setup attempts and the interaction answers it started with, in their own transaction."""
    from sessions.models import Session
    from turns.models import TurnResult

    with transaction.atomic():
        fault_events = None
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is not None:
            fields = ["updated_at"]
            if plan.setup_runtimes is not None:
                session.setup_runtimes = plan.setup_runtimes
                fields.append("setup_runtimes")
            # Own faults count whether or not the turn committed (sessions.faults).
            fault_events = plugin_faults_settle(session, results, tracer, plan.turn.turn_id)
            if fault_events is not None:
                fields.append("metadata")
            if len(fields) > 1:
                session.save(update_fields=fields)
            # The answers were saved when the turn started: its retry_turn runs it again from them
            # without submitting them again (spec 004 §玩家交互 连接中断).
            answers_save(session, plan.answers, plan.turn.turn_id, strict=False)
        summary = {**plan.summary, "runtimeResults": [r.summary() for r in results]}
        if error:
            summary["error"] = error
        TurnResult.objects.update_or_create(
            session_id=session_id, turn_id=plan.turn.turn_id,
            defaults={"execution_id": plan.execution_id, "origin": plan.turn.origin, "committed": False,
                      "abort_reason": abort_reason, "summary": summary},
        )
        done = {"turnId": plan.turn.turn_id, "origin": plan.turn.origin, "committed": False,
                "runtimeCount": len(results), "resultCount": sum(1 for r in results if r.status == STATUS_SUCCESS)}
        if abort_reason:
            done["abortReason"] = abort_reason
        tracer.emit(TURN_COMPLETED, done, turn_id=plan.turn.turn_id, forward=False)
        T.trace_rows_write(session_id, plan.trace_id, tracer.take_records())
        if fault_events:
            session_events_append(session_id, fault_events)


def answers_save(session: Any, answers: list[dict[str, Any]], turn_id: str, *, strict: bool = True) -> None:
    """Mark each answered interaction answered by ``turn_id`` (inside the caller's transaction):
    ``answer`` = ``{values, filledNarrative, answeredTurnId}``. Answers marked ``saved`` (recorded
    when a recovered turn first started) are left alone. strict: raise CommitFailed
    (interaction_already_submitted) when one is no longer pending (else it is skipped)."""
    from turns.models import InteractionRecord

    for answer in answers:
        if answer.get("saved"):
            continue
        updated = InteractionRecord.objects.filter(
            session=session, turn_id=answer["turnId"], interaction_id=answer["interactionId"], status="pending",
        ).update(status="answered", answered_at=_now(), answer={
            "values": answer["values"], "filledNarrative": answer.get("filledNarrative", ""), "answeredTurnId": turn_id})
        if not updated and strict:
            raise CommitFailed("interaction_already_submitted", "This interaction was already answered.")


def plugin_fault_outcomes(results: list[RuntimeResult]) -> dict[str, dict[str, Any] | None]:
    """Per plugin that ran in this execution: its first own fault ``{code, runtimeId}``, or None when
    it ran without one and at least one of its runtimes succeeded (sessions.faults). Plugins whose
    runtimes were only skipped, deferred or failed for a host reason are left out."""
    out: dict[str, dict[str, Any] | None] = {}
    for result in results:
        if result.status == STATUS_FAILED and faults.fault_is_own(result.error):
            if out.get(result.plugin_id) is None:
                out[result.plugin_id] = {"code": result.error.get("code"), "runtimeId": result.runtime_id}
        elif result.status == STATUS_SUCCESS:
            out.setdefault(result.plugin_id, None)
    return out


def plugin_faults_settle(session: Any, results: list[RuntimeResult], tracer: T.Tracer, turn_id: str) -> list[NewEvent] | None:
    """Settle the fault breaker of the locked ``session`` with one execution's results: the
    breaker's trace events go to ``tracer`` (``counted`` stored only; ``latched`` / ``cleared`` also
    forwarded to the action stream); returns the session events to append in the same transaction
    (latched / cleared, topic ``plugin``), or None when the breaker state did not change."""
    outcomes = plugin_fault_outcomes(results)
    if not outcomes:
        return None
    events = faults.plugin_faults_settle(session, outcomes)
    if not events:
        return None
    out: list[NewEvent] = []
    for event in events:
        tracer.emit(event.type, event.payload, turn_id=turn_id, plugin_id=event.payload["pluginId"],
                    runtime_id=event.payload.get("runtimeId") or "", forward=event.is_visible)
        if event.is_visible:
            out.append(NewEvent(type=event.type, topic="plugin", turn_id=turn_id, payload=event.payload))
    return out


def _runtime_output_json(result: RuntimeResult, session: Any) -> dict[str, Any]:
    results = [{"text": result.text or (result.output.get("text") if isinstance(result.output, dict) and isinstance(result.output.get("text"), str) else "")}]
    if result.output is not None:
        results[0]["structured"] = result.output
    meta: dict[str, Any] = {"turn": session.completed_player_turns, "toolCallList": result.tool_calls,
                            "tokenUsage": dict(result.usage)}
    if result.pre_game_done:
        meta["preGameDone"] = True
    if result.text:
        meta["outputResponses"] = [result.text]
    if result.model_slot:
        meta["modelSlot"] = result.model_slot
    return {"runtimeResultId": result.run_id, "results": results, "metaData": meta, "status": result.status,
            **({"error": result.error} if result.error else {})}


def _now():
    from django.utils import timezone

    return timezone.now()
