"""Fault injection for the stream and connection tests of ``make test`` (no tests here).

Everything here acts only on what this test run owns: its own test database (pytest-django's
``test_covel_<pid>`` on PostgreSQL), connections of this process, and this process's event-bus
listener connection on Redis. Nothing restarts, flushes or reconfigures the shared servers.

- ``pg_backend_terminate(pid)``: the server ends one connection (``pg_terminate_backend``), exactly
  what every client connection sees when PostgreSQL restarts (``AdminShutdown``).
- ``pg_connections_refused()``: the test database refuses new connections
  (``ALTER DATABASE … ALLOW_CONNECTIONS false``) and the given backends are ended: a database that
  stays away until the ``with`` block ends.
- ``redis_listener_kill()``: ``CLIENT KILL`` of this process's event-bus listener connection, as a
  Redis restart would drop it.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator

from django.conf import settings


def _pg_admin():
    import psycopg

    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db.get("HOST") or None, port=db.get("PORT") or None, user=db.get("USER") or None,
        password=db.get("PASSWORD") or None, dbname="postgres", autocommit=True, connect_timeout=5,
    )


def pg_backend_terminate(*pids: int) -> None:
    """End the server processes ``pids`` (connections of this test run) as a restart would."""
    with _pg_admin() as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def pg_lock_backends() -> list[int]:
    """Backend pids of this process's session-lock connections (application_name covel-session-lock)."""
    with _pg_admin() as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = 'covel-session-lock'",
            (settings.DATABASES["default"]["NAME"],),
        ).fetchall()
    return [pid for (pid,) in rows]


@contextlib.contextmanager
def pg_connections_refused(terminate: Iterable[int] = ()) -> Iterator[None]:
    """Inside the block the test database accepts no new connection and ``terminate`` are ended."""
    name = settings.DATABASES["default"]["NAME"]
    assert name.startswith("test_"), f"refusing to lock anything but a test database, not {name}"
    with _pg_admin() as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            for pid in terminate:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def redis_listener_kill() -> int:
    """Drop this process's event-bus listener connection (``covel.eventbus``); returns how many
    connections Redis closed (1 when the listener was connected)."""
    import redis

    from covel import eventbus

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3)
    try:
        name = f"{eventbus.LISTENER_CLIENT_NAME_PREFIX}{os.getpid()}"
        killed = 0
        for entry in client.client_list():
            if entry.get("name") == name:
                killed += client.client_kill_filter(_id=entry["id"])
        return killed
    finally:
        client.close()
