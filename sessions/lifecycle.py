"""Session lifecycle hooks: SessionStart after a session is created, SessionEnd when it is deleted
or ended (spec 004 §会话管理 删除按这个顺序进行, PATCH 409 session_lifecycle_busy; plugins_app.hooks).

- Hooks run without the session lock; while they run the session carries a lifecycle marker
  (``metadata.lifecycleHook = {event, startedAt}``) in the database, so a lifecycle change (a
  status PATCH, a DELETE) from any process answers 409 session_lifecycle_busy. A marker older
  than LIFECYCLE_MARKER_SECONDS is a dead process's and no longer blocks.
- SessionEnd runs at most once per session: the claim (``metadata.sessionEndFired``) is written in
  the same transaction that marks the delete (or the end), so a retried DELETE never runs it again.
- SessionEnd hooks observe only: their answers change nothing. Hooks of community plugins run
  only when their server code is granted (for a new session: a trusted source), else skipped.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction

from plugins_app.hooks import SESSION_END, SESSION_START, hook_call, hooks_registered
from sessions.errors import SessionLifecycleBusy
from sessions.grants import code_missing
from sessions.models import Session

logger = logging.getLogger("covel.sessions")

LIFECYCLE_KEY = "lifecycleHook"
SESSION_END_FIRED_KEY = "sessionEndFired"
#: A marker older than this belongs to a process that died while its hooks ran.
LIFECYCLE_MARKER_SECONDS = 120


def _registry():
    from plugins_app.registry import plugin_registry

    return plugin_registry()


def _hook_plugins(session: Session, registry, plugin_ids: list[str], event: str) -> list:
    """The registrations of ``event`` among ``plugin_ids`` whose code may run in ``session``."""
    allowed = []
    for plugin_id in plugin_ids:
        record = registry.get(plugin_id)
        if record is None or code_missing(session, record) is not None:
            continue
        if record.is_code_pending and any(h.get("event") == event for h in record.manifest.contributes.hooks):
            registry.entry_ensure(record.id)
        allowed.append(plugin_id)
    return hooks_registered(registry, allowed, event)


def lifecycle_marker(event: str) -> dict[str, Any]:
    return {"event": event, "startedAt": time.time()}


def lifecycle_busy_check(session: Session) -> None:
    """Raise 409 session_lifecycle_busy while a SessionStart / SessionEnd hook of the session runs."""
    marker = (session.metadata or {}).get(LIFECYCLE_KEY)
    if isinstance(marker, dict) and time.time() - float(marker.get("startedAt") or 0) < LIFECYCLE_MARKER_SECONDS:
        raise SessionLifecycleBusy(str(marker.get("event") or "lifecycle"))


def session_start_pending(registry, plugin_ids: list[str]) -> bool:
    """Whether any plugin that may run at creation (builtin, or a trusted community source) has a
    SessionStart hook — decides whether creation writes the lifecycle marker."""
    for plugin_id in plugin_ids:
        record = registry.get(plugin_id)
        if record is not None and any(h.get("event") == SESSION_START for h in record.manifest.contributes.hooks):
            return True
    return False


def _run(session: Session, event: str, extra: dict[str, Any]) -> None:
    registry = _registry()
    for registration in _hook_plugins(session, registry, list(session.active_plugins or []), event):
        answer = hook_call(registration, {"event": event, "sessionId": session.pk, "worldId": session.world_id,
                                          "locale": session.locale, **extra})
        if answer.error:
            logger.warning("session %s: %s hook of %s failed: %s", session.pk, event, answer.plugin_id, answer.error)


def _marker_clear(session_id: str) -> None:
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is not None and LIFECYCLE_KEY in (session.metadata or {}):
            meta = dict(session.metadata)
            meta.pop(LIFECYCLE_KEY, None)
            Session.objects.filter(pk=session_id).update(metadata=meta)


def session_start_run(session_id: str) -> None:
    """Run the SessionStart hooks of a just-created session (its marker was written with it), then
    clear the marker. Never raises for a hook."""
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        return
    try:
        _run(session, SESSION_START, {})
    finally:
        _marker_clear(session_id)


def session_end_marked(session: Session) -> bool:
    """Whether the session's SessionEnd was claimed and its lifecycle marker is SessionEnd's (a
    delete that ran it and then failed leaves both; its retry is not blocked by the marker)."""
    meta = session.metadata or {}
    marker = meta.get(LIFECYCLE_KEY)
    return bool(meta.get(SESSION_END_FIRED_KEY)) and isinstance(marker, dict) and marker.get("event") == SESSION_END


def session_end_claim(session: Session) -> bool:
    """Inside the transaction holding the session row lock: claim the one SessionEnd of the session
    (False when it already ran or was claimed) and write the lifecycle marker. Mutates ``session.metadata``;
    the caller saves it."""
    meta = dict(session.metadata or {})
    if meta.get(SESSION_END_FIRED_KEY):
        return False
    meta[SESSION_END_FIRED_KEY] = True
    meta[LIFECYCLE_KEY] = lifecycle_marker(SESSION_END)
    session.metadata = meta
    return True


def session_end_run(session_id: str, *, reason: str, clear_marker: bool = True) -> None:
    """Run the SessionEnd hooks (observe only), without the session lock, then clear the marker."""
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        return
    try:
        _run(session, SESSION_END, {"reason": reason})
    finally:
        if clear_marker:
            _marker_clear(session_id)
