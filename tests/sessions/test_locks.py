"""The per-session execution lock: bounded wait then session_busy, independence of sessions, and the
non-blocking probe (PostgreSQL advisory lock on the hosted run, in-process lock on SQLite)."""
from __future__ import annotations

import threading
import time

import pytest

from covel.errors import SessionBusy
from sessions.locks import PROBE_FREE, PROBE_HELD, session_lock, session_lock_key, session_lock_probe

pytestmark = pytest.mark.django_db


class _Holder:
    """Holds a session's lock on another thread until released."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.acquired = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with session_lock(self.session_id):
            self.acquired.set()
            self.release.wait(10)

    def __enter__(self) -> "_Holder":
        self.thread.start()
        assert self.acquired.wait(5)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.thread.join(10)


def test_waits_up_to_the_bound_then_raises_session_busy():
    with _Holder("s-busy"):
        started = time.monotonic()
        with pytest.raises(SessionBusy) as caught:
            with session_lock("s-busy", timeout_seconds=0.3):
                pass
        elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 3
    assert (caught.value.status, caught.value.code, caught.value.message) == (503, "session_busy", "Session is busy, please retry")


def test_waiter_gets_the_lock_when_the_holder_releases():
    holder = _Holder("s-wait")
    holder.__enter__()
    threading.Timer(0.2, holder.release.set).start()
    with session_lock("s-wait", timeout_seconds=5):
        assert not holder.thread.is_alive() or holder.release.is_set()
    holder.__exit__()


def test_other_sessions_do_not_wait():
    with _Holder("s-one"):
        started = time.monotonic()
        with session_lock("s-two", timeout_seconds=0):
            pass
        assert time.monotonic() - started < 1


def test_probe_sees_the_holder_without_waiting():
    assert session_lock_probe("s-probe") == PROBE_FREE
    with _Holder("s-probe"):
        started = time.monotonic()
        assert session_lock_probe("s-probe") == PROBE_HELD
        assert time.monotonic() - started < 1
    assert session_lock_probe("s-probe") == PROBE_FREE


def test_lock_is_released_when_the_body_raises():
    with pytest.raises(RuntimeError):
        with session_lock("s-raise"):
            raise RuntimeError("boom")
    with session_lock("s-raise", timeout_seconds=0):
        pass


def test_lock_key_is_a_stable_signed_64_bit_integer():
    key = session_lock_key("mistport-a1b2c3d4")
    assert key == session_lock_key("mistport-a1b2c3d4")
    assert -(2**63) <= key < 2**63
    assert key != session_lock_key("mistport-a1b2c3d5")


@pytest.mark.hosted_only
def test_pooled_lock_connections_ended_by_the_server_are_not_reused():
    from tests.fault_support import pg_backend_terminate, pg_lock_backends

    # given: idle lock connections in this process's pool (a lock taken and a probe made)
    with session_lock("s-heal"):
        assert session_lock_probe("s-heal") == PROBE_HELD
    before = pg_lock_backends()
    assert before
    # when: the server ends them all, as a PostgreSQL restart does (AdminShutdown on next use)
    pg_backend_terminate(*before)
    # then: the next lock, probe and contended wait work on new connections
    with session_lock("s-heal", timeout_seconds=0):
        assert session_lock_probe("s-heal") == PROBE_HELD
    assert session_lock_probe("s-heal") == PROBE_FREE
    with _Holder("s-heal"):
        with pytest.raises(SessionBusy):
            with session_lock("s-heal", timeout_seconds=0.3):
                pass
    after = pg_lock_backends()
    assert after and not set(after) & set(before)
