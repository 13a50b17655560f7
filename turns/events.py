"""The append-only per-session event log (spec 004 §事件系统) and the wake-up after commit.

Writers call ``session_events_append`` inside their transaction; rows get consecutive ``seq``
numbers allocated from ``Session.event_seq`` under a row lock, and subscribers are woken through
``covel.eventbus`` only after the transaction commits — so a subscriber never sees an event that
was rolled back, and a lost wake-up can delay but never drop an event (readers re-read the log).

Cursors are ``<epoch>:<seq>`` (spec 004 §SSE 协议, SubscriptionEvent.id): ``epoch`` is the
session's ``event_epoch``, ``seq`` the last event the client has seen (0 = none yet).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min

from covel import jsontext
from covel.sqlrows import set_clause
from turns.event_types import event_type_check

logger = logging.getLogger("covel.events")

# SubscriptionTopic (spec 004 §SSE 协议; the closed set `topics=` accepts).
SUBSCRIPTION_TOPICS = ("runtime", "state", "game", "plugin", "session", "store", "system", "trace", "hooks", "job")
# Finer topics the foundation announced for writers; accepted both when appending and in `topics=`.
EXTRA_TOPICS = ("turn", "character", "plugin-data", "ui", "interaction", "media", "custom")
TOPICS = SUBSCRIPTION_TOPICS + EXTRA_TOPICS

TOPIC_SYSTEM = "system"
TOPIC_GAME = "game"
TYPE_CONNECTED = "system.connected"
TYPE_RESET = "system.reset"
TYPE_HEARTBEAT = "system.heartbeat"
TYPE_EVENT_EMITTED = "event.emitted"
TYPE_FANOUT_FAILED = "commit.fanout.failed"
RESET_FANOUT_FAILED = "commit_fanout_failed"

# Trim the log every this many appended events (amortises the DELETE).
_TRIM_EVERY = 64


@dataclass
class NewEvent:
    """An event to append. ``topic`` is one of TOPICS, ``type`` e.g. "plugin-data.changed"."""

    type: str
    topic: str
    payload: dict[str, Any] = field(default_factory=dict)
    turn_id: str = ""


@dataclass(frozen=True)
class EventCursor:
    """A parsed ``<epoch>:<seq>`` cursor."""

    epoch: str
    seq: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.seq}"


def cursor_parse(raw: str | None) -> EventCursor | None:
    """Parse ``<epoch>:<seq>``; None when malformed (empty epoch, seq not a non-negative integer).

    The epoch is everything before the last ``:`` and is compared as an opaque string.
    """
    if not raw:
        return None
    epoch, sep, seq = raw.strip().rpartition(":")
    if not sep or not epoch or not seq.isdigit() or not seq.isascii():
        return None
    return EventCursor(epoch, int(seq))


def session_event_cursor(session) -> str:
    """The cursor of ``session``'s newest event: ``"<event_epoch>:<event_seq>"``.

    ``session`` is a sessions.models.Session as just read; GET /api/sessions/:id/view returns this
    as ``eventCursor`` (read it before the rest of the view so the client re-receives, never
    misses, events committed while the view was assembled).
    """
    return f"{session.event_epoch}:{session.event_seq}"


def session_events_append(session_id: str, events: list[NewEvent], *, trace_id: str = "",
                          session_fields: dict[str, Any] | None = None) -> list:
    """Append ``events`` to the session's log in the caller's transaction; returns the SessionEvent rows.
    ``session_fields`` ({Session field name: value}): further columns of the session row to write
    in the same UPDATE that advances its event head (the commit chain's clock fields: one
    statement instead of two).

    Must run inside ``transaction.atomic()`` (RuntimeError otherwise). Seqs are consecutive and
    strictly increasing per session, and commit in seq order (the session row lock serializes
    appenders). Raises ValueError for a topic outside TOPICS.
    After commit the readers of every web process are woken (``eventbus.notify``). If that
    publish fails the events are still in the log; the failure is handled as
    ``commit.fanout.failed`` (spec 004 §SSE 协议): a trace row under ``trace_id`` when given and a
    ``system.reset`` event in the log so every subscriber is told to re-read the session.
    """
    if not events:
        return []
    for event in events:
        if event.topic not in TOPICS:
            raise ValueError(f"unknown event topic {event.topic!r} (one of {', '.join(TOPICS)})")
        event_type_check(event.type)
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("session_events_append must be called inside transaction.atomic()")
    rows, last_seq = _append_rows(session_id, events, session_fields=session_fields)

    def _wake() -> None:
        from covel import eventbus

        try:
            # The committed rows ride along (when small): readers render them without reading
            # the log back, which was most of an event's delivery latency (issue 18).
            eventbus.notify(session_id, last_seq, wire_events(rows))
        except Exception as exc:  # the bus is outside the process: any failure is a fan-out failure
            session_fanout_failed(session_id, last_seq, exc, trace_id=trace_id)

    transaction.on_commit(_wake)
    return rows


def session_fanout_failed(session_id: str, seq: int, error: BaseException | str, *, trace_id: str = "") -> None:
    """Handle a committed append whose wake-up could not be published (``commit.fanout.failed``).

    Writes, in its own transaction, a ``system.reset`` event (topic ``system``, payload
    ``{"reason": "commit_fanout_failed", "throughSeq": seq}``) so subscribers in every process see
    a reset (they find it by polling the log) instead of a silent gap, and a ``commit.fanout.failed``
    trace row when ``trace_id`` is given. Wakes this process's readers directly. Never raises.
    """
    from covel import eventbus
    from turns.models import TraceEvent

    logger.error("commit.fanout.failed session=%s seq=%s: %s", session_id, seq, error)
    try:
        with transaction.atomic():
            reset = NewEvent(type=TYPE_RESET, topic=TOPIC_SYSTEM, payload={"reason": RESET_FANOUT_FAILED, "throughSeq": seq})
            _, last_seq = _append_rows(session_id, [reset])
            if trace_id:
                next_seq = (TraceEvent.objects.filter(trace_id=trace_id).aggregate(m=Max("seq"))["m"] or 0) + 1
                TraceEvent.objects.create(
                    session_id=session_id, trace_id=trace_id, seq=next_seq, type=TYPE_FANOUT_FAILED,
                    payload={"sessionId": session_id, "throughSeq": seq, "error": str(error)[:500]},
                )
    except Exception:
        logger.exception("could not record commit.fanout.failed for session %s", session_id)
        return
    eventbus.dispatch_local(f"session:{session_id}", {"seq": last_seq})


def session_events_after(session_id: str, after_seq: int, *, limit: int = 500) -> list:
    """Up to ``limit`` SessionEvent rows with ``seq > after_seq``, in seq order."""
    from turns.models import SessionEvent

    return list(SessionEvent.objects.filter(session_id=session_id, seq__gt=after_seq).order_by("seq")[:limit])


def session_events_oldest_seq(session_id: str) -> int | None:
    """The smallest seq still retained in the session's log, or None when the log is empty."""
    from turns.models import SessionEvent

    return SessionEvent.objects.filter(session_id=session_id).aggregate(m=Min("seq"))["m"]


def session_events_trim(session_id: str, *, keep: int) -> int:
    """Delete all but the newest ``keep`` events of the session's log; returns rows deleted.

    A cursor that points before the oldest retained event gets ``system.reset`` on connect.
    """
    from sessions.models import Session
    from turns.models import SessionEvent

    head = Session.objects.filter(pk=session_id).values_list("event_seq", flat=True).first()
    if head is None or head <= keep:
        return 0
    deleted, _ = SessionEvent.objects.filter(session_id=session_id, seq__lte=head - keep).delete()
    return deleted


def wire_events(rows) -> list[dict[str, Any]]:
    """Committed SessionEvent rows (consecutive seqs) in the shape ``eventbus.notify`` carries
    inline: ``[{"seq", "topic", "type", "payload", "at"}]`` (``at``: the frame's ``timestamp``,
    covel.times.iso). A feed (turns.event_stream) renders the same frames from it as from the log."""
    from covel.times import iso

    return [{"seq": r.seq, "topic": r.topic, "type": r.type, "payload": r.payload, "at": iso(r.created_at)} for r in rows]


def _append_rows_pg(session_id: str, events: list[NewEvent], head: str, head_params: list[Any]) -> tuple[list, int]:
    """PostgreSQL: advance the head and insert the rows in ONE statement (a data-modifying CTE;
    issue 18: every append was an UPDATE and an INSERT). The rows get seqs from the head the
    UPDATE returns, so they stay consecutive under the row lock it takes. SessionNotFound when
    the session row is gone (the CTE then inserts nothing)."""
    from django.utils import timezone

    from turns.models import SessionEvent

    meta = SessionEvent._meta
    created = timezone.now()
    columns = ", ".join(f'"{meta.get_field(name).column}"' for name in ("session", "seq", "topic", "type", "turn_id",
                                                                          "payload", "created_at"))
    values = ", ".join(["(%s::int, %s, %s, %s, %s::jsonb)"] * len(events))
    params: list[Any] = list(head_params)
    params += [session_id, len(events), connection.ops.adapt_datetimefield_value(created)]
    for index, event in enumerate(events, start=1):
        params += [index, event.topic, event.type, event.turn_id or "",
                   jsontext.dumps(event.payload)]
    sql = (f"WITH head AS ({head}) INSERT INTO \"{meta.db_table}\" ({columns}) "
           f"SELECT %s, head.event_seq - %s + v.k, v.topic, v.type, v.turn_id, v.payload, %s "
           f"FROM head, (VALUES {values}) AS v(k, topic, type, turn_id, payload) RETURNING \"{meta.get_field('seq').column}\"")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        seqs = [int(row[0]) for row in cursor.fetchall()]
    if not seqs:
        from covel.errors import SessionNotFound

        raise SessionNotFound(session_id)
    first = min(seqs)
    rows = [SessionEvent(session_id=session_id, seq=first + i, topic=e.topic, type=e.type, turn_id=e.turn_id or "",
                         payload=e.payload, created_at=created) for i, e in enumerate(events)]
    return rows, max(seqs)


def _append_rows(session_id: str, events: list[NewEvent], *,
                 session_fields: dict[str, Any] | None = None) -> tuple[list, int]:
    from sessions.models import Session
    from turns.models import SessionEvent

    # UPDATE ... SET event_seq = event_seq + n takes the row lock on PostgreSQL and the write lock on
    # SQLite, so concurrent appenders serialize here and seqs never collide. RETURNING (PostgreSQL,
    # SQLite >= 3.35) hands back the new head in the same statement; the ORM's update() cannot.
    table, column = Session._meta.db_table, Session._meta.get_field("event_seq").column
    pk_column = Session._meta.pk.column
    extra, extra_params = set_clause(Session, session_fields) if session_fields else ("", [])
    extra = f", {extra}" if extra else ""
    head = f'UPDATE "{table}" SET "{column}" = "{column}" + %s{extra} WHERE "{pk_column}" = %s RETURNING "{column}"'
    if connection.vendor == "postgresql":
        rows, last_seq = _append_rows_pg(session_id, events, head, [len(events), *extra_params, session_id])
        first = last_seq - len(events) + 1
    else:
        with connection.cursor() as cursor:
            cursor.execute(head, [len(events), *extra_params, session_id])
            returned = cursor.fetchone()
        if returned is None:
            from covel.errors import SessionNotFound

            raise SessionNotFound(session_id)
        last_seq = int(returned[0])
        first = last_seq - len(events) + 1
        rows = [
            SessionEvent(session_id=session_id, seq=first + i, topic=e.topic, type=e.type, turn_id=e.turn_id, payload=e.payload)
            for i, e in enumerate(events)
        ]
        SessionEvent.objects.bulk_create(rows)
    keep = settings.COVEL_EVENT_LOG_RETAIN
    if last_seq > keep and (first - 1) // _TRIM_EVERY != last_seq // _TRIM_EVERY:
        SessionEvent.objects.filter(session_id=session_id, seq__lte=last_seq - keep).delete()
    return rows, last_seq
