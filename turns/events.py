"""The append-only per-session event log (spec 004 §事件系统) and the wake-up after commit.

Writers call ``session_events_append`` inside their transaction; rows get consecutive ``seq``
numbers allocated from ``Session.event_seq`` under a row lock, and subscribers are woken through
``turns.eventbus`` only after the transaction commits — so a subscriber never sees an event that
was rolled back, and a lost wake-up can delay but never drop an event (readers re-read the log).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F

TOPICS = ("session", "turn", "character", "plugin-data", "ui", "interaction", "system", "job", "media", "custom")


@dataclass
class NewEvent:
    """An event to append. ``topic`` is a SubscriptionTopic, ``type`` e.g. "plugin-data.changed"."""

    type: str
    topic: str
    payload: dict[str, Any] = field(default_factory=dict)
    turn_id: str = ""


def session_events_append(session_id: str, events: list[NewEvent]) -> list:
    """Append ``events`` to the session's log in the caller's transaction; returns the SessionEvent rows.

    Must run inside ``transaction.atomic()``. Seqs are consecutive and strictly increasing per session.
    Publishing (waking SSE readers) is scheduled with ``transaction.on_commit``.
    """
    from sessions.models import Session
    from turns.models import SessionEvent

    if not events:
        return []
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("session_events_append must be called inside transaction.atomic()")
    # UPDATE ... SET event_seq = event_seq + n takes the row lock on PostgreSQL and the write lock on
    # SQLite, so concurrent appenders serialize here and seqs never collide.
    Session.objects.filter(pk=session_id).update(event_seq=F("event_seq") + len(events))
    last_seq = Session.objects.filter(pk=session_id).values_list("event_seq", flat=True).get()
    first = last_seq - len(events) + 1
    rows = [
        SessionEvent(session_id=session_id, seq=first + i, topic=e.topic, type=e.type, turn_id=e.turn_id, payload=e.payload)
        for i, e in enumerate(events)
    ]
    SessionEvent.objects.bulk_create(rows)

    def _wake() -> None:
        from turns import eventbus

        eventbus.notify(session_id, last_seq)

    transaction.on_commit(_wake)
    return rows
