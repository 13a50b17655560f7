"""Wake-ups for SSE readers after events are committed.

``notify(session_id, seq)`` tells every reader of the session that the log grew up to ``seq``.
In-process listeners are always notified; the hosted fan-out backend (see issue 8) also delivers the
signal to other processes. Readers must treat a signal only as a hint and re-read the log.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable

_listeners: dict[str, set[Callable[[int], None]]] = defaultdict(set)
_lock = threading.Lock()


def subscribe(session_id: str, callback: Callable[[int], None]) -> Callable[[], None]:
    """Register ``callback(seq)`` for the session's wake-ups; returns an unsubscribe function.

    Callbacks run on the notifying thread and must be quick and non-blocking (e.g. schedule onto an
    event loop with ``loop.call_soon_threadsafe``).
    """
    with _lock:
        _listeners[session_id].add(callback)

    def unsubscribe() -> None:
        with _lock:
            _listeners[session_id].discard(callback)
            if not _listeners[session_id]:
                _listeners.pop(session_id, None)

    return unsubscribe


def notify_local(session_id: str, seq: int) -> None:
    """Wake this process's listeners of ``session_id``."""
    with _lock:
        callbacks = list(_listeners.get(session_id, ()))
    for callback in callbacks:
        callback(seq)


def notify(session_id: str, seq: int) -> None:
    """Wake every reader of the session (this process, and others through the fan-out backend)."""
    notify_local(session_id, seq)
