"""Event-stream connection caps across web processes (spec 004 §GET /api/events/stream: 429
``connection_limit_exceeded`` / ``global_connection_limit_exceeded``).

Hosted shape: two real daphne processes on one Redis count one deployment's streams together, and
the slots of a process killed without releasing them free themselves when their leases run out.
Embedded shape: one process is the whole deployment, so its own counts are the caps.
"""
from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from django.conf import settings

from tests.turns.events_support import Daphne, HttpSse, make_session, server_env
from turns import event_stream

pytestmark = pytest.mark.django_db(transaction=True)
# Per-deployment counts live in Redis: these run in the hosted half only (deselected, not skipped, in the
# SQLite half; tests/conftest.py).
hosted_only = pytest.mark.hosted_only


def _open(server: Daphne, session_id: str) -> HttpSse:
    stream = HttpSse(f"{server.url}/api/events/stream?sessionId={session_id}")
    assert stream.status == 200
    assert stream.take(1)[0].event == "system.connected"
    return stream


class _Answer:
    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code, self.body = status_code, body

    def json(self):
        import json

        return json.loads(self.body)


def _refused(server: Daphne, session_id: str) -> _Answer:
    """One stream request; an accepted stream is closed at once (only its status is kept)."""
    with httpx.stream("GET", f"{server.url}/api/events/stream?sessionId={session_id}", timeout=10) as response:
        body = response.read() if response.status_code != 200 else b""
        return _Answer(response.status_code, body)


def _eventually_open(server: Daphne, session_id: str, seconds: float) -> HttpSse:
    deadline = time.monotonic() + seconds
    while True:
        response = _refused(server, session_id)
        if response.status_code != 429:
            break
        assert time.monotonic() < deadline, f"still refused after {seconds} s: {response.json()}"
        time.sleep(0.3)
    # the probe's own stream was closed: its slot is released within a keep-alive interval
    return _eventually_open_stream(server, session_id, deadline)


def _eventually_open_stream(server: Daphne, session_id: str, deadline: float) -> HttpSse:
    while True:
        stream = HttpSse(f"{server.url}/api/events/stream?sessionId={session_id}")
        if stream.status == 200:
            assert stream.take(1)[0].event == "system.connected"
            return stream
        stream.close()
        assert time.monotonic() < deadline + 5, "the probe's slot was never released"
        time.sleep(0.3)


def _live_slots() -> int:
    from covel.ratelimit import redis_client

    client = redis_client()
    key = event_stream.DeploymentConnectionRegistry._ALL
    client.zremrangebyscore(key, "-inf", client.time()[0])
    return client.zcard(key)


def _settled(baseline: int) -> None:
    """Wait until the earlier tests' streams gave their slots back (within a keep-alive interval)."""
    deadline = time.monotonic() + 10
    while _live_slots() > baseline:
        assert time.monotonic() < deadline, "earlier streams still hold slots"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def two_servers(django_db_setup):
    """Two web processes of one deployment: one stream per session, and room for 3 more streams
    in the whole deployment than it held when they started. The kill test runs last."""
    assert settings.STORE_BACKEND == "pg", "only the hosted_only tests use two servers"
    baseline = _live_slots()
    env = server_env(COVEL_SSE_MAX_CONNECTIONS_PER_SESSION="1", COVEL_SSE_MAX_CONNECTIONS=str(baseline + 3),
                     COVEL_SSE_SLOT_LEASE_SECONDS="3", COVEL_SSE_KEEPALIVE_SECONDS="1", RATE_LIMIT_RPM="1000")
    servers: list[Daphne] = []
    try:
        servers = [Daphne(env), Daphne(env)]
        yield servers, baseline
    finally:
        for server in servers:
            server.stop()
        event_stream.db_connections_close()


@hosted_only
def test_a_session_cap_counts_the_streams_of_every_web_process(two_servers):
    (a, b), _ = two_servers
    session = make_session()
    held = _open(a, session.pk)
    try:
        # when: a second stream for the same session goes to the other process
        refused = _refused(b, session.pk)
        # then: the deployment already holds this session's one stream
        assert refused.status_code == 429
        assert refused.json()["code"] == "connection_limit_exceeded"
        # and another session is not affected
        other = _open(b, make_session().pk)
        other.close()
    finally:
        held.close()
    # when the first stream ends, the other process can open one
    again = _eventually_open(b, session.pk, seconds=10)
    again.close()


@hosted_only
def test_the_global_cap_counts_the_whole_deployment(two_servers):
    (a, b), baseline = two_servers
    _settled(baseline)
    streams = [_open(a, make_session().pk), _open(b, make_session().pk), _open(a, make_session().pk)]
    try:
        refused = _refused(b, make_session().pk)
        assert refused.status_code == 429
        assert refused.json()["code"] == "global_connection_limit_exceeded"
    finally:
        for stream in streams:
            stream.close()


@hosted_only
def test_the_slots_of_a_killed_web_process_free_themselves_when_their_leases_run_out(two_servers):
    (a, b), baseline = two_servers
    _settled(baseline)
    session = make_session()
    _open(a, session.pk)
    assert _refused(b, session.pk).status_code == 429
    # when: the process holding the stream dies without releasing anything
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    started = time.monotonic()
    # then: the slot expires with its 3-second lease (renewals stopped with the process)
    stream = _eventually_open(b, session.pk, seconds=10)
    stream.close()
    assert time.monotonic() - started < 8
    from covel.ratelimit import redis_client

    assert not [m for m in redis_client().zrange(event_stream.DeploymentConnectionRegistry._ALL, 0, -1)
                if m.decode().startswith(f"{a.proc.pid}:")]


def test_a_slot_held_elsewhere_counts_against_the_session_cap(client, settings):
    # embedded: the process's own counts; hosted: the deployment's Redis registry
    settings.COVEL_SSE_MAX_CONNECTIONS_PER_SESSION = 1
    session = make_session()
    slot = event_stream.connection_registry.acquire(session.pk)
    try:
        response = client.get(f"/api/events/stream?sessionId={session.pk}")
        assert response.status_code == 429
        assert response.json()["code"] == "connection_limit_exceeded"
    finally:
        slot.release()
    assert event_stream.connection_registry.count(session.pk) == 0
