"""Per-session mutual exclusion for turns and every other session write that must serialize with them.

PostgreSQL (hosted): a session-level ``pg_advisory_lock`` keyed by a 64-bit hash of the session id,
taken on a dedicated connection (not Django's: the engine opens and closes transactions on its own
connection while the lock must survive them) and held for the whole execution. The wait is bounded
by ``lock_timeout`` (COVEL_SESSION_LOCK_TIMEOUT_SECONDS), after which SessionBusy (503
session_busy) is raised (spec 004 §响应格式约定, §多实例能力边界).

SQLite (embedded): one ``threading.Lock`` per session id inside this process — the embedded shape
is a single process (spec 004 §多实例能力边界: 进程内的锁).

``session_lock_probe`` answers without waiting for a long turn: "held", "free" or "unknown".
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
from typing import Iterator

from django.conf import settings

from covel.errors import SessionBusy

logger = logging.getLogger("covel.locks")

PROBE_HELD = "held"
PROBE_FREE = "free"
PROBE_UNKNOWN = "unknown"

# Spec 004 §刷新与未完成回合恢复: the probe gives up after 200 ms without a lock connection.
PROBE_CONNECTION_WAIT_SECONDS = 0.2
_POOL_MAX_IDLE = 8


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
    try:
        conn = _pool.get(wait_seconds=PROBE_CONNECTION_WAIT_SECONDS)
    except Exception:
        logger.warning("session lock probe: no lock connection within %ss", PROBE_CONNECTION_WAIT_SECONDS)
        return PROBE_UNKNOWN
    healthy = False
    try:
        key = session_lock_key(session_id)
        acquired = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        if acquired:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        healthy = True
        return PROBE_FREE if acquired else PROBE_HELD
    except Exception:
        logger.exception("session lock probe failed")
        return PROBE_UNKNOWN
    finally:
        _pool.put(conn, healthy=healthy)


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
        )

    def get(self, *, wait_seconds: float = 5.0):
        import os

        if self._pid != os.getpid():  # a forked worker must not share the parent's sockets
            self._idle = queue.LifoQueue()
            self._pid = os.getpid()
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            if not conn.closed and conn.info.dbname == settings.DATABASES["default"]["NAME"]:
                return conn
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
                return result["conn"]
            if thread.is_alive():
                # Keep the late connection for the next caller instead of leaking it.
                threading.Thread(target=self._adopt_late, args=(thread, result), daemon=True).start()
                raise TimeoutError("no lock connection in time")
            raise result.get("error") or TimeoutError("no lock connection")
        return self._connect(wait_seconds)

    def _adopt_late(self, thread: threading.Thread, result: dict) -> None:
        thread.join()
        if "conn" in result:
            self.put(result["conn"], healthy=True)

    def put(self, conn, *, healthy: bool) -> None:
        if not healthy or conn.closed or self._idle.qsize() >= _POOL_MAX_IDLE:
            _close_quietly(conn)
            return
        self._idle.put(conn)


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
    conn = _pool.get(wait_seconds=max(wait_seconds, 1.0))
    healthy = False
    try:
        # Uncontended (the usual case): one round trip. Only a contended lock pays for the wait setup.
        acquired = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        if not acquired and wait_seconds > 0:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(wait_seconds * 1000)}ms",))
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                acquired = True
            except psycopg.errors.LockNotAvailable:
                acquired = False
        healthy = True
    finally:
        if not healthy:
            _pool.put(conn, healthy=False)
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
        except Exception:
            logger.exception("advisory unlock failed for %s; dropping the connection releases it", session_id)
        _pool.put(conn, healthy=released)


def lock_connections_close() -> None:
    """Close this process's idle lock connections (tests call it before dropping their database)."""
    while True:
        try:
            conn = _pool._idle.get_nowait()
        except queue.Empty:
            return
        _close_quietly(conn)
