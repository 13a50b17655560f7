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
    with the in-process worker on, and yield ``django.conf.settings``. INFO logs are silenced."""
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
    settings.COVEL_INPROCESS_WORKER = True
    try:
        yield settings
    finally:
        lock_connections_close()
        connections.close_all()
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"], verbosity=0)


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
