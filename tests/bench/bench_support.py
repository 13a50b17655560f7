"""What the turn benchmarks share: the settings shapes, a throw-away test database with the
in-process worker, and a recorder of every SQL statement the process runs."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

SHAPES = {"embedded": "covel.settings.test", "hosted": "covel.settings.test_hosted"}
WRITE_VERBS = ("INSERT", "UPDATE", "DELETE")


class NoMigrations(dict):
    """MIGRATION_MODULES that makes the test database from the models directly (faster setup)."""

    def __contains__(self, item):
        return True

    def __getitem__(self, item):
        return None


@contextmanager
def bench_database(shape: str) -> Iterator[object]:
    """Set Django up for ``shape`` (a key of SHAPES), create a fresh test database (dropped on exit)
    with the in-process worker on, and yield ``django.conf.settings``. INFO logs are silenced.
    Hosted: with the connection pool of covel.settings.hosted (COVEL_DB_POOL_SIZE), which the test
    settings leave out for pytest-django — without it every thread of a turn opens connections."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SHAPES[shape]
    import django

    django.setup()
    import logging

    logging.disable(logging.INFO)
    from django.conf import settings
    from django.db import connection, connections
    from django.test.utils import setup_test_environment

    from sessions.locks import lock_connections_close

    settings.MIGRATION_MODULES = NoMigrations()
    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    _storage_settings_apply(connection)
    pooled = connection.vendor == "postgresql" and _pool_on(connection)
    settings.COVEL_INPROCESS_WORKER = True
    try:
        yield settings
    finally:
        lock_connections_close()
        connections.close_all()
        if pooled:
            connection.close_pool()
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"], verbosity=0)


def _pool_on(connection) -> bool:
    """Give the (test) database the pool the hosted settings give a deployment."""
    from covel.env import env_int
    from covel.settings import hosted

    if not hosted.COVEL_DB_POOL_SIZE:
        return False
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = 0
    # As covel/settings/hosted.py builds it (test_hosted removes it from the shared dict).
    connection.settings_dict.setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": hosted.COVEL_DB_POOL_SIZE, "max_idle": 120,
        "timeout": env_int("COVEL_DB_POOL_TIMEOUT_SECONDS", 10, minimum=1)}
    return True


def pool_close() -> None:
    """Close the hosted shape's connection pool (``CREATE DATABASE … TEMPLATE`` wants no
    connection to the source); the next use opens a new one. No-op without a pool."""
    from django.db import connection

    if connection.vendor == "postgresql" and (connection.settings_dict.get("OPTIONS") or {}).get("pool"):
        connection.close_pool()


def pool_warm(count: int = 8) -> None:
    """Open ``count`` pooled connections and give them back, as a running process has them, so
    a timed turn does not pay for opening its threads' connections. No-op without a pool."""
    from django.db import connection

    if connection.vendor != "postgresql" or not (connection.settings_dict.get("OPTIONS") or {}).get("pool"):
        return
    pool = connection.pool
    pool.open()  # as Django's first connect does (the pool is made closed)
    held = [pool.getconn() for _ in range(count)]
    for conn in held:
        pool.putconn(conn)


def _storage_settings_apply(connection) -> None:
    """What the migrations set beyond the models (tables made from the models skip them): the
    PostgreSQL lz4 TOAST compression of turns/migrations/0005."""
    import importlib

    with connection.schema_editor() as editor:
        importlib.import_module("turns.migrations.0005_trace_payload_lz4")._lz4(None, editor)


class StatementRecorder:
    """Counts every statement of this process (an execute wrapper on every connection, all
    threads); with ``keep_writes`` also keeps the writing ones (INSERT / UPDATE / DELETE) with their
    parameters: ``writes`` = [(sql, params, many)]."""

    def __init__(self, *, keep_writes: bool = False) -> None:
        self._lock = threading.Lock()
        self.keep_writes = keep_writes
        self.count = 0
        self.writes: list[tuple[str, object, bool]] = []

    def __call__(self, execute, sql, params, many, context):
        with self._lock:
            self.count += 1
            if self.keep_writes and sql.lstrip().upper().startswith(WRITE_VERBS):
                self.writes.append((sql, params, many))
        return execute(sql, params, many, context)

    def install(self) -> None:
        from django.db import connections
        from django.db.backends.signals import connection_created

        def attach(sender, connection, **kwargs):
            if self not in connection.execute_wrappers:
                connection.execute_wrappers.append(self)

        connection_created.connect(attach, weak=False)
        for conn in connections.all():
            if self not in conn.execute_wrappers:
                conn.execute_wrappers.append(self)

    def take(self) -> tuple[int, list[tuple[str, object, bool]]]:
        """(statements, writes) since the last take; resets both."""
        with self._lock:
            out = self.count, self.writes
            self.count, self.writes = 0, []
            return out
