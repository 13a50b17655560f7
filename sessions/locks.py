"""Per-session mutual exclusion for turns and every other session write that must serialize with them.

PostgreSQL (hosted): a session-level ``pg_advisory_lock`` keyed by a 64-bit hash of the session id,
taken on a dedicated connection (not Django's: the engine opens and closes transactions on its own
connection while the lock must survive them) and held for the whole execution. The wait is bounded
by ``lock_timeout`` (COVEL_SESSION_LOCK_TIMEOUT_SECONDS), after which SessionBusy (503
session_busy) is raised (spec 004 §响应格式约定, §多实例能力边界).

SQLite (embedded): one ``threading.Lock`` per session id inside this process — the embedded shape
is a single process (spec 004 §多实例能力边界: 进程内的锁).

``session_lock_probe`` answers without waiting for a long turn: "held", "free" or "unknown".

Lock connections heal (README "Faults"): an idle pooled connection is checked before reuse without
a round trip (closed, broken, inside a transaction, or its socket readable: an idle autocommit
connection receives nothing unless the server is ending it, e.g. ``AdminShutdown`` after a
PostgreSQL restart); TCP keep-alives notice a vanished server. If the first statement on a reused
connection still fails with a connection error, the connection is dropped and the statement is
retried once on a new one. An advisory lock lives as long as its connection: a PostgreSQL restart
releases every lock held when it happened.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import select
import threading
from typing import Any, Callable, Iterator, TypeVar

from django.conf import settings

from covel.errors import SessionBusy

logger = logging.getLogger("covel.locks")

PROBE_HELD = "held"
PROBE_FREE = "free"
PROBE_UNKNOWN = "unknown"

# Spec 004 §刷新与未完成回合恢复: the probe gives up after 200 ms without a lock connection.
PROBE_CONNECTION_WAIT_SECONDS = 0.2
_POOL_MAX_IDLE = 8
# TCP keep-alive of lock connections (libpq parameters): a server gone without closing the socket
# is noticed after about idle + interval * count seconds instead of the kernel's two hours.
_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}

T = TypeVar("T")


def session_lock_key(session_id: str) -> int:
    """The signed 64-bit advisory lock key of a session (stable across processes and restarts)."""
    digest = hashlib.sha256(b"covel-session-lock:" + session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _uses_pg() -> bool:
    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


@contextlib.contextmanager
def session_lock(session_id: str, *, timeout_seconds: float | None = None) -> Iterator[None]:
    """Hold the session's execution lock for the ``with`` body.

    timeout_seconds: how long to wait (default COVEL_SESSION_LOCK_TIMEOUT_SECONDS; 0 = try once).
    Raises SessionBusy (503 session_busy) when the lock is not acquired in time.
    Not reentrant: a thread already holding the lock of ``session_id`` must not take it again.
    """
    wait = settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    if _uses_pg():
        with _pg_lock(session_id, wait):
            yield
    else:
        with _local_lock(session_id, wait):
            yield


def session_lock_probe(session_id: str) -> str:
    """Without waiting for the lock: PROBE_HELD when some execution holds it, PROBE_FREE when not,
    PROBE_UNKNOWN when the check itself could not be made (no lock connection within 200 ms)."""
    if not _uses_pg():
        entry = _local_locks.get(session_id)
        return PROBE_HELD if entry is not None and entry.lock.locked() else PROBE_FREE
    key = session_lock_key(session_id)

    def probe(conn) -> bool:
        acquired = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        if acquired:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return acquired

    try:
        conn, acquired = _on_live_connection(probe, wait_seconds=PROBE_CONNECTION_WAIT_SECONDS)
    except Exception as exc:
        logger.warning("session lock probe failed (%s: %s)", exc.__class__.__name__, exc)
        return PROBE_UNKNOWN
    _pool.put(conn, healthy=True)
    return PROBE_FREE if acquired else PROBE_HELD


# --- embedded: in-process locks -------------------------------------------------------------


class _LocalEntry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_local_locks: dict[str, _LocalEntry] = {}
_local_guard = threading.Lock()


@contextlib.contextmanager
def _local_lock(session_id: str, wait_seconds: float) -> Iterator[None]:
    with _local_guard:
        entry = _local_locks.get(session_id)
        if entry is None:
            entry = _local_locks[session_id] = _LocalEntry()
        entry.users += 1
    try:
        acquired = entry.lock.acquire(timeout=wait_seconds) if wait_seconds > 0 else entry.lock.acquire(blocking=False)
        if not acquired:
            raise SessionBusy()
        try:
            yield
        finally:
            entry.lock.release()
    finally:
        with _local_guard:
            entry.users -= 1
            if entry.users == 0:
                _local_locks.pop(session_id, None)


# --- hosted: PostgreSQL advisory locks on dedicated connections --------------------------------


class _PgPool:
    """A small per-process pool of autocommit psycopg connections used only for advisory locks."""

    def __init__(self) -> None:
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._pid = None

    def _connect(self, timeout_seconds: float):
        import psycopg

        db = settings.DATABASES["default"]
        return psycopg.connect(
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            dbname=db["NAME"],
            autocommit=True,
            connect_timeout=max(1, int(round(timeout_seconds))),
            application_name="covel-session-lock",
            **_KEEPALIVE,
        )

    def get(self, *, wait_seconds: float = 5.0, fresh: bool = False) -> tuple[Any, bool]:
        """(connection, reused): an idle connection that passes ``_usable`` or, with none (or
        ``fresh``), a new one within ``wait_seconds``. Raises what connecting raises, or
        TimeoutError."""
        import os

        if self._pid != os.getpid():  # a forked worker must not share the parent's sockets
            self._idle = queue.LifoQueue()
            self._pid = os.getpid()
        while not fresh:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            if conn.info.dbname == settings.DATABASES["default"]["NAME"] and _usable(conn):
                return conn, True
            _close_quietly(conn)
        if wait_seconds < 1:
            # psycopg's connect_timeout has a one-second grain; bound short waits on a thread.
            result: dict = {}

            def connect() -> None:
                try:
                    result["conn"] = self._connect(1)
                except Exception as exc:  # reported through result
                    result["error"] = exc

            thread = threading.Thread(target=connect, daemon=True)
            thread.start()
            thread.join(wait_seconds)
            if "conn" in result:
                return result["conn"], False
            if thread.is_alive():
                # Keep the late connection for the next caller instead of leaking it.
                threading.Thread(target=self._adopt_late, args=(thread, result), daemon=True).start()
                raise TimeoutError("no lock connection in time")
            raise result.get("error") or TimeoutError("no lock connection")
        return self._connect(wait_seconds), False

    def _adopt_late(self, thread: threading.Thread, result: dict) -> None:
        thread.join()
        if "conn" in result:
            self.put(result["conn"], healthy=True)

    def put(self, conn, *, healthy: bool) -> None:
        if not healthy or conn.closed or self._idle.qsize() >= _POOL_MAX_IDLE:
            _close_quietly(conn)
            return
        self._idle.put(conn)


def _usable(conn) -> bool:
    """Whether an idle pooled connection may be reused, checked without a round trip: open, not
    broken, not inside a transaction, and nothing waiting on its socket (an idle autocommit
    connection that never LISTENs receives nothing unless the server is closing it)."""
    from psycopg.pq import TransactionStatus

    if conn.closed or conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _on_live_connection(statement: Callable[[Any], T], *, wait_seconds: float) -> tuple[Any, T]:
    """Run ``statement(conn)`` on a pool connection; returns (conn, its result) and the caller
    owns ``conn`` (``_pool.put`` it). When a *reused* connection fails with a connection error
    (the server ended it since ``_usable`` looked), it is dropped and the statement runs once more
    on a new connection. On any other failure the connection is closed and the error raised.
    ``statement`` must handle the errors it expects itself (LockNotAvailable is an
    OperationalError too)."""
    import psycopg

    conn, reused = _pool.get(wait_seconds=wait_seconds)
    try:
        return conn, statement(conn)
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        _close_quietly(conn)
        if not reused:
            raise
        logger.warning("session lock: pooled connection was dead (%s); retrying on a new one", exc.__class__.__name__)
    except BaseException:
        _close_quietly(conn)
        raise
    conn, _ = _pool.get(wait_seconds=wait_seconds, fresh=True)
    try:
        return conn, statement(conn)
    except BaseException:
        _close_quietly(conn)
        raise


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:
        pass


_pool = _PgPool()


@contextlib.contextmanager
def _pg_lock(session_id: str, wait_seconds: float) -> Iterator[None]:
    import psycopg

    key = session_lock_key(session_id)

    def acquire(conn) -> bool:
        # Uncontended (the usual case): one round trip. Only a contended lock pays for the wait setup.
        if conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            return True
        if wait_seconds <= 0:
            return False
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(wait_seconds * 1000)}ms",))
        try:
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    conn, acquired = _on_live_connection(acquire, wait_seconds=max(wait_seconds, 1.0))
    if not acquired:
        _pool.put(conn, healthy=True)
        raise SessionBusy()
    try:
        yield
    finally:
        released = False
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            released = True
        except Exception as exc:
            logger.warning("advisory unlock failed for %s (%s: %s); dropping the connection releases it",
                           session_id, exc.__class__.__name__, exc)
        _pool.put(conn, healthy=released)


def lock_connections_close() -> None:
    """Close this process's idle lock connections (tests call it before dropping their database)."""
    while True:
        try:
            conn = _pool._idle.get_nowait()
        except queue.Empty:
            return
        _close_quietly(conn)
