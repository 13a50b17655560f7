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
from turns.engine import settlements as S
from turns.engine.trace import prompt_digest
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
    # values: the saved (normalised) values of the answer (spec 004 §恢复会话 submittedInteractions).
    submitted = [
        {"turnId": r.turn_id, "interactionId": r.interaction_id,
         "values": r.answer.get("values", r.answer) if isinstance(r.answer, dict) else r.answer}
        for r in InteractionRecord.objects.filter(session=fresh, turn_id__in=turn_ids, status=InteractionRecord.STATUS_ANSWERED,
                                                  answer__isnull=False).order_by("id")
    ]
    steps = _view_steps_load(fresh)
    runnable, _ = runnable_plugins(fresh, registry)
    return {
        "session": session_out(fresh),
        "messages": page["items"],
        "messagesCursor": page["nextCursor"],
        "characters": characters_list(fresh),
        "plugins": runnable,
        "pluginData": plugin_data_visible(fresh, plugin_ids=runnable),
        "executionSteps": [view_step(trace_event_out(e, i)) for i, e in enumerate(steps)],
        "eventCursor": cursor,
        "submittedInteractions": submitted,
        "dimensions": dimensions_public(fresh),
        **dimension_provider_view(fresh, registry, runnable),
    }


def dimension_provider_view(session: Session, registry, runnable: list[str]) -> dict[str, Any]:
    """The view's ``dimensionProviderPluginId`` (the provider bound in the session's metadata, else
    the first active plugin providing world.dimensions@1), ``dimensionRecovery`` ``{editorRuntimeId,
    trackerRuntimeId}`` (only when that provider runs and has both runtimes) and
    ``dimensionSettlements`` (its receipts' public summaries, by source turn number; see
    turns.engine.settlements). A provider bound but not running keeps its id and receipts and
    loses dimensionRecovery (the dimensions are paused)."""
    from plugins_app.models import PluginData

    provider = S.provider_plugin_id(session.active_plugins, registry,
                                     bound=(session.metadata or {}).get("dimensionProviderPluginId"))
    running = provider is not None and provider in runnable
    out: dict[str, Any] = {"dimensionSettlements": []}
    if provider is None:
        return out
    out["dimensionProviderPluginId"] = provider
    if running:
        ids = {r.id for r in registry.get(provider).manifest.runtimes}
        editor, tracker = f"{provider}/{S.EDITOR_RUNTIME}", f"{provider}/{S.TRACKER_RUNTIME}"
        if editor in ids and tracker in ids:
            out["dimensionRecovery"] = {"editorRuntimeId": editor, "trackerRuntimeId": tracker}
    rows = PluginData.objects.filter(session=session, plugin_id=provider, namespace=S.SETTLEMENTS_NAMESPACE).order_by("id")
    summaries = [s for s in (S.receipt_summary(r.value) for r in rows) if s is not None]
    summaries.sort(key=lambda s: (s["source"]["turnNumber"] if isinstance(s["source"]["turnNumber"], int) else 0))
    out["dimensionSettlements"] = summaries
    return out


# llm.calling carries the whole prompt of every model call — about 85% of a view's bytes in the
# builtin game (2.1 MB at turn 10). The view's timeline needs the call, not the prompt: it gets the
# message count and a digest, and GET /api/traces/:sessionId keeps the full prompt.
PROMPT_EVENT = "llm.calling"


def _view_steps_load(session: Session) -> list[TraceEvent]:
    """The latest VIEW_TRACE_EVENTS trace rows, oldest first, with llm.calling's ``messages`` left in
    the database: the payload is read without them (JSON functions of SQLite / PostgreSQL), and
    ``messageCount`` comes along, so a view never loads the prompts it does not return."""
    from django.db import connection, models
    from django.db.models.expressions import RawSQL

    if connection.vendor == "postgresql":
        slim_sql = "CASE WHEN type = %s THEN payload - 'messages' ELSE payload END"
        count_sql = ("CASE WHEN jsonb_typeof(payload -> 'messages') = 'array' "
                     "THEN jsonb_array_length(payload -> 'messages') ELSE NULL END")
    else:
        slim_sql = "CASE WHEN type = %s THEN json_remove(payload, '$.messages') ELSE payload END"
        count_sql = ("CASE WHEN json_type(payload, '$.messages') = 'array' "
                     "THEN json_array_length(payload, '$.messages') ELSE NULL END")
    rows = list(TraceEvent.objects.filter(session=session).order_by("-id").defer("payload")
                .annotate(slim=RawSQL(slim_sql, (PROMPT_EVENT,), output_field=models.JSONField()),
                          message_count=RawSQL(count_sql, (), output_field=models.IntegerField()))
                [:VIEW_TRACE_EVENTS])
    rows.reverse()
    for row in rows:
        payload = row.slim if isinstance(row.slim, dict) else {}
        if row.type == PROMPT_EVENT and row.message_count is not None:
            payload = {**payload, "messageCount": row.message_count}
            if "promptDigest" not in payload:  # a row written before digests were stored
                payload["promptDigest"] = prompt_digest(TraceEvent.objects.get(pk=row.pk).payload.get("messages"))
        row.payload = payload
    return rows


def view_step(event: dict[str, Any]) -> dict[str, Any]:
    """A trace event as the view lists it: llm.calling without ``payload.messages``, with
    ``messageCount`` and ``promptDigest`` (first 16 hex digits of the prompt's SHA-256) instead;
    every other event unchanged."""
    payload = event.get("payload")
    if event.get("type") != PROMPT_EVENT or not isinstance(payload, dict) or "messages" not in payload:
        return event
    messages = payload["messages"]
    slim = {k: v for k, v in payload.items() if k != "messages"}
    slim.update(messageCount=len(messages) if isinstance(messages, list) else 0, promptDigest=prompt_digest(messages))
    return {**event, "payload": slim}

