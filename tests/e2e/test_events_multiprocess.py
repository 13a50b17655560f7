"""Fan-out across processes: real daphne servers, events appended by a third process.

Hosted shape: the wake-up travels over Redis (the safety-net poll is set to a minute, so delivery
within the test's timeout proves the bus). Embedded shape: there is no cross-process bus by design
(spec 004 §多实例能力边界), so the servers find the events through the log poll. In tests/e2e (real
processes): ``make e2e`` runs it in both shapes.
"""
from __future__ import annotations

import queue

import pytest
from django.conf import settings

from tests.turns.events_support import Daphne, HttpSse, make_session, run_python, server_env
from turns import event_stream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


@pytest.fixture(autouse=True)
def _free_event_types(settings):
    """These tests exercise the log itself with made-up event types."""
    settings.COVEL_STRICT_EVENT_TYPES = False

APPEND_SCRIPT = """
import sys
import django
django.setup()
from django.db import transaction
from turns.events import NewEvent, session_events_append
session_id, count = sys.argv[1], int(sys.argv[2])
for i in range(1, count + 1):
    with transaction.atomic():
        session_events_append(session_id, [NewEvent(type=f"runtime.step.{i}", topic="runtime", payload={"i": i})])
"""


@pytest.fixture
def two_servers():
    poll_ms = "60000" if settings.STORE_BACKEND == "pg" else "200"
    env = server_env(COVEL_EVENT_POLL_MS=poll_ms)
    servers = []
    try:
        servers = [Daphne(env), Daphne(env)]
        yield servers
    finally:
        for server in servers:
            server.stop()
        event_stream.db_connections_close()


def _append_from_another_process(session_id: str, count: int) -> None:
    result = run_python(APPEND_SCRIPT, server_env(COVEL_STRICT_EVENT_TYPES="0"), session_id, str(count))
    assert result.returncode == 0, result.stderr[-3000:]


def test_subscribers_on_two_servers_both_receive_events_committed_by_a_third_process(two_servers):
    # given: one subscriber on each server
    session = make_session(epoch="mp")
    url = "/api/events/stream?sessionId=" + session.pk
    subscribers = [HttpSse(server.url + url) for server in two_servers]
    try:
        connected = [s.take(1)[0] for s in subscribers]
        # when
        _append_from_another_process(session.pk, 5)
        received = [s.take(5) for s in subscribers]
    finally:
        for s in subscribers:
            s.close()
    # then
    assert [c.event for c in connected] == ["system.connected", "system.connected"]
    for frames in received:
        assert [f.event for f in frames] == [f"runtime.step.{i}" for i in range(1, 6)]
        assert [f.id for f in frames] == [f"mp:{i}" for i in range(1, 6)]
        assert [f.data["payload"] for f in frames] == [{"i": i} for i in range(1, 6)]


def test_reconnecting_to_the_other_server_with_last_event_id_continues_exactly_once(two_servers):
    # given: a subscriber on server A that saw events 1..3 and dropped
    session = make_session(epoch="mp")
    url = "/api/events/stream?sessionId=" + session.pk
    first = HttpSse(two_servers[0].url + url)
    first.take(1)
    _append_from_another_process(session.pk, 3)
    seen = first.take(3)
    first.close()
    _append_from_another_process(session.pk, 2)
    # when: it reconnects to server B with the last id it saw
    again = HttpSse(two_servers[1].url + url, headers={"Last-Event-ID": seen[-1].id})
    try:
        connected = again.take(1)[0]
        replayed = again.take(2)
        _append_from_another_process(session.pk, 1)
        live = again.take(1)
        with pytest.raises(queue.Empty):
            again.take(1, timeout=1.0)
    finally:
        again.close()
    # then
    assert connected.data["cursor"] == "mp:3"
    assert [f.id for f in seen] == ["mp:1", "mp:2", "mp:3"]
    assert [f.id for f in replayed + live] == ["mp:4", "mp:5", "mp:6"]


def test_hosted_server_refuses_to_start_when_the_fan_out_backend_is_unreachable():
    env = server_env()
    env.update({
        "DJANGO_SETTINGS_MODULE": "covel.settings.hosted",
        "DATABASE_URL": env.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/covel"),
        "REDIS_URL": "redis://127.0.0.1:9/0",
    })
    result = run_python("import covel.asgi", env, timeout=60)
    assert result.returncode != 0
    assert "refusing to start" in result.stderr
