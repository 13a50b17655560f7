"""The player's resume of a plugin the fault breaker paused (spec 004 POST
/api/sessions/:id/plugins/:pluginId/resume-fault; the breaker itself is sessions.faults, settled by
the commit chain). Writes the session row and its ``plugin.fault.cleared`` event in one transaction.
"""
from __future__ import annotations

from django.db import transaction

from plugins_app.errors import PluginNotFound
from plugins_app.registry import plugin_registry
from sessions import faults
from sessions.models import Session
from sessions.services import session_locked
from turns.events import NewEvent, session_events_append

TOPIC_PLUGIN = "plugin"


def plugin_fault_resume(session_id: str, plugin_id: str) -> Session:
    """Clear the latched breaker of ``plugin_id`` in the session: it runs again from the next
    execution. Appends ``plugin.fault.cleared`` ``{pluginId, reason: "resumed", message}`` (topic
    ``plugin``) with the change. Changes nothing else (plugin selection, grants, plugin data,
    snapshots). Raises 404 session_not_found / plugin_not_found, 409 plugin_not_paused.
    Returns the updated session."""
    if plugin_registry().get(plugin_id) is None:
        raise PluginNotFound(plugin_id)
    with transaction.atomic():
        session = session_locked(session_id)
        event = faults.plugin_fault_resume(session, plugin_id)
        session.save(update_fields=["metadata", "updated_at"])
        session_events_append(session.pk, [NewEvent(type=event.type, topic=TOPIC_PLUGIN, payload=event.payload)])
    return session
