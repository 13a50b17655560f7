"""The session view (spec 004 GET /api/sessions/:id/view, SessionSnapshot): what a client needs to
draw a session at once — the session, the latest messages, characters, plugins and their public
data, the latest trace events and the event cursor to subscribe from.
"""
from __future__ import annotations

from typing import Any

from covel import jsontext
from plugins_app.selectors_plugin_data import plugin_data_visible
from sessions.models import Session
from sessions.selectors import (
    VIEW_MESSAGES,
    VIEW_TRACE_EVENTS,
    characters_list,
    dimensions_public,
    event_cursor,
    messages_page,
    runnable_plugins,
    session_out,
)
from turns.engine import settlements as S
from turns.engine.trace import STEP_FIELDS, prompt_digest
from turns.models import InteractionRecord, TraceEvent
from turns.selectors_records import trace_summary


def session_view(session: Session, registry) -> dict[str, Any]:
    """GET /api/sessions/:id/view (SessionSnapshot): latest 80 messages + cursor, characters, plugins,
    their visible plugin data (without the dimension provider's settlement receipts, summarised in
    dimensionSettlements), latest 600 trace events, event cursor, submitted interactions, public
    dimensions."""
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
    dimension_view = dimension_provider_view(fresh, registry, runnable)
    # The provider's settlement receipts are the kernel's bookkeeping (written only by the
    # dimension.update applier): the view carries their public summaries as dimensionSettlements
    # and, as spec 004 §GET /view says, not the full receipts; GET /api/sessions/:id/plugin-data keeps them.
    provider = dimension_view.get("dimensionProviderPluginId")
    plugin_data = [row for row in plugin_data_visible(fresh, plugin_ids=runnable)
                   if not (row["pluginId"] == provider and row["namespace"] == S.SETTLEMENTS_NAMESPACE)]
    return {
        "session": session_out(fresh),
        "messages": page["items"],
        "messagesCursor": page["nextCursor"],
        "characters": characters_list(fresh),
        "plugins": runnable,
        "pluginData": plugin_data,
        "executionSteps": steps,
        "eventCursor": cursor,
        "submittedInteractions": submitted,
        "dimensions": dimensions_public(fresh),
        **dimension_view,
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


# The view's timeline. A trace event's payload is for detailed inspection (tool arguments and
# results, model text, prompts): in the builtin game that is ~85% of the bytes of the latest 600
# events even without the prompts, and reading it means decompressing every prompt. The view's
# executionSteps carry what the timeline draws, the event's summary (spec 004 §Trace 调试
# diagnostic), read from the row's ``summary`` column; GET /api/traces/:sessionId (and /turns/page)
# keep every payload unchanged for the detail a client opens on demand.
PROMPT_EVENT = "llm.calling"


def _view_steps_load(session: Session) -> list[dict[str, Any]]:
    """The view steps (view_step) of the latest VIEW_TRACE_EVENTS trace rows, oldest first, from
    each row's ``summary``. A row written before summaries existed has it made from its payload,
    picked by the database's JSON functions (only the STEP_FIELDS, and the prompt's message count),
    so bodies and prompts never leave the database."""
    from django.db import connection, models
    from django.db.models.expressions import RawSQL

    if connection.vendor == "postgresql":
        pick_sql = ("CASE WHEN summary IS NULL THEN (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb) "
                    "FROM jsonb_each(CASE WHEN jsonb_typeof(payload) = 'object' THEN payload ELSE '{}'::jsonb END) AS e "
                    "WHERE e.key = ANY(%s)) END")
        count_sql = ("CASE WHEN summary IS NULL AND jsonb_typeof(payload -> 'messages') = 'array' "
                     "THEN jsonb_array_length(payload -> 'messages') ELSE NULL END")
        params: tuple = (list(STEP_FIELDS) + ["promptDigest"],)
        summary_sql = "summary::text"
        # The spec's timestamp made by the database: Django's timestamptz loader parses in Python,
        # 10 µs a value, a fifth of a hosted view. MS truncates, as covel.times.iso does.
        timestamp_sql = "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
    else:
        marks = ", ".join("%s" for _ in range(len(STEP_FIELDS) + 1))
        pick_sql = ("CASE WHEN summary IS NULL THEN (SELECT json_group_object(e.key, CASE "
                    "WHEN e.type IN ('object', 'array') THEN json(e.value) WHEN e.type = 'true' THEN json('true') "
                    "WHEN e.type = 'false' THEN json('false') ELSE e.value END) FROM json_each(CASE "
                    f"WHEN json_type(payload) = 'object' THEN payload ELSE '{{}}' END) AS e WHERE e.key IN ({marks})) END")
        count_sql = ("CASE WHEN summary IS NULL AND json_type(payload, '$.messages') = 'array' "
                     "THEN json_array_length(payload, '$.messages') ELSE NULL END")
        params = (*STEP_FIELDS, "promptDigest")
        summary_sql = "summary"
        # The spec's timestamp made by SQLite from the stored naive-UTC text (``YYYY-MM-DD
        # HH:MM:SS[.ffffff]``, str(datetime) as Django's SQLite backend writes it; no fraction when
        # the microseconds are 0): Django's datetime converter and covel.times.iso cost a fifth of
        # an embedded view. Milliseconds truncated, as covel.times.iso does.
        timestamp_sql = ("substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || CASE WHEN "
                         "length(created_at) > 19 THEN substr(created_at, 20, 4) ELSE '.000' END || 'Z'")
    # The summaries come as JSON text and are decoded in one json.loads of the whole window: a
    # JSONField decodes row by row through Django's converters, a third of the view's time.
    rows = list(TraceEvent.objects.filter(session=session).order_by("-id")
                .annotate(summary_text=RawSQL(summary_sql, (), output_field=models.TextField()),
                          timestamp=RawSQL(timestamp_sql, (), output_field=models.TextField()),
                          picked=RawSQL(pick_sql, params, output_field=models.TextField()),
                          message_count=RawSQL(count_sql, (), output_field=models.IntegerField()))
                .values_list("id", "type", "turn_id", "runtime_id", "plugin_id", "timestamp", "summary_text", "picked",
                             "message_count")
                [:VIEW_TRACE_EVENTS])
    rows.reverse()
    summaries = jsontext.loads("[" + ",".join(row[6] or "null" for row in rows) + "]")
    steps = []
    for (pk, event_type, turn_id, runtime_id, plugin_id, timestamp, _, picked, message_count), summary in zip(rows, summaries):
        if not isinstance(summary, dict):  # an older row: its summary from the picked fields
            picked = jsontext.loads(picked) if isinstance(picked, str) else picked
            summary = picked if isinstance(picked, dict) else {}
            if event_type == PROMPT_EVENT and message_count is not None:
                summary["messageCount"] = message_count
                if "promptDigest" not in summary:
                    summary["promptDigest"] = prompt_digest(TraceEvent.objects.get(pk=pk).payload.get("messages"))
        steps.append(view_step(pk, event_type, turn_id, runtime_id, plugin_id, timestamp, summary))
    return view_steps_closers_trim(steps)


#: closing step type -> (its opening step type, the fields it leaves out when the opening step in
#: the window says the same). A closing step with an error keeps everything.
STEP_CLOSERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "runtime.completed": ("runtime.started", ("stage",)),
    "llm.responded": ("llm.calling", ("provider", "model", "slot")),
    "tool.completed": ("tool.calling", ("tool",)),
}
_STEP_OPENER_ENDS = {"runtime.failed": "runtime.started", "runtime.skipped": "runtime.started",
                     "tool.failed": "tool.calling"}


def view_steps_closers_trim(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out of each closing step (STEP_CLOSERS: runtime.completed, llm.responded,
    tool.completed) the fields its opening step in the same window already carries with the same
    value (the stage of a runtime; the provider, model and slot of a model call; the tool of a
    call), so a timeline reads them from the pair. The view's 600 steps are most of its bytes; GET
    /api/traces keeps each event whole. The opening step is the same turn's and runtime's latest
    open one of that type; a tool.completed is paired only while its runtime has one tool call
    open (parallel calls of one runtime keep their ``tool``). ``steps``: view_step dicts, oldest
    first; trimmed in place and returned."""
    open_steps: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    opener_types = {opener for opener, _ in STEP_CLOSERS.values()}
    for step in steps:
        kind, runtime_id = step["type"], step.get("runtimeId")
        if not isinstance(runtime_id, str):
            continue
        if kind in opener_types:
            open_steps.setdefault((step["turnId"], runtime_id, kind), []).append(step)
            continue
        rule = STEP_CLOSERS.get(kind)
        opener_type = rule[0] if rule else _STEP_OPENER_ENDS.get(kind)
        if opener_type is None:
            continue
        opened = open_steps.get((step["turnId"], runtime_id, opener_type))
        if not opened:
            continue
        opener = opened.pop()
        if opener_type == "tool.calling" and opened:
            continue  # parallel tool calls: which one ended is in the trace payload, not here
        if rule and step.get("severity") != "error":
            for key in rule[1]:
                if key in step and key in opener and step[key] == opener[key]:
                    del step[key]
    return steps


def view_step(pk: int, event_type: str, turn_id: str, runtime_id: str | None, plugin_id: str | None,
              timestamp: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One entry of the view's ``executionSteps``: ``{id, type, turnId, timestamp}`` (the trace row's
    id, as in GET /api/traces) plus the event's summary flattened — runtimeId, pluginId (left out
    when the runtimeId already names it: ``<pluginId>`` or ``<pluginId>/<name>``), stage,
    operation, provider, model, slot, attempt, durationMs, startedAt (only when it is not the
    step's own timestamp to the millisecond), tool, when the event has them; ``severity`` only
    when not ``info``, with ``error`` {message, code?, details?} or ``warning`` (slow calls:
    {code: "slow", thresholdMs: 1000}); llm.calling also ``messageCount`` and ``promptDigest``
    (first 16 hex digits of the prompt's SHA-256). A closing step leaves out what its opening step
    says (view_steps_closers_trim). The payload itself is in GET /api/traces/:sessionId under the
    same id. ``fields``: the row's summary
    (turns.engine.trace.trace_step_summary)."""
    summary = trace_summary(event_type, fields, runtime_id, plugin_id)
    step: dict[str, Any] = {"id": str(pk), "type": event_type, "turnId": turn_id, "timestamp": timestamp}
    severity = summary.pop("severity")
    summary.pop("displayType", None)
    summary.pop("prompt", None)
    runtime_id, plugin_id = summary.get("runtimeId"), summary.get("pluginId")
    if isinstance(runtime_id, str) and isinstance(plugin_id, str) and (
            runtime_id == plugin_id or runtime_id.startswith(plugin_id + "/")):
        del summary["pluginId"]
    step.update((k, v) for k, v in summary.items() if v != "")  # e.g. model "" before a provider names one
    started = step.get("startedAt")
    if isinstance(started, str) and started[:23] == timestamp[:23]:
        del step["startedAt"]  # llm.calling is stamped when the call starts: the timestamp already says it
    if severity != "info":
        step["severity"] = severity
    if event_type == PROMPT_EVENT:
        for key in ("messageCount", "promptDigest"):
            if key in fields:
                step[key] = fields[key]
    return step
