"""The per-session event log and its wake-ups (turns.events, covel.eventbus)."""
from __future__ import annotations

import threading

import pytest
from django.db import transaction

from tests.turns.events_support import append_events, make_session
from covel import eventbus
from turns.events import (
    EventCursor,
    NewEvent,
    cursor_parse,
    session_event_cursor,
    session_events_after,
    session_events_append,
    session_events_trim,
)
from turns.models import SessionEvent


@pytest.fixture(autouse=True)
def _free_event_types(settings):
    """These tests exercise the log itself with made-up event types."""
    settings.COVEL_STRICT_EVENT_TYPES = False


@pytest.mark.django_db
def test_append_allocates_consecutive_seqs_and_moves_the_cursor():
    session = make_session(epoch="e7")
    assert session_event_cursor(session) == "e7:0"
    append_events(session.pk, ["a", "b"], per_transaction=2)
    append_events(session.pk, ["c"])
    session.refresh_from_db()
    assert session_event_cursor(session) == "e7:3"
    assert list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("seq", "type")) == [
        (1, "a"), (2, "b"), (3, "c"),
    ]
    assert [e.seq for e in session_events_after(session.pk, 1)] == [2, 3]


@pytest.mark.django_db(transaction=True)
def test_append_outside_a_transaction_is_refused():
    session = make_session()
    with pytest.raises(RuntimeError):
        session_events_append(session.pk, [NewEvent(type="a", topic="game")])
    assert not SessionEvent.objects.exists()


@pytest.mark.django_db
def test_append_rejects_an_unknown_topic():
    session = make_session()
    with pytest.raises(ValueError), transaction.atomic():
        session_events_append(session.pk, [NewEvent(type="a", topic="nonsense")])


@pytest.mark.django_db
def test_rolled_back_append_leaves_no_event_and_no_seq():
    session = make_session()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        session_events_append(session.pk, [NewEvent(type="a", topic="game")])
        1 / 0
    append_events(session.pk, ["b"])
    assert list(SessionEvent.objects.values_list("seq", "type")) == [(1, "b")]


@pytest.mark.parametrize(
    "raw, parsed",
    [
        ("ep:3", EventCursor("ep", 3)),
        ("a:b:0", EventCursor("a:b", 0)),
        ("ep:", None), (":3", None), ("3", None), ("ep:-1", None), ("ep:1.5", None), ("", None), (None, None),
    ],
)
def test_cursor_parse(raw, parsed):
    assert cursor_parse(raw) == parsed


@pytest.mark.django_db
def test_trim_keeps_the_newest_events():
    session = make_session()
    append_events(session.pk, [f"e{i}" for i in range(10)], per_transaction=10)
    assert session_events_trim(session.pk, keep=3) == 7
    assert list(SessionEvent.objects.order_by("seq").values_list("seq", flat=True)) == [8, 9, 10]


@pytest.mark.django_db(transaction=True)
def test_subscribers_are_woken_after_commit_with_the_new_head():
    # given
    session = make_session()
    received: list[dict] = []
    woken = threading.Event()

    def on_message(message):
        received.append(message)
        woken.set()

    unsubscribe = eventbus.subscribe(f"session:{session.pk}", on_message)
    try:
        # when: one rolled-back append, then one committed append of two events
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            session_events_append(session.pk, [NewEvent(type="x", topic="game")])
            1 / 0
        with transaction.atomic():
            session_events_append(session.pk, [NewEvent(type="a", topic="game"), NewEvent(type="b", topic="game")])
            assert not woken.is_set()  # nothing before commit
        # then
        assert woken.wait(5)
    finally:
        unsubscribe()
    # one wake-up with the new head, carrying the committed rows (never the rolled-back one)
    assert [m["seq"] for m in received] == [2]
    assert [(e["seq"], e["type"]) for e in received[0]["events"]] == [(1, "a"), (2, "b")]
