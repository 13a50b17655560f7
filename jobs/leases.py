"""Renewable leases for runtime jobs (spec 004 §多实例能力边界: 通过 CAS 和可续期的租约认领).

A lease is a key held by one owner for ``ttl_ms``; only the owner can renew or release it.

- Hosted shape (PostgreSQL + Redis): ``SET key owner NX PX ttl`` takes it; renew and release are
  Lua compare-and-set scripts (``register_script``), so a holder whose lease already expired and
  was taken by someone else can neither extend nor drop the new holder's lease.
- Embedded shape (SQLite, one process): the same semantics on an in-process table.

A lease only keeps two workers from running the same thing at once while both are alive. It is
not what protects the data: every claim also increments ``RuntimeJob.fencing_token`` in the
database and the commit of a job's result checks that token in its own UPDATE (jobs.services).

Also here, for the job services: the "this Celery worker is shutting down" mark, which lives in
``covel.workers`` (the turn services read it too).
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

from covel import workers

KEY_PREFIX = "covel:lease:"

_RENEW_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class LeaseBackend(Protocol):
    """Where leases live. All calls are atomic; ttl_ms > 0."""

    def acquire(self, key: str, owner: str, ttl_ms: int) -> bool: ...

    def renew(self, key: str, owner: str, ttl_ms: int) -> bool: ...

    def release(self, key: str, owner: str) -> bool: ...

    def holder(self, key: str) -> str | None: ...

    def mark(self, key: str, ttl_ms: int) -> None: ...

    def unmark(self, key: str) -> None: ...

    def is_marked(self, key: str) -> bool: ...


class RedisLeaseBackend:
    """Leases in Redis (hosted shape)."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._renew = self.client.register_script(_RENEW_LUA)
        self._release = self.client.register_script(_RELEASE_LUA)

    def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        return bool(self.client.set(key, owner, nx=True, px=ttl_ms))

    def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return bool(self._renew(keys=[key], args=[owner, ttl_ms]))

    def release(self, key: str, owner: str) -> bool:
        return bool(self._release(keys=[key], args=[owner]))

    def holder(self, key: str) -> str | None:
        value = self.client.get(key)
        return value.decode("utf-8") if value is not None else None

    def mark(self, key: str, ttl_ms: int) -> None:
        self.client.set(key, "1", px=ttl_ms)

    def unmark(self, key: str) -> None:
        self.client.delete(key)

    def is_marked(self, key: str) -> bool:
        return bool(self.client.exists(key))


class LocalLeaseBackend:
    """Leases in this process (embedded shape: one process, spec 004 进程内)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, tuple[str, float]] = {}

    def _live(self, key: str) -> tuple[str, float] | None:
        entry = self._leases.get(key)
        if entry is not None and entry[1] <= time.monotonic():
            del self._leases[key]
            return None
        return entry

    def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        with self._lock:
            if self._live(key) is not None:
                return False
            self._leases[key] = (owner, time.monotonic() + ttl_ms / 1000)
            return True

    def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        with self._lock:
            entry = self._live(key)
            if entry is None or entry[0] != owner:
                return False
            self._leases[key] = (owner, time.monotonic() + ttl_ms / 1000)
            return True

    def release(self, key: str, owner: str) -> bool:
        with self._lock:
            entry = self._live(key)
            if entry is None or entry[0] != owner:
                return False
            del self._leases[key]
            return True

    def holder(self, key: str) -> str | None:
        with self._lock:
            entry = self._live(key)
            return entry[0] if entry else None

    def mark(self, key: str, ttl_ms: int) -> None:
        self.acquire(key, "1", ttl_ms) or self.renew(key, "1", ttl_ms)

    def unmark(self, key: str) -> None:
        with self._lock:
            self._leases.pop(key, None)

    def is_marked(self, key: str) -> bool:
        return self.holder(key) is not None


_backend: LeaseBackend | None = None
_backend_pid: int | None = None
_backend_lock = threading.Lock()


def lease_backend() -> LeaseBackend:
    """This process's backend: Redis in the hosted shape (STORE_BACKEND "pg" with REDIS_URL),
    in-process otherwise. Rebuilt after a fork (a prefork child must not share sockets)."""
    global _backend, _backend_pid
    with _backend_lock:
        if _backend is None or _backend_pid != os.getpid():
            if settings.STORE_BACKEND == "pg" and settings.REDIS_URL:
                _backend = RedisLeaseBackend(settings.REDIS_URL)
            else:
                _backend = LocalLeaseBackend()
            _backend_pid = os.getpid()
        return _backend


@dataclass
class Lease:
    """A held lease. ``owner`` is a random value only this holder knows; ``ttl_ms`` the length
    each acquire/renew grants."""

    key: str
    owner: str
    ttl_ms: int

    def renew(self) -> bool:
        """Extend by ttl_ms; False when the lease was lost (expired and maybe taken by another)."""
        return lease_backend().renew(self.key, self.owner, self.ttl_ms)

    def release(self) -> bool:
        """Give it up; False when it was no longer ours (nothing is deleted then)."""
        return lease_backend().release(self.key, self.owner)


def lease_acquire(name: str, *, ttl_seconds: float) -> Lease | None:
    """Take the lease ``name`` for ttl_seconds, or None when someone holds it."""
    lease = Lease(key=KEY_PREFIX + name, owner=uuid.uuid4().hex, ttl_ms=max(1, int(ttl_seconds * 1000)))
    return lease if lease_backend().acquire(lease.key, lease.owner, lease.ttl_ms) else None


def lease_holder(name: str) -> str | None:
    """The owner value of the live lease ``name`` (None when free)."""
    return lease_backend().holder(KEY_PREFIX + name)


def worker_shutdown_mark(hostname: str) -> None:
    """Record that the Celery worker ``hostname`` began a warm shutdown (``covel.workers``)."""
    workers.worker_shutdown_mark(hostname)


def worker_shutdown_clear(hostname: str) -> None:
    """Forget a shutdown mark (a worker with this name started)."""
    workers.worker_shutdown_clear(hostname)


def worker_shutdown_requested(hostname: str) -> bool:
    """True when the worker ``hostname`` is in a warm shutdown."""
    return workers.worker_shutdown_requested(hostname)
