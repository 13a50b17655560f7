"""Trace events: forwarded to the action stream per the spec's table and kept for trace_events.

The engine emits every event through one ``Tracer`` per execution. ``Tracer.emit`` forwards the
event to the caller's ``EventSink`` when the spec's table marks it "forward to /api/actions"
(spec 004 §SSE 协议, 转发的运行时内部事件), and buffers a TraceEvent row unless the event is
ephemeral (``narrative.delta``). Buffered rows are written by the commit transaction, or by a
separate transaction when the execution commits nothing, so a failed turn keeps its trace.
Thread-safe: runtimes of one stage emit from worker threads; sink calls are serialized.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from covel import jsontext

NARRATIVE_DELTA = "narrative.delta"
NARRATIVE_COMPLETED = "narrative.completed"
EXECUTION_STARTED = "execution.started"
EXECUTION_COMPLETED = "execution.completed"
RUNTIME_STARTED = "runtime.started"
RUNTIME_COMPLETED = "runtime.completed"
RUNTIME_FAILED = "runtime.failed"
RUNTIME_SKIPPED = "runtime.skipped"
STEP_STARTED = "step.started"
STEP_COMPLETED = "step.completed"
LLM_CALLING = "llm.calling"
LLM_RESPONDED = "llm.responded"
MESSAGE_COMPLETED = "message.completed"
TOOL_CALLING = "tool.calling"
TOOL_COMPLETED = "tool.completed"
TOOL_FAILED = "tool.failed"
FUNCTION_EXECUTING = "function.executing"
FUNCTION_COMPLETED = "function.completed"
PROPOSAL_FAILED = "proposal.failed"
ERROR_OCCURRED = "error.occurred"
INTERACTION_SUBMITTED = "interaction.submitted"
INTERACTION_REQUESTED = "interaction.requested"
CHARACTER_UPSERTED = "character.upserted"
PLUGIN_DATA_CHANGED = "plugin-data.changed"
UI_RENDERED = "ui.rendered"
UI_PART_UPDATE = "ui.part.update"
EVENT_EMITTED = "event.emitted"
DOMAIN_EVENT_PREVIEWED = "domain-event.previewed"
CONTEXT_PRUNED = "context.pruned"
#: A runtime notice that is not a failure (e.g. a builtin tool this host does not install, not offered):
#: a trace row with ``warning: {code, message}``, diagnostic severity "warning"; never a tool.failed frame.
RUNTIME_WARNING = "runtime.warning"
#: Function-runtime host API traces (spec 004 §SSE 协议, 转发的运行时内部事件): gateway.* is forwarded,
#: recursive.* and utils.fetch.* are trace-only.
GATEWAY_CALLING = "gateway.calling"
GATEWAY_RESPONDED = "gateway.responded"
GATEWAY_FAILED = "gateway.failed"
RECURSIVE_CALLING = "recursive.calling"
RECURSIVE_COMPLETED = "recursive.completed"
RECURSIVE_FAILED = "recursive.failed"
UTILS_FETCH_CALLING = "utils.fetch.calling"
UTILS_FETCH_RESPONDED = "utils.fetch.responded"
UTILS_FETCH_FAILED = "utils.fetch.failed"
JOB_STATUS_UPDATED = "job-status.updated"

#: Event types the action stream carries (COVEL_EVENT_META[type].forwardToActionStream).
FORWARDED_EVENT_TYPES: frozenset[str] = frozenset({
    NARRATIVE_DELTA, NARRATIVE_COMPLETED, INTERACTION_REQUESTED, UI_RENDERED, UI_PART_UPDATE,
    EXECUTION_STARTED, RUNTIME_STARTED, RUNTIME_COMPLETED, RUNTIME_FAILED, EXECUTION_COMPLETED,
    EVENT_EMITTED, "asset.progress", "asset.generated", "dimensions.changed", PLUGIN_DATA_CHANGED,
    "turn.suspended", PROPOSAL_FAILED, "job-status.updated", "runtime.deferred", ERROR_OCCURRED,
    CHARACTER_UPSERTED, DOMAIN_EVENT_PREVIEWED, STEP_STARTED, STEP_COMPLETED, TOOL_CALLING,
    TOOL_COMPLETED, TOOL_FAILED, LLM_CALLING, LLM_RESPONDED, MESSAGE_COMPLETED, "block.emitted",
    INTERACTION_SUBMITTED, "character-schema.changed",
    GATEWAY_CALLING, GATEWAY_RESPONDED, GATEWAY_FAILED,
})
# The registry of every event type lives outside the engine (turns.event_types) so that the
# event log (turns.events) can check types without importing the engine.
from turns.event_types import KNOWN_EVENT_TYPES, SERVER_EVENT_TYPES, SPEC_EVENT_TYPES, event_type_check  # noqa: E402,F401

#: Event types that are never stored as trace rows (per-token frames).
EPHEMERAL_EVENT_TYPES: frozenset[str] = frozenset({NARRATIVE_DELTA})


class EventSink(Protocol):
    """Where the engine's action-stream frames go (implemented by the turn bridge).

    emit(type, payload, turn_id=..., ephemeral=...): one SseEnvelope's worth; the bridge adds
    requestId / traceId / sessionId / flowId / seq / timestamp. ephemeral=True marks frames
    nobody replays (narrative.delta). Called from one thread at a time.
    """

    def emit(self, type: str, payload: dict, *, turn_id: str | None = None, ephemeral: bool = False) -> None: ...


class RecordingSink:
    """An EventSink that keeps frames in memory: ``frames`` = [(type, payload, turn_id, ephemeral)]."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict, str | None, bool]] = []

    def emit(self, type: str, payload: dict, *, turn_id: str | None = None, ephemeral: bool = False) -> None:
        self.frames.append((type, payload, turn_id, ephemeral))

    def types(self) -> list[str]:
        return [f[0] for f in self.frames]

    def of_type(self, type: str) -> list[dict]:
        return [f[1] for f in self.frames if f[0] == type]


@dataclass
class TraceRecord:
    type: str
    payload: dict[str, Any]
    turn_id: str
    plugin_id: str
    runtime_id: str
    seq: int
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    prompt_digest: str | None = None  # llm.calling: prompt_digest of payload["messages"], made once at emit


class Tracer:
    """Per-execution event fan-out (sink) and trace-row buffer. See module docstring."""

    def __init__(self, sink: EventSink, *, trace_id: str, session_id: str) -> None:
        self.sink = sink
        self.trace_id = trace_id
        self.session_id = session_id
        self._lock = threading.Lock()
        self._seq = 0
        self.records: list[TraceRecord] = []
        #: Fields merged into every payload while set (a retry's scope, spec 004 §重试的事件与状态:
        #: ``sourceTurnId``, ``runtimeIds``, ``sourceCommitted``, ``sourceFailedRuntimeIds``).
        self.scope: dict[str, Any] | None = None

    def emit(self, type: str, payload: dict[str, Any], *, turn_id: str, plugin_id: str = "", runtime_id: str = "",
             forward: bool | None = None, persist: bool | None = None) -> None:
        """Forward (when the table says so, or ``forward`` forces it) and buffer one event."""
        event_type_check(type)
        ephemeral = type in EPHEMERAL_EVENT_TYPES
        if self.scope and not ephemeral:
            payload = {**payload, **self.scope}
        do_forward = type in FORWARDED_EVENT_TYPES if forward is None else forward
        do_persist = (not ephemeral) if persist is None else persist
        forwarded, digest = payload, None
        if type == LLM_CALLING and isinstance(payload.get("messages"), list):
            # One prompt copy: the trace row keeps the prompt (GET /api/traces, payload.messages);
            # the stream's frame, its replay row and the bus message name it by count and digest.
            digest = prompt_digest(payload["messages"])
            forwarded = {k: v for k, v in payload.items() if k != "messages"}
            forwarded.update(messageCount=len(payload["messages"]), promptDigest=digest)
        with self._lock:
            at = datetime.now(timezone.utc)
            if type == LLM_CALLING and "startedAt" in payload:
                # The model request starts when this returns (spec 004 §Trace: payload.startedAt is
                # the moment it really starts): stamped here, under the lock, it is the trace row's
                # own time, so rows keep rising with their ids and the view step needs no second
                # timestamp. Stamped by the caller before the digest and the lock wait, it was up to
                # a few ms early whenever parallel runtimes contended for the lock.
                started = at.isoformat().replace("+00:00", "Z")
                shared = forwarded is payload
                payload = {**payload, "startedAt": started}
                forwarded = payload if shared else {**forwarded, "startedAt": started}
            if do_persist:
                self.records.append(TraceRecord(type, payload, turn_id, plugin_id, runtime_id, self._seq, at=at,
                                                prompt_digest=digest))
                self._seq += 1
            if do_forward:
                self.sink.emit(type, forwarded, turn_id=turn_id, ephemeral=ephemeral)

    def flush(self) -> None:
        """Ask the sink to write and announce the frames it holds back (``ExecutionSink.flush``):
        called before the engine waits on something outside the process. Sinks without
        ``flush`` (RecordingSink) deliver at once anyway."""
        flush = getattr(self.sink, "flush", None)
        if flush is not None:
            with self._lock:
                flush()

    def take_records(self) -> list[TraceRecord]:
        """Return and clear the buffered rows (each is written once)."""
        with self._lock:
            out, self.records = self.records, []
            return out


def prompt_digest(messages: Any) -> str:
    """First 16 hex digits of the SHA-256 of a prompt's messages (canonical JSON): how the session
    view names a prompt it does not carry (GET /api/traces/:sessionId has the prompt itself)."""
    return hashlib.sha256(jsontext.dumps_bytes(messages, sort_keys=True)).hexdigest()[:16]


# What the session view shows of a trace event (turns.selectors_view): the payload's top-level
# summary fields, kept beside the payload in the row's ``summary`` column, so a view reads ~100
# bytes a row and never the payload (an llm.calling payload holds a whole prompt).
STEP_FIELDS = ("runtimeId", "pluginId", "stage", "operation", "provider", "model", "slot", "attempt",
               "durationMs", "startedAt", "tool", "error", "warning")


def trace_step_summary(event_type: str, payload: Any, *, digest: str | None = None) -> dict[str, Any]:
    """A trace row's ``summary``: the STEP_FIELDS the payload has at its top level and, for
    llm.calling, ``messageCount`` and ``promptDigest`` (prompt_digest of its ``messages``, or
    ``digest`` when the caller made it already)."""
    payload = payload if isinstance(payload, dict) else {}
    out = {key: payload[key] for key in STEP_FIELDS if key in payload}
    if event_type == LLM_CALLING and isinstance(payload.get("messages"), list):
        out["messageCount"] = len(payload["messages"])
        out["promptDigest"] = digest or prompt_digest(payload["messages"])
    return out


def trace_rows_write(session_id: str, trace_id: str, records: list[TraceRecord]) -> None:
    """Insert the TraceEvent rows of ``records`` (call inside the commit transaction or its own),
    each stamped with the moment it was emitted (TraceRecord.at), not the commit's.

    Plain multi-row INSERTs (covel.sqlrows.rows_insert) instead of ``bulk_create``: Django
    prepares every field of every row through its field machinery in Python (~80 rows × 10
    fields a full-game turn, half of this write's CPU in the issue 18 profile), while these
    columns are known strings, integers and JSON."""
    from covel.sqlrows import rows_insert
    from turns.models import TraceEvent

    rows_insert(TraceEvent, ("session", "trace_id", "turn_id", "seq", "type", "plugin_id", "runtime_id", "payload",
                             "summary", "created_at"),
                [(session_id, trace_id, r.turn_id, r.seq, r.type, r.plugin_id, r.runtime_id, r.payload,
                  trace_step_summary(r.type, r.payload, digest=r.prompt_digest), r.at) for r in records])