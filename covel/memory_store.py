"""The browser-private profile's store (``STORE_BACKEND=memory``, spec 004 §存储后端, §浏览器私有工作区):
one SQLite database in this process's memory, behind the same Django models as the file database.

``covel.settings.embedded`` names it ``file:/covel-memory-<pid>?vfs=memdb``: SQLite's memdb VFS
shares a database whose name starts with "/" between every connection of the process (request
threads, the in-process worker threads, the timers) with ordinary locking, so a writer waits for
another (busy timeout) instead of failing. The database exists while at least one connection to it
is open; Django closes its per-thread connections after each request, so ``memory_store_open``
keeps one connection of its own open for the life of the process and migrates the schema into it.
Nothing survives a restart.
"""
from __future__ import annotations

import logging
import sqlite3
import threading

from django.conf import settings

logger = logging.getLogger("covel.memory_store")

_keeper: sqlite3.Connection | None = None
_lock = threading.Lock()


def store_is_memory() -> bool:
    """True when this process really runs on the in-memory store (the browser-private profile).

    Reads the database the process was configured with (settings.STORE_BACKEND is derived from it
    at start-up), never a request parameter (spec 004 §生产 MemoryStore 例外: 看的是服务器实际注入的存储后端).
    """
    return settings.STORE_BACKEND == "memory"


def memory_store_open() -> bool:
    """Open the keeper connection and apply every migration (once per process; later calls do nothing).

    Returns True when this call created the schema, False when the store is not memory or was open.
    Raises whatever ``migrate`` raises: a process whose store cannot be built must not serve.
    """
    global _keeper
    if not store_is_memory():
        return False
    with _lock:
        if _keeper is not None:
            return False
        _keeper = sqlite3.connect(settings.DATABASES["default"]["NAME"], uri=True, check_same_thread=False)
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        logger.info("memory store: migrated %s (nothing survives a restart)", settings.DATABASES["default"]["NAME"])
        return True
