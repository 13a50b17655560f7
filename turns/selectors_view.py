"""The session view (spec 004 GET /api/sessions/:id/view, SessionSnapshot): what a client needs to
draw a session at once — the session, the latest messages, characters, plugins and their public
data, the latest trace events and the event cursor to subscribe from.
"""
from __future__ import annotations

from typing import Any

from plugins_app.selectors_plugin_data import plugin_data_visible
from sessions.models import Session
from sessions.selectors import (
    VIEW_MESSAGES, VIEW_TRACE_EVENTS, characters_list, dimensions_public, event_cursor, messages_page, runnable_plugins,
    session_out,
)
from turns.models import InteractionRecord, TraceEvent
from turns.selectors_records import trace_event_out


def session_view(session: Session, registry) -> dict[str, Any]:
    """GET /api/sessions/:id/view (SessionSnapshot): latest 80 messages + cursor, characters, plugins,
    latest 600 trace events, event cursor, submitted interactions, public dimensions."""
    # The event cursor is read first: an event committed after it is replayed by the subscription.
    fresh = Session.objects.get(pk=session.pk)
    cursor = event_cursor(fresh)
    page = messages_page(fresh, limit=VIEW_MESSAGES)
    turn_ids = {m["turnId"] for m in page["items"] if m.get("turnId")}
    for m in page["items"]:
        block = m.get("block")
        if isinstance(block, dict) and isinstance((block.get("meta") or {}).get("turnId"), str):
            turn_ids.add(block["meta"]["turnId"])
    submitted = [
        {"turnId": r.turn_id, "interactionId": r.interaction_id, "values": r.answer}
        for r in InteractionRecord.objects.filter(session=fresh, turn_id__in=turn_ids, answer__isnull=False).order_by("id")
    ]
    steps = list(TraceEvent.objects.filter(session=fresh).order_by("-id")[:VIEW_TRACE_EVENTS])
    steps.reverse()
    runnable, _ = runnable_plugins(fresh, registry)
    return {
        "session": session_out(fresh),
        "messages": page["items"],
        "messagesCursor": page["nextCursor"],
        "characters": characters_list(fresh),
        "plugins": runnable,
        "pluginData": plugin_data_visible(fresh, plugin_ids=runnable),
        "executionSteps": [trace_event_out(e, i) for i, e in enumerate(steps)],
        "eventCursor": cursor,
        "submittedInteractions": submitted,
        "dimensions": dimensions_public(fresh),
        "dimensionSettlements": [],
    }
