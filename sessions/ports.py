"""What session services need from the apps above them, as ports those apps install at start-up
(``.importlinter``: sessions imports no higher layer).

- ``session_jobs_drain(session_id, timeout_seconds) -> bool``: session DELETE step 2 (spec 004
  删除按这个顺序进行: 从持久化的 _runtime_jobs 里找出还没结束的作业…等它们对应的后台 runtime 锁排空) — True once
  none of the session's runtime jobs holds its runtime lease any more, False when ``timeout_seconds``
  passed first. Installed by ``jobs`` (``jobs.services.session_jobs_drain``); without it there are
  no runtime jobs to wait for.
- ``session_deleted(session_id)``: called after a session DELETE removed its rows (committed).
  Installed by ``turns`` (``turns.browser_workspace.workspace_release``: the browser-private
  revision, head and replay cache go with the session, spec 004 §幂等重放缓存).
"""
from __future__ import annotations

from typing import Callable

SessionJobsDrain = Callable[[str, float], bool]

_session_jobs_drain: SessionJobsDrain | None = None


def session_jobs_drain_install(drain: SessionJobsDrain) -> None:
    """Install the process-wide drain of a session's runtime jobs (the jobs app, at start-up)."""
    global _session_jobs_drain
    _session_jobs_drain = drain


def session_jobs_drain(session_id: str, timeout_seconds: float) -> bool:
    """Wait for the session's runtime jobs to drain (see the module docstring); True when none is installed."""
    if _session_jobs_drain is None:
        return True
    return _session_jobs_drain(session_id, timeout_seconds)


_session_deleted: list[Callable[[str], None]] = []


def session_deleted_install(callback: Callable[[str], None]) -> None:
    """Call ``callback(session_id)`` after every committed session DELETE (the apps above, at start-up)."""
    if callback not in _session_deleted:
        _session_deleted.append(callback)


def session_deleted(session_id: str) -> None:
    """Tell the installed callbacks that ``session_id`` is gone (after its delete committed)."""
    for callback in tuple(_session_deleted):  # a copy: a callback may install another
        callback(session_id)
