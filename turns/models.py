"""Executions (turns), their results, traces, the session event log, runtime outputs, suspensions
and interaction records. Written only by the turn engine's commit chain and ``turns/services.py``.
"""
from __future__ import annotations

import uuid

from django.db import models


class Execution(models.Model):
    """One POST /api/actions request and the turn(s) it runs.

    ``status``: queued → running → committed | failed | aborted | interrupted, or ``rejected``
    (refused before anything ran: session_busy, a check repeated inside the lock, ...).
    ``claimed_by``/``claimed_at`` make a redelivered Celery task exit instead of running twice;
    ``heartbeat_at`` lets a reaper mark a crashed worker's execution interrupted.
    ``outcome`` holds the final ``execution.completed`` payload once finished; ``request_hash``
    fingerprints the request body so a repeated ``requestId`` replays instead of running twice.
    ``origin`` is the flow of the last turn it ran (player | continuation), ``input_message_id``
    the submit_actions ``inputMessageId`` (spec 004 §Actions: input_already_committed).
    """

    STATUS_QUEUED = "queued"
    STATUS_RUNNING = "running"
    STATUS_COMMITTED = "committed"
    STATUS_FAILED = "failed"
    STATUS_INTERRUPTED = "interrupted"
    STATUS_ABORTED = "aborted"
    STATUS_REJECTED = "rejected"
    ACTIVE_STATUSES = (STATUS_QUEUED, STATUS_RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="executions")
    request_id = models.CharField(max_length=128)
    type = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    model = models.CharField(max_length=256, blank=True, default="")
    status = models.CharField(max_length=16, default=STATUS_QUEUED, db_index=True)
    trace_id = models.CharField(max_length=64)
    turn_id = models.CharField(max_length=64, blank=True, default="")
    origin = models.CharField(max_length=32, blank=True, default="")
    input_message_id = models.CharField(max_length=160, blank=True, default="")
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    outcome = models.JSONField(null=True, blank=True)
    request_hash = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "request_id"], name="uniq_request_per_session")]
        indexes = [models.Index(fields=["session", "created_at"])]


class ExecutionFrame(models.Model):
    """A persisted frame of an execution's action stream, in ``index`` order (1, 2, ...).

    Every frame except ephemeral ones (``narrative.delta``) is stored here before it is announced
    on the bus, so a web process relaying the stream never misses one. ``timestamp`` is the wire
    string of the SseEnvelope; the envelope's ``seq`` is allocated per stream by the relay.
    ``is_final`` marks the frame that ends the stream (``execution.completed``, or the single
    ``error.occurred`` of a rejection).
    """

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="frames")
    index = models.IntegerField()
    type = models.CharField(max_length=96)
    turn_id = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField(default=dict)
    timestamp = models.CharField(max_length=40)
    is_final = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["execution", "index"], name="uniq_frame_index_per_execution")]


class TurnResult(models.Model):
    """The outcome of one turn: committed or not, its origin (player | continuation | retry ...)."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="turn_results")
    execution = models.ForeignKey(Execution, on_delete=models.SET_NULL, null=True, blank=True, related_name="turns")
    turn_id = models.CharField(max_length=64)
    origin = models.CharField(max_length=32, default="player")
    committed = models.BooleanField(default=False)
    abort_reason = models.CharField(max_length=128, blank=True, default="")
    player_turn_index = models.IntegerField(null=True, blank=True)
    input_message_id = models.CharField(max_length=160, blank=True, default="")
    summary = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "turn_id"], name="uniq_turn_per_session")]
        indexes = [models.Index(fields=["session", "id"])]


class TraceEvent(models.Model):
    """A persisted trace event (llm.calling, tool.*, step.* ...) of a trace, in ``seq`` order."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="trace_events")
    trace_id = models.CharField(max_length=64, db_index=True)
    turn_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    seq = models.IntegerField()
    type = models.CharField(max_length=64)
    plugin_id = models.CharField(max_length=128, blank=True, default="")
    runtime_id = models.CharField(max_length=160, blank=True, default="")
    payload = models.JSONField(default=dict)
    # turns.engine.trace.trace_step_summary(type, payload), written with the row: what the session
    # view lists of the event. Null on rows written before it existed (the view then reads the payload).
    summary = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["session", "id"])]


class SessionEvent(models.Model):
    """Append-only per-session event log; ``seq`` is allocated from ``Session.event_seq`` in the
    committing transaction, so SSE cursors ``<epoch>:<seq>`` replay without gaps or duplicates."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    topic = models.CharField(max_length=64)
    type = models.CharField(max_length=96)
    turn_id = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="uniq_event_seq_per_session")]


class RuntimeOutput(models.Model):
    """What one runtime produced in a turn: status and output. The prompt it sent is kept once, in
    its ``llm.calling`` trace rows; the full-prompt route rebuilds the history from turn_messages."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="runtime_outputs")
    output_id = models.CharField(max_length=64, unique=True)
    turn_id = models.CharField(max_length=64, db_index=True)
    plugin_id = models.CharField(max_length=128)
    runtime_id = models.CharField(max_length=160)
    status = models.CharField(max_length=16)
    output = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)


class Suspension(models.Model):
    """A runtime suspended by the ``suspend`` tool, waiting for a resume matching ``resume_schema``."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="suspensions")
    suspension_id = models.CharField(max_length=64, unique=True)
    turn_id = models.CharField(max_length=64)
    plugin_id = models.CharField(max_length=128)
    runtime_id = models.CharField(max_length=160)
    status = models.CharField(max_length=16, default="pending", db_index=True)
    resume_schema = models.JSONField(default=dict)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)


class InteractionRecord(models.Model):
    """A form / choice / confirmation a turn asked the player (``type`` form | choice | confirmation,
    ``status`` pending → answered, ``answer`` {values, filledNarrative, answeredTurnId}), or an
    external-input record of spec 004 §统一翻译层 (``status`` input, ``type`` message | form-submit |
    click | skill-invoke | rpc-call, ``spec`` {source, channel, payload, metaData?}, a unique
    ``interaction_id``; written with the committed turn)."""

    STATUS_PENDING = "pending"
    STATUS_ANSWERED = "answered"
    STATUS_INPUT = "input"

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="interactions")
    interaction_id = models.CharField(max_length=160)
    turn_id = models.CharField(max_length=64)
    type = models.CharField(max_length=16)
    plugin_id = models.CharField(max_length=128, blank=True, default="")
    runtime_id = models.CharField(max_length=160, blank=True, default="")
    spec = models.JSONField(default=dict)
    status = models.CharField(max_length=16, default="pending", db_index=True)
    answer = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "turn_id", "interaction_id"], name="uniq_interaction_per_turn")
        ]


class MemoryIndex(models.Model):
    """A session's memory index (spec 004 §GET /api/sessions/:id/memory-index): the embedding model
    it is locked to (``provider``/``model_name``/``dim``/``locked_at``; empty provider = unlocked),
    ``generation`` (bumped by every rebuild: a write embedded under an older generation is dropped)
    and the background re-index progress (``rebuild_state`` idle|running|failed, ``indexed``/``total``).
    Written only by turns.engine.memory_index."""

    session = models.OneToOneField("covel_sessions.Session", on_delete=models.CASCADE, primary_key=True,
                                   related_name="memory_index")
    provider = models.CharField(max_length=64, blank=True, default="")
    model_name = models.CharField(max_length=256, blank=True, default="")
    dim = models.IntegerField(default=0)
    locked_at = models.DateTimeField(null=True, blank=True)
    generation = models.IntegerField(default=0)
    rebuild_state = models.CharField(max_length=16, default="idle")
    indexed = models.IntegerField(default=0)
    total = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class MemoryVector(models.Model):
    """One embedded memory item of a session: ``item_key`` names it (``message:<id>``,
    ``lorebook:<id>``, ``character:<id>``, ``plugin:<plugin>/<ns>/<key>``, ``summary:<n>``),
    ``source`` recall|archival, ``text_hash`` (SHA-1 of the embedded text: a changed item is
    re-embedded, a stale vector never scores), ``vector`` little-endian float32, unit length."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="memory_vectors")
    item_key = models.CharField(max_length=512)
    source = models.CharField(max_length=16)
    text_hash = models.CharField(max_length=40)
    dim = models.IntegerField()
    vector = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "item_key"], name="uniq_memory_vector_item")]
