"""GET /api/events/stream end to end on the real ASGI application: frames, order, replay, resets,
topic filters, keep-alives, fan-out failure. Events are appended by other threads."""
from __future__ import annotations

import asyncio

import pytest
from django.test import override_settings

from tests.turns.events_support import AsgiSse, append_events, db, in_thread, make_session
from covel.ratelimit import rate_limits_reset
from turns import event_stream
from turns.events import session_events_trim

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _free_event_types(settings):
    """These tests exercise the log itself with made-up event types."""
    settings.COVEL_STRICT_EVENT_TYPES = False


@pytest.fixture(autouse=True)
def _fresh_limits():
    event_stream.rate_limiter.reset()
    rate_limits_reset()
    yield
    event_stream.db_connections_close()


async def test_first_frame_is_connected_then_events_from_another_thread_arrive_in_order():
    # given
    session = await db(make_session)
    # when
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        connected = await sse.frame()
        seqs = await db(append_events, session.pk, ["a.one", "a.two", "a.three"])
        frames = await sse.frames(3)
    # then
    assert sse.status == 200
    assert connected.event == "system.connected"
    assert connected.id == "ep1:0"  # the cursor: a client that drops now reconnects from here
    assert connected.data["type"] == "system.connected"
    assert connected.data["sessionId"] == session.pk
    assert connected.data["topics"] == "all"
    assert connected.data["cursor"] == "ep1:0"
    assert seqs == [1, 2, 3]
    assert [f.event for f in frames] == ["a.one", "a.two", "a.three"]
    assert [f.id for f in frames] == ["ep1:1", "ep1:2", "ep1:3"]
    first = frames[0].data
    assert set(first) == {"id", "topic", "type", "sessionId", "timestamp", "payload"}
    assert (first["id"], first["topic"], first["type"], first["sessionId"], first["payload"]) == (
        "ep1:1", "game", "a.one", session.pk, {"n": 0},
    )
    assert first["timestamp"].endswith("Z")


async def test_many_events_in_one_commit_and_concurrent_writers_stay_in_seq_order():
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        await asyncio.gather(
            db(append_events, session.pk, [f"x.{i}" for i in range(20)], per_transaction=5),
            db(append_events, session.pk, [f"y.{i}" for i in range(20)], per_transaction=4),
        )
        frames = await sse.frames(40)
    assert [f.id for f in frames] == [f"ep1:{n}" for n in range(1, 41)]
    assert [f.event for f in frames if f.event.startswith("x.")] == [f"x.{i}" for i in range(20)]


async def test_reconnect_with_last_event_id_receives_the_rest_exactly_once():
    # given: a subscriber that saw events 1..3 of 5 and went away
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        await db(append_events, session.pk, ["e1", "e2", "e3"])
        seen = await sse.frames(3)
    await db(append_events, session.pk, ["e4", "e5"])
    # when: it reconnects with the standard header
    async with AsgiSse(f"sessionId={session.pk}", [(b"last-event-id", seen[-1].id.encode())]) as sse:
        connected = await sse.frame()
        replayed = await sse.frames(2)
        await db(append_events, session.pk, ["e6"])
        live = await sse.frame()
        quiet = await sse.nothing_within(0.5)
    # then
    assert connected.data["cursor"] == "ep1:3"
    assert [f.event for f in replayed + [live]] == ["e4", "e5", "e6"]
    assert [f.id for f in replayed + [live]] == ["ep1:4", "ep1:5", "ep1:6"]
    assert quiet


async def test_last_event_id_query_parameter_wins_over_the_header():
    session = await db(make_session)
    await db(append_events, session.pk, ["e1", "e2", "e3", "e4"])
    async with AsgiSse(f"sessionId={session.pk}&lastEventId=ep1:2", [(b"last-event-id", b"ep1:0")]) as sse:
        await sse.frame()
        frames = await sse.frames(2)
        quiet = await sse.nothing_within(0.3)
    assert [f.id for f in frames] == ["ep1:3", "ep1:4"]
    assert quiet


async def test_replay_longer_than_one_page_is_complete_and_ordered():
    session = await db(make_session)
    await db(append_events, session.pk, [f"e{i}" for i in range(1, 1201)], per_transaction=300)
    async with AsgiSse(f"sessionId={session.pk}&lastEventId=ep1:100") as sse:
        await sse.frame()
        frames = await sse.frames(1100)
    assert [f.id for f in frames] == [f"ep1:{n}" for n in range(101, 1201)]


@pytest.mark.parametrize(
    "cursor, reason",
    [("other-epoch:1", "epoch_changed"), ("ep1:99", "cursor_ahead"), ("garbage", "invalid_cursor")],
)
async def test_unusable_cursor_gets_system_reset_then_live_events(cursor, reason):
    session = await db(make_session)
    await db(append_events, session.pk, ["e1", "e2"])
    async with AsgiSse(f"sessionId={session.pk}&lastEventId={cursor}") as sse:
        connected = await sse.frame()
        reset = await sse.frame()
        await db(append_events, session.pk, ["e3"])
        live = await sse.frame()
    assert connected.event == "system.connected"
    assert (reset.event, reset.id, reset.data["topic"], reset.data["payload"]) == (
        "system.reset", "ep1:2", "system", {"reason": reason},
    )
    assert (live.event, live.id) == ("e3", "ep1:3")


async def test_cursor_older_than_the_retained_window_gets_reset():
    session = await db(make_session)
    await db(append_events, session.pk, [f"e{i}" for i in range(1, 11)])
    assert await db(session_events_trim, session.pk, keep=4) == 6  # events 7..10 remain
    async with AsgiSse(f"sessionId={session.pk}&lastEventId=ep1:5") as expired:
        await expired.frame()
        reset = await expired.frame()
    async with AsgiSse(f"sessionId={session.pk}&lastEventId=ep1:6") as kept:
        await kept.frame()
        frames = await kept.frames(4)
    assert (reset.event, reset.data["payload"]["reason"], reset.id) == ("system.reset", "cursor_expired", "ep1:10")
    assert [f.id for f in frames] == ["ep1:7", "ep1:8", "ep1:9", "ep1:10"]


@override_settings(COVEL_EVENT_LOG_RETAIN=100)
async def test_log_keeps_only_the_retained_window_as_it_grows():
    from turns.events import session_events_oldest_seq

    session = await db(make_session)
    await db(append_events, session.pk, [f"e{i}" for i in range(1, 201)], per_transaction=50)
    assert await db(session_events_oldest_seq, session.pk) == 101


async def test_topic_filter_passes_only_those_topics_and_always_resets():
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}&topics=state,job") as sse:
        connected = await sse.frame()
        await db(append_events, session.pk, ["g.1"], topic="game")
        await db(append_events, session.pk, ["s.1"], topic="state")
        await db(append_events, session.pk, ["r.1"], topic="runtime")
        await db(append_events, session.pk, ["j.1"], topic="job")
        frames = await sse.frames(2)
    assert connected.data["topics"] == ["job", "state"]
    assert [(f.event, f.id) for f in frames] == [("s.1", "ep1:2"), ("j.1", "ep1:4")]


@override_settings(COVEL_SSE_KEEPALIVE_SECONDS=1, COVEL_SSE_HEARTBEAT_SECONDS=2)
async def test_idle_stream_sends_keepalive_comments_and_heartbeats():
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        first = await sse.frame(3, comments=True)
        second = await sse.frame(3, comments=True)
    assert first.comment == "keep-alive"
    assert (second.event, second.id, second.data["type"]) == ("system.heartbeat", None, "system.heartbeat")


async def test_emitted_event_reaches_the_subscriber():
    from django.test import Client

    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        response = await db(
            Client().post, "/api/events/emit",
            {"topic": "combat.start", "sessionId": session.pk, "payload": {"enemyId": "g-1"}},
            content_type="application/json",
        )
        frame = await sse.frame()
    assert response.status_code == 200
    assert response.json() == {"ok": True, "id": "ep1:1"}
    assert (frame.event, frame.id, frame.data["topic"]) == ("event.emitted", "ep1:1", "game")
    assert frame.data["payload"] == {"topic": "combat.start", "data": {"enemyId": "g-1"}}


async def test_failed_fanout_after_commit_gives_subscribers_a_reset_not_a_gap():
    # given: a subscriber, then a writer whose bus (Redis) is unreachable when it publishes
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()

        def append_with_dead_bus():
            with override_settings(REDIS_URL="redis://127.0.0.1:9/0", STORE_BACKEND="pg"):
                return append_events(session.pk, ["t.committed"])

        # when
        await asyncio.to_thread(in_thread, append_with_dead_bus)
        frames = await sse.frames(2)
    # then: the committed event is delivered and followed by system.reset
    assert [(f.event, f.id) for f in frames] == [("t.committed", "ep1:1"), ("system.reset", "ep1:2")]
    assert frames[1].data["payload"] == {"reason": "commit_fanout_failed", "throughSeq": 1}


async def test_disconnect_releases_the_connection_slot():
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        during = event_stream.connection_registry.count(session.pk)
    await asyncio.sleep(0)
    assert (during, event_stream.connection_registry.count(session.pk)) == (1, 0)


async def test_django_finishes_the_request_once_the_head_is_sent_and_the_stream_goes_on():
    # An open stream holds no Django request (memory per idle stream, README "Event fan-out"):
    # request_finished fires (the request's DB connections are released) while frames keep coming.
    from django.core.signals import request_finished

    finished = []

    def on_finished(**kwargs):
        finished.append(True)

    session = await db(make_session)
    request_finished.connect(on_finished)
    try:
        async with AsgiSse(f"sessionId={session.pk}") as sse:
            connected = await sse.frame()
            finished_while_open = len(finished)
            await db(append_events, session.pk, ["t.after"])
            event = await sse.frame()
            still_counted = event_stream.connection_registry.count(session.pk)
    finally:
        request_finished.disconnect(on_finished)
    assert (sse.status, sse.headers_out[b"content-type"], sse.headers_out[b"cache-control"]) == (
        200, b"text/event-stream; charset=utf-8", b"no-cache")
    assert (connected.event, finished_while_open, event.event, still_counted) == ("system.connected", 1, "t.after", 1)
    assert event_stream.connection_registry.count(session.pk) == 0


async def test_deleting_the_session_ends_its_streams_with_a_reset():
    from sessions.models import Session

    session = await db(make_session)
    with override_settings(COVEL_EVENT_POLL_MS=100):
        async with AsgiSse(f"sessionId={session.pk}") as sse:
            await sse.frame()
            await db(lambda: Session.objects.filter(pk=session.pk).delete())
            reset = await sse.frame(5)
            await asyncio.wait_for(sse._task, 5)  # the response ended by itself
    assert (reset.event, reset.data["payload"]) == ("system.reset", {"reason": "session_deleted"})


# --- recovery: bus resyncs and database outages (ARCHITECTURE "Every stream ends") ---------------


def _events_store_without_wakeup(session_id: str, types: list[str]) -> list[int]:
    """Commit events to the log the way a writer whose wake-up the bus lost leaves them: rows and
    the session's head, no notification (a Redis restart drops publishes in flight)."""
    from django.db import transaction

    from sessions.models import Session
    from turns.models import SessionEvent

    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        seqs = list(range(session.event_seq + 1, session.event_seq + 1 + len(types)))
        SessionEvent.objects.bulk_create([
            SessionEvent(session_id=session_id, seq=seq, topic="game", type=t, payload={"n": seq}) for seq, t in zip(seqs, types)
        ])
        Session.objects.filter(pk=session_id).update(event_seq=seqs[-1])
    return seqs


async def test_connected_frame_carries_the_cursor_so_a_reconnect_misses_nothing():
    # given: a client that received only system.connected, then dropped
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        connected = await sse.frame()
    # when: events commit while it is away, and it reconnects with the id it got
    await db(append_events, session.pk, ["a.while-away", "a.also"])
    async with AsgiSse(f"sessionId={session.pk}", headers=[(b"last-event-id", connected.id.encode())]) as sse:
        again = await sse.frame()
        frames = await sse.frames(2)
    # then
    assert connected.id == "ep1:0" and again.id == "ep1:0"
    assert [(f.event, f.id) for f in frames] == [("a.while-away", "ep1:1"), ("a.also", "ep1:2")]


@override_settings(COVEL_EVENT_POLL_MS=60_000)
async def test_bus_resync_rereads_the_log_after_lost_wakeups():
    from covel import eventbus

    # given: a subscriber, and events committed whose wake-ups were lost (the poll is a minute away)
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        await db(_events_store_without_wakeup, session.pk, ["lost.one", "lost.two"])
        silent = await sse.nothing_within(0.5)
        # when: the bus reconnects and tells every reader to re-read
        await db(eventbus.publish, f"session:{session.pk}", eventbus.RESYNC)
        frames = await sse.frames(2, timeout=5)
    # then
    assert silent
    assert [(f.event, f.id) for f in frames] == [("lost.one", "ep1:1"), ("lost.two", "ep1:2")]


@pytest.mark.hosted_only
@override_settings(COVEL_EVENT_POLL_MS=60_000)
async def test_redis_listener_reconnect_delivers_what_its_outage_lost():
    from tests.fault_support import redis_listener_kill

    # given: a subscriber
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        # when: Redis drops this process's bus connection and events commit without wake-ups
        await db(_events_store_without_wakeup, session.pk, ["while.down"])
        killed = await asyncio.to_thread(redis_listener_kill)
        frame = await sse.frame(5)
    # then: the listener reconnected, sent its resync and the feed re-read the log
    assert killed == 1
    assert (frame.event, frame.id) == ("while.down", "ep1:1")


@pytest.mark.hosted_only
@override_settings(COVEL_SSE_DB_OUTAGE_SECONDS=2, COVEL_SSE_KEEPALIVE_SECONDS=1, COVEL_EVENT_POLL_MS=200)
async def test_stream_ends_with_a_retryable_error_when_the_database_stays_away():
    import time

    from tests.fault_support import pg_connections_refused

    # given: a subscriber that has seen one event
    session = await db(make_session)
    await db(append_events, session.pk, ["before"])
    async with AsgiSse(f"sessionId={session.pk}", headers=[(b"last-event-id", b"ep1:0")]) as sse:
        await sse.frame()
        assert (await sse.frame()).id == "ep1:1"
        # when: the database refuses every new connection (the stream's readers must reconnect)
        await asyncio.to_thread(event_stream.db_connections_close)
        with pg_connections_refused():
            started = time.monotonic()
            keepalives = 0
            while True:
                frame = await sse.frame(8, comments=True)
                if frame.comment == "keep-alive":
                    keepalives += 1
                    continue
                break
            elapsed = time.monotonic() - started
            await asyncio.wait_for(sse._task, 5)  # the response ended by itself
    # then: keep-alives while it waited, then error.occurred with the cursor to reconnect from
    assert keepalives >= 1
    assert (frame.event, frame.id, frame.data["topic"], frame.data["type"]) == ("error.occurred", "ep1:1", "system", "error.occurred")
    assert frame.data["payload"] == {"message": frame.data["payload"]["message"], "code": "stream_interrupted",
                                     "retryable": True, "details": {"reason": "database_unavailable"}}
    assert 2 <= elapsed < 8, elapsed
    # and once the database is back, a reconnect from that id gets what came after
    await db(append_events, session.pk, ["after"])
    async with AsgiSse(f"sessionId={session.pk}", headers=[(b"last-event-id", frame.id.encode())]) as sse:
        await sse.frame()
        after = await sse.frame()
    assert (after.event, after.id) == ("after", "ep1:2")


@override_settings(COVEL_EVENT_POLL_MS=60_000)
async def test_a_wakeup_carrying_the_committed_rows_is_delivered_without_reading_the_log(monkeypatch):
    # given a subscriber, and a count of the feed's log reads
    reads: list[int] = []
    original = event_stream._load_rows

    def counted(*args, **kwargs):
        reads.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(event_stream, "_load_rows", counted)
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        # (hosted: the bus's new channel subscription makes the feed read the log once, to cover
        # anything committed while it was being set up)
        assert await sse.nothing_within(0.5)
        before = len(reads)
        # when two events commit (their wake-up carries the rows)
        await db(append_events, session.pk, ["inline.one", "inline.two"])
        frames = await sse.frames(2, timeout=5)
    # then they arrive in order, rendered from the message, the log unread
    assert [(f.event, f.id) for f in frames] == [("inline.one", "ep1:1"), ("inline.two", "ep1:2")]
    assert frames[0].data["payload"] == {"n": 0} and frames[0].data["timestamp"].endswith("Z")
    assert len(reads) == before


@override_settings(COVEL_EVENT_POLL_MS=60_000)
async def test_a_wakeup_whose_rows_leave_a_gap_makes_the_reader_read_the_log():
    from covel import eventbus

    # given a subscriber and two events stored whose own wake-up was lost
    session = await db(make_session)
    async with AsgiSse(f"sessionId={session.pk}") as sse:
        await sse.frame()
        seqs = await db(_events_store_without_wakeup, session.pk, ["gap.one", "gap.two"])
        # when a wake-up arrives carrying only the second row (seq 1 is missing from it)
        await db(eventbus.notify, session.pk, seqs[-1], [
            {"seq": seqs[-1], "topic": "game", "type": "gap.two", "payload": {"n": 2}, "at": "2026-01-01T00:00:00.000Z"}])
        frames = await sse.frames(2, timeout=5)
    # then both come, from the log, in order
    assert [(f.event, f.id) for f in frames] == [("gap.one", "ep1:1"), ("gap.two", "ep1:2")]
