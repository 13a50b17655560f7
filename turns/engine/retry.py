"""Retries and recoveries of an execution, resolved inside the session lock (spec 004 §Actions（SSE
桥接） retry_turn / retry_runtime / retry_failed_runtimes, §重试的事件与状态, §批量恢复的边界, §流里的拒绝).

Two kinds of source:

- ``retryFromTurnId`` (retry_runtime, retry_failed_runtimes): the *original* committed turn whose
  failed runtimes are run again. ``retry_scope_resolve`` checks it and the targets, in this order,
  and raises ``RetryRejected`` with the spec's code: ``retry_source_not_found`` (no top-level turn
  record of that id in the session), ``retry_source_not_committed``, ``retry_source_not_original``
  (the turn is itself a retry or a manual/background run), ``retry_source_stale`` (a player or
  continuation turn committed after it), ``retry_target_not_active`` (a target is not a runtime
  of an active plugin of the main stages), ``retry_target_not_failed`` (a target is no longer
  failed in the source, committed retries counted). The scope's ``context`` is what the source
  turn and its committed retries produced successfully (targets excluded): the targets read
  their ``io.inputs`` and the story text from it, exactly as in the original turn; it is never
  committed again. Without a source (a plain retry_runtime) the context is the latest committed
  player or continuation turn, if any.
- ``recoverFromTurnId`` (any type): an execution that did not commit, run again from what it
  recorded. ``recovery_resolve`` raises ``RetryRejected("recovery_unavailable")`` when the turn
  is unknown in the session, committed, or already recovered by a committed execution, or when
  the story moved on (a player or continuation turn committed after it).

Turn ids are the runtime ids of the manifests: ``narrator``, ``codex``, ``char-creator/player-init``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turns.engine.runtime import (
    ORIGIN_CONTINUATION,
    ORIGIN_PLAYER,
    STATUS_FAILED,
    STATUS_SUCCESS,
    RuntimeResult,
)

RETRY_SOURCE_NOT_FOUND = "retry_source_not_found"
RETRY_SOURCE_NOT_COMMITTED = "retry_source_not_committed"
RETRY_SOURCE_NOT_ORIGINAL = "retry_source_not_original"
RETRY_SOURCE_STALE = "retry_source_stale"
RETRY_TARGET_NOT_ACTIVE = "retry_target_not_active"
RETRY_TARGET_NOT_FAILED = "retry_target_not_failed"
RECOVERY_UNAVAILABLE = "recovery_unavailable"

#: Origins of the turns that carry the story (the only ones a retry can name as its source).
STORY_ORIGINS = (ORIGIN_PLAYER, ORIGIN_CONTINUATION)
#: Stages a retry can run (setup runtimes have their own retry endpoint).
RETRY_STAGES = ("pre-turn", "narrative", "post-turn", "audit")
#: TurnResult.summary key of a retry turn: ``{sourceTurnId?, runtimeIds}``.
SUMMARY_RETRY = "retry"
#: TurnResult.summary key of the logical turn number a turn ran with.
SUMMARY_LOGICAL_TURN = "logicalTurn"
#: TurnResult.summary key of a recovered turn: the ``recoverFromTurnId`` it ran again.
SUMMARY_RECOVERED_FROM = "recoveredFrom"
#: How many recoveries of recoveries are followed back to the turn that saved an answer.
RECOVERY_CHAIN_MAX = 50


class RetryRejected(Exception):
    """A retry or recovery the session's state refuses; nothing ran or was written. ``code`` is one
    of the module's constants, ``message`` the text of the stream's ``error.occurred``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class RetryScope:
    """What one retry runs and reads.

    runtime_ids: the targets, sorted. source_turn_id: the original turn (None: a plain manual
    retry_runtime). source_failed: every runtime id still failed in the source before this attempt
    (deactivated ones included); None without a source. logical_turn: the turn number the targets
    run with (the source's). context: successful results of the source turn and its committed
    retries (or of the latest story turn), read as upstream, never committed again.
    context_turn_id: the turn the context comes from.
    """

    runtime_ids: list[str]
    source_turn_id: str | None = None
    source_failed: list[str] | None = None
    logical_turn: int | None = None
    context: list[RuntimeResult] = field(default_factory=list)
    context_turn_id: str | None = None

    @property
    def is_sourced(self) -> bool:
        """A retry of a named source turn: foreground only (no detached jobs, no event followers)."""
        return self.source_turn_id is not None

    def event_fields(self, results: list[RuntimeResult] | None = None, *, committed: bool = False) -> dict[str, Any]:
        """The scope every event of the attempt carries (spec §重试的事件与状态): ``runtimeIds``,
        and with a source ``sourceTurnId``, ``sourceCommitted: true`` and ``sourceFailedRuntimeIds``
        — before the attempt the failed set as it was; for the committed terminal event (``results``
        given, ``committed`` true) without the targets that succeeded in it."""
        out: dict[str, Any] = {"runtimeIds": list(self.runtime_ids)}
        if self.source_turn_id is None:
            return out
        failed = list(self.source_failed or [])
        if committed and results is not None:
            recovered = {r.runtime_id for r in results if r.status == STATUS_SUCCESS and r.runtime_id in self.runtime_ids}
            failed = [rid for rid in failed if rid not in recovered]
        out.update(sourceTurnId=self.source_turn_id, sourceCommitted=True, sourceFailedRuntimeIds=failed)
        return out

    def summary(self) -> dict[str, Any]:
        """``TurnResult.summary.retry`` of the attempt (how later retries find the committed ones)."""
        out: dict[str, Any] = {"runtimeIds": list(self.runtime_ids)}
        if self.source_turn_id is not None:
            out["sourceTurnId"] = self.source_turn_id
        elif self.context_turn_id is not None:
            out["contextTurnId"] = self.context_turn_id
        return out


def _turn_results():
    from turns.models import TurnResult

    return TurnResult


def _source_row(session_id: str, turn_id: str):
    """The source's top-level TurnResult after the source checks (raises RetryRejected)."""
    row = _turn_results().objects.filter(session_id=session_id, turn_id=turn_id).first()
    if row is None:
        raise RetryRejected(RETRY_SOURCE_NOT_FOUND, f"Turn not found in this session: {turn_id}")
    if not row.committed:
        raise RetryRejected(RETRY_SOURCE_NOT_COMMITTED,
                            f"Turn {turn_id} was not committed; recover the original action first")
    if row.origin not in STORY_ORIGINS or SUMMARY_RETRY in (row.summary or {}):
        raise RetryRejected(RETRY_SOURCE_NOT_ORIGINAL, f"Turn {turn_id} is a retry or a manual run, not an original turn")
    if _story_moved_on(session_id, row.pk):
        raise RetryRejected(RETRY_SOURCE_STALE, f"The story moved on after turn {turn_id}; refresh and retry from the latest turn")
    return row


def _story_moved_on(session_id: str, after_pk: int) -> bool:
    return _turn_results().objects.filter(session_id=session_id, committed=True, origin__in=STORY_ORIGINS,
                                          pk__gt=after_pk).exists()


def _committed_retries(session_id: str, source) -> list[Any]:
    """The committed retry turns of ``source`` (TurnResult rows), oldest first."""
    rows = _turn_results().objects.filter(session_id=session_id, committed=True, pk__gt=source.pk).exclude(
        origin__in=STORY_ORIGINS).order_by("pk")
    return [r for r in rows if ((r.summary or {}).get(SUMMARY_RETRY) or {}).get("sourceTurnId") == source.turn_id]


def source_failed_runtime_ids(session_id: str, source) -> list[str]:
    """Every runtime id still failed in the committed turn ``source`` (a TurnResult): failed in it and
    not succeeded in a committed retry of it since, in the source's order (spec §重试的事件与状态
    sourceFailedRuntimeIds: the complete list, deactivated runtimes included)."""
    failed = [r.get("runtimeId") for r in (source.summary or {}).get("runtimeResults") or []
              if isinstance(r, dict) and r.get("status") == STATUS_FAILED]
    failed = [rid for rid in dict.fromkeys(failed) if isinstance(rid, str)]
    for retry in _committed_retries(session_id, source):
        recovered = {r.get("runtimeId") for r in (retry.summary or {}).get("runtimeResults") or []
                     if isinstance(r, dict) and r.get("status") == STATUS_SUCCESS}
        failed = [rid for rid in failed if rid not in recovered]
    return failed


def turn_results_load(session_id: str, turn_ids: list[str], exclude: set[str], manifests: dict[str, Any]) -> list[RuntimeResult]:
    """Successful runtime results of the turns ``turn_ids`` (later turns win), rebuilt from their
    RuntimeOutput rows: the typed output (``results[0].structured``, what ``io.inputs`` select
    from) and, for story runtimes, the prose (``results[0].text``). exclude: runtime ids left out;
    manifests: runtime id → RuntimeManifest (stage and story visibility)."""
    from turns.models import RuntimeOutput

    order = {turn_id: i for i, turn_id in enumerate(turn_ids)}
    rows = sorted(RuntimeOutput.objects.filter(session_id=session_id, turn_id__in=turn_ids, status=STATUS_SUCCESS),
                  key=lambda r: (order[r.turn_id], r.pk))
    by_runtime: dict[str, RuntimeResult] = {}
    for row in rows:
        if row.runtime_id in exclude:
            continue
        stored = row.output if isinstance(row.output, dict) else {}
        first = (stored.get("results") or [{}])[0] if isinstance(stored.get("results"), list) else {}
        first = first if isinstance(first, dict) else {}
        manifest = manifests.get(row.runtime_id)
        result = RuntimeResult(runtime_id=row.runtime_id, plugin_id=row.plugin_id,
                               stage=getattr(manifest, "stage", None), status=STATUS_SUCCESS,
                               output=first.get("structured"), run_id=str(stored.get("runtimeResultId") or ""))
        if manifest is not None:
            from turns.engine.agent import is_story_runtime

            result.is_story = is_story_runtime(manifest)
            if result.is_story and isinstance(first.get("text"), str):
                result.text = first["text"]
        by_runtime[row.runtime_id] = result
    return list(by_runtime.values())


def _logical_turn(row, session_turns: int) -> int:
    value = (row.summary or {}).get(SUMMARY_LOGICAL_TURN)
    if isinstance(value, int) and value > 0:
        return value
    if row.player_turn_index:
        return int(row.player_turn_index)
    return max(1, session_turns)


#: The logical turn of a recorded TurnResult row (public name of ``_logical_turn``; plugin-rpc retries).
logical_turn_of = _logical_turn


def retry_scope_resolve(session_id: str, *, runtime_ids: list[str], source_turn_id: str | None,
                        runtimes: dict[str, Any], completed_player_turns: int) -> RetryScope:
    """Check a retry_runtime / retry_failed_runtimes request against the session as it is now (the
    caller holds the session lock) and return its RetryScope (module docstring).

    runtime_ids: the targets as the manifests name them. source_turn_id: ``retryFromTurnId``
    (required by retry_failed_runtimes). runtimes: the session's runnable runtimes by id.
    Raises RetryRejected with the first failing check's code (module docstring for the order).
    """
    targets = sorted(dict.fromkeys(runtime_ids))
    source = _source_row(session_id, source_turn_id) if source_turn_id else None
    for runtime_id in targets:
        manifest = runtimes.get(runtime_id)
        if manifest is None:
            raise RetryRejected(RETRY_TARGET_NOT_ACTIVE, f"Runtime is not active in this session: {runtime_id}")
        if manifest.stage not in RETRY_STAGES or manifest.is_subagent_only:
            raise RetryRejected(RETRY_TARGET_NOT_ACTIVE,
                                f"Runtime {runtime_id} is not a turn runtime (setup stage or subagent only)")
    if source is None:
        latest = (_turn_results().objects.filter(session_id=session_id, committed=True, origin__in=STORY_ORIGINS)
                  .order_by("-pk").first())
        context = turn_results_load(session_id, [latest.turn_id], set(targets), runtimes) if latest else []
        return RetryScope(runtime_ids=targets, context=context, context_turn_id=latest.turn_id if latest else None)
    failed = source_failed_runtime_ids(session_id, source)
    for runtime_id in targets:
        if runtime_id not in failed:
            raise RetryRejected(RETRY_TARGET_NOT_FAILED,
                                f"Runtime {runtime_id} is no longer failed in turn {source.turn_id}; refresh first")
    turn_ids = [source.turn_id] + [r.turn_id for r in _committed_retries(session_id, source)]
    return RetryScope(runtime_ids=targets, source_turn_id=source.turn_id, source_failed=failed,
                      logical_turn=_logical_turn(source, completed_player_turns),
                      context=turn_results_load(session_id, turn_ids, set(targets), runtimes),
                      context_turn_id=source.turn_id)


@dataclass
class Recovery:
    """An uncommitted execution to run again (``recoverFromTurnId``).

    turn_id: the recovered turn. origin: its flow (player | continuation). actions: the resolved
    actions it recorded (``playerInput.actions`` of its turn record, else its request's actions),
    [] when it had none. message_id: the chat message id it recorded, if any. answered: the
    interaction answers saved when it started (``{(turnId, interactionId): {values, filledNarrative}}``).
    """

    turn_id: str
    origin: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    message_id: str | None = None
    answered: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def recovery_resolve(session_id: str, turn_id: str, *, execution_pk: Any) -> Recovery:
    """Check ``recoverFromTurnId`` inside the session lock and return what the turn recorded.

    execution_pk: the recovering execution (left out of the "already recovered" check).
    Raises RetryRejected(recovery_unavailable) (module docstring).
    """
    from turns.models import Execution, InteractionRecord

    unavailable = RetryRejected(RECOVERY_UNAVAILABLE, f"Turn {turn_id} can no longer be recovered; refresh first")
    row = _turn_results().objects.filter(session_id=session_id, turn_id=turn_id).first()
    execution = (Execution.objects.filter(session_id=session_id, turn_id=turn_id).exclude(pk=execution_pk)
                 .order_by("-created_at").first())
    if row is None and execution is None:
        raise unavailable
    if row is not None and row.committed:
        raise unavailable
    recovered = Execution.objects.filter(session_id=session_id, status=Execution.STATUS_COMMITTED).exclude(pk=execution_pk)
    if recovered.filter(payload__recoverFromTurnId=turn_id).exists():
        raise unavailable
    if row is not None and _story_moved_on(session_id, row.pk):
        raise unavailable
    if row is None and execution is not None and _turn_results().objects.filter(
            session_id=session_id, committed=True, origin__in=STORY_ORIGINS, created_at__gt=execution.created_at,
    ).exclude(execution_id=execution.pk).exists():
        raise unavailable  # (an aborted continuation's own setup turn does not count)
    summary = (row.summary or {}) if row is not None else {}
    answered_by = _recovery_chain(session_id, turn_id)
    origin = (row.origin if row is not None else None) or (execution.origin if execution is not None else "") or ORIGIN_PLAYER
    recorded = summary.get("playerInput") if isinstance(summary.get("playerInput"), dict) else {}
    actions = [dict(a) for a in recorded.get("actions") or [] if isinstance(a, dict)]
    message_id = recorded.get("messageId") if isinstance(recorded.get("messageId"), str) else None
    if not actions and execution is not None and execution.type == "submit_actions":
        actions = [dict(a) for a in (execution.payload or {}).get("actions") or [] if isinstance(a, dict)]
        message_id = message_id or (execution.payload or {}).get("inputMessageId")
    answered: dict[tuple[str, str], dict[str, Any]] = {}
    refs = [a["interaction"] for a in actions if isinstance(a.get("interaction"), dict)]
    for ref in refs:
        record = InteractionRecord.objects.filter(session_id=session_id, turn_id=ref.get("turnId"),
                                                  interaction_id=ref.get("interactionId")).first()
        if record is None:
            raise unavailable
        if record.status == "pending":
            continue  # the answer was never saved (the worker stopped): it is saved with this run
        answer = record.answer if isinstance(record.answer, dict) else {}
        if answer.get("answeredTurnId") not in answered_by:
            raise unavailable  # answered by another turn since
        answered[(record.turn_id, record.interaction_id)] = answer
    return Recovery(turn_id=turn_id, origin=ORIGIN_CONTINUATION if origin == ORIGIN_CONTINUATION else ORIGIN_PLAYER,
                    actions=actions, message_id=message_id, answered=answered)


def _recovery_chain(session_id: str, turn_id: str) -> set[str]:
    """``turn_id`` and the turns it recovered, transitively: an answer saved by any of them belongs to
    ``turn_id`` (a failed retry_turn of a failed answered turn, retried again)."""
    chain = {turn_id}
    current = turn_id
    for _ in range(RECOVERY_CHAIN_MAX):
        row = _turn_results().objects.filter(session_id=session_id, turn_id=current).only("summary").first()
        previous = ((row.summary or {}) if row is not None else {}).get(SUMMARY_RECOVERED_FROM)
        if not isinstance(previous, str) or previous in chain:
            break
        chain.add(previous)
        current = previous
    return chain
