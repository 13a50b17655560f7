"""The commit chain: one transaction per turn applies everything a turn produced.

``turn_commit`` writes, in one ``transaction.atomic()``: the player message (chat + prompt
history), interaction answers, every successful runtime's proposals (each runtime inside its own
savepoint), story messages, pending interactions, RuntimeOutput rows, the TurnResult, the
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

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from django.db import IntegrityError, transaction

from turns.engine import trace as T
from turns.engine.appliers import appliers
from turns.engine.appliers.narrative import story_content, story_segments
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.appliers.plugin_data import plugin_data_forget, plugin_data_prefetch
from turns.engine.appliers.interaction import interaction_record
from turns.engine.runtime import STATUS_SUCCESS, RuntimeResult, TurnInfo
from plugins_app.toolkit import proposals as P
from turns.events import NewEvent, session_events_append

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
    phase: str | None = None
    count_player_turn: bool = False
    lore_override: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: Called inside the commit transaction with the locked Session; returns extra NewEvents.
    in_transaction: list[Callable[[Any], list[NewEvent]]] = field(default_factory=list)
    #: Called inside the commit transaction with the locked Session right before the story prose is
    #: saved, so what they write (e.g. merged steer messages) precedes the prose in the history.
    before_story: list[Callable[[Any], None]] = field(default_factory=list)


@dataclass
class CommitOutcome:
    committed: bool
    failed_proposals: list[dict[str, Any]] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    player_message_id: str | None = None


def _apply_runtime(ctx: CommitContext, table, result: RuntimeResult) -> None:
    for proposal in result.proposals:
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


def turn_commit(*, session_id: str, plan: CommitPlan, results: list[RuntimeResult], tracer: T.Tracer) -> CommitOutcome:
    """Commit one turn (see module docstring). Raises CommitFailed (nothing written) or
    InputAlreadyCommitted when the player's inputMessageId is already stored."""
    from sessions.models import ChatMessage, Session, TurnMessage
    from turns.models import InteractionRecord, RuntimeOutput, TurnResult

    table = appliers()
    failed: list[dict[str, Any]] = []
    turn = plan.turn
    has_story = any(r.is_story and r.status == STATUS_SUCCESS and r.text for r in results)
    try:
        with transaction.atomic():
            session = Session.objects.select_for_update().get(pk=session_id)
            ctx = CommitContext(session=session, turn_id=turn.turn_id)
            player_message_id = None
            if plan.player_input is not None:
                pi = plan.player_input
                if ChatMessage.objects.filter(session=session, message_id=pi.message_id).exists():
                    raise InputAlreadyCommitted()
                ChatMessage.objects.create(session=session, message_id=pi.message_id, role="user", kind="text",
                                           content=pi.content, seat_id=pi.seat_id, turn_id=turn.turn_id,
                                           metadata={"actions": pi.actions})
                TurnMessage.objects.create(session=session, turn_id=turn.turn_id, runtime_id="", role="user",
                                           content={"text": pi.rendered})
                player_message_id = pi.message_id
            for answer in plan.answers:
                updated = InteractionRecord.objects.filter(
                    session=session, turn_id=answer["turnId"], interaction_id=answer["interactionId"], status="pending",
                ).update(status="answered", answer={"values": answer["values"], "filledNarrative": answer.get("filledNarrative", "")},
                         answered_at=_now())
                if not updated:
                    raise CommitFailed("interaction_already_submitted", "This interaction was already answered.")
            # Every plugin-data row the proposals name, in one query (see appliers/plugin_data.py).
            plugin_data_prefetch(ctx, [p for r in results if r.contributes for p in r.proposals])
            for result in results:
                if not result.contributes or (not result.proposals and not result.pending_inputs):
                    continue
                optional = has_story and not result.is_story and turn.kind == "main"
                marker = len(ctx.events), len(ctx.messages)
                try:
                    with transaction.atomic():
                        _apply_runtime(ctx, table, result)
                except (ProposalRejected, IntegrityError) as exc:
                    code = getattr(exc, "code", "conflict")
                    message = getattr(exc, "message", str(exc))
                    if not optional:
                        raise CommitFailed("proposal_failed", f"{result.runtime_id}: {message}") from None
                    del ctx.events[marker[0]:]
                    del ctx.messages[marker[1]:]
                    plugin_data_forget(ctx)  # its cache may hold rows the rollback removed
                    failed.append({"runtimeId": result.runtime_id, "pluginId": result.plugin_id, "code": code, "message": message})
            for hook in plan.before_story:
                hook(session)
            for result in results:
                if result.is_story and result.status == STATUS_SUCCESS and result.text:
                    segments = story_segments(result.text)
                    ChatMessage.objects.create(session=session, message_id=str(uuid.uuid4()), role="assistant", kind="story",
                                               content=story_content(segments, result.text), turn_id=turn.turn_id,
                                               metadata={"pluginId": result.plugin_id, "runtimeId": result.runtime_id,
                                                         "segments": segments})
                    TurnMessage.objects.create(session=session, turn_id=turn.turn_id, runtime_id=result.runtime_id,
                                               role="assistant", content={"text": result.text})
            RuntimeOutput.objects.bulk_create([
                RuntimeOutput(session=session, output_id=str(uuid.uuid4()), turn_id=turn.turn_id, plugin_id=r.plugin_id,
                              runtime_id=r.runtime_id, status=r.status, output=_runtime_output_json(r, session), full_prompt=r.prompt)
                for r in results if r.status != STATUS_DEFERRED
            ])
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
            session.save(update_fields=fields)
            TurnResult.objects.create(session=session, execution_id=plan.execution_id, turn_id=turn.turn_id, origin=turn.origin,
                                      committed=True, player_turn_index=player_turn_index,
                                      input_message_id=plan.player_input.message_id if plan.player_input else "", summary=summary)
            for hook in plan.in_transaction:
                ctx.events.extend(hook(session))
            for item in failed:
                tracer.emit(T.PROPOSAL_FAILED, item, turn_id=turn.turn_id, plugin_id=item["pluginId"], runtime_id=item["runtimeId"])
            T.trace_rows_write(session_id, plan.trace_id, tracer.take_records())
            ctx.events.append(NewEvent(type=TURN_COMPLETED, topic="turn", turn_id=turn.turn_id,
                                       payload={"turnId": turn.turn_id, "origin": turn.origin, "committed": True,
                                                "phase": session.phase, "completedPlayerTurns": session.completed_player_turns}))
            rows = session_events_append(session_id, ctx.events)
    except IntegrityError as exc:
        raise CommitFailed("commit_conflict", f"the turn could not be committed: {exc}") from None
    return CommitOutcome(committed=True, failed_proposals=failed, events=rows, player_message_id=player_message_id)


def turn_failure_record(*, session_id: str, plan: CommitPlan, results: list[RuntimeResult], tracer: T.Tracer,
                        abort_reason: str = "", error: dict[str, Any] | None = None) -> None:
    """Record a turn that committed nothing: its TurnResult (committed false), trace rows and the
    settled setup attempts, in their own transaction."""
    from sessions.models import Session
    from turns.models import TurnResult

    with transaction.atomic():
        if plan.setup_runtimes is not None:
            Session.objects.filter(pk=session_id).update(setup_runtimes=plan.setup_runtimes)
        summary = {**plan.summary, "runtimeResults": [r.summary() for r in results]}
        if error:
            summary["error"] = error
        TurnResult.objects.update_or_create(
            session_id=session_id, turn_id=plan.turn.turn_id,
            defaults={"execution_id": plan.execution_id, "origin": plan.turn.origin, "committed": False,
                      "abort_reason": abort_reason, "summary": summary},
        )
        T.trace_rows_write(session_id, plan.trace_id, tracer.take_records())


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
