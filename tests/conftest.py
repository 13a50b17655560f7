"""Suite-wide fixtures. The hosted run (covel.settings.test_hosted) fails fast, never skips, when
PostgreSQL or Redis is unreachable."""
from __future__ import annotations

import pytest
from django.conf import settings

from tests.github_fake import github  # noqa: F401 - the fake GitHub fixture (GitHub install tests)

HOW_TO_START = (
    "Start them with:\n"
    "  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n"
    '  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no\n'
    "or point TEST_DATABASE_URL / TEST_REDIS_URL at running servers."
)


def pytest_configure(config):
    config.addinivalue_line("markers", "hosted_only: runs only in the hosted (PostgreSQL + Redis) half of make test")
    config.addinivalue_line("markers", "e2e: a slow scenario on real processes (tests/e2e/, make e2e only)")
    if getattr(settings, "STORE_BACKEND", None) != "pg":
        return
    import psycopg
    import redis

    db = settings.DATABASES["default"]
    try:
        psycopg.connect(
            host=db.get("HOST") or None, port=db.get("PORT") or None, user=db.get("USER") or None,
            password=db.get("PASSWORD") or None, dbname="postgres", connect_timeout=3,
        ).close()
    except Exception as exc:
        raise pytest.UsageError(f"hosted test run: PostgreSQL unreachable ({exc}).\n{HOW_TO_START}")
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:
        raise pytest.UsageError(f"hosted test run: Redis at {settings.REDIS_URL} unreachable ({exc}).\n{HOW_TO_START}")


@pytest.fixture
def api(client):
    """The Django test client, for requests under /api/ (Host checks and middleware run)."""
    return client


@pytest.fixture(autouse=True)
def _inprocess_work_drained():
    """In-process background tasks a test started (runtime jobs, index updates) finish before the
    test's database is flushed: a task still writing would deadlock the flush's TRUNCATE."""
    yield
    from covel import inprocess

    inprocess.wait_idle(timeout_seconds=20)


@pytest.fixture(scope="session", autouse=True)
def _postgresql_flush_by_delete():
    """Hosted run: a transactional test's teardown empties the tables with DELETE, not TRUNCATE.

    Django's flush on PostgreSQL is one ``TRUNCATE`` of every table; on this machine that costs
    120–230 ms for our ~36 tables (a new file per table and index, under an ACCESS EXCLUSIVE lock)
    against 5–8 ms for DELETEs of the few rows a test leaves — hundreds of transactional tests per
    hosted run (issue 18). Same outcome: every table empty, in the flush's one transaction; Django's
    foreign keys are DEFERRABLE INITIALLY DEFERRED, so the order of the DELETEs does not matter
    (``SET CONSTRAINTS ALL DEFERRED`` covers any declared otherwise). A flush that resets sequences
    keeps Django's TRUNCATE ... RESTART IDENTITY."""
    if getattr(settings, "STORE_BACKEND", None) != "pg":
        yield
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = truncate


@pytest.fixture(scope="session", autouse=True)
def _session_lock_connections_closed(django_db_setup, django_db_blocker):
    """The session-lock pool keeps PostgreSQL connections open; close them before the test
    database is dropped at the end of the run."""
    yield
    from sessions.locks import lock_connections_close

    lock_connections_close()


def pytest_collection_modifyitems(config, items):
    """Leave ``hosted_only`` tests out of the SQLite half (they run in the hosted half, never skipped there)."""
    if getattr(settings, "STORE_BACKEND", None) == "pg":
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("hosted_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
