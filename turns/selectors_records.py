"""Reads of the turn engine's records for observers (spec 004 §Trace 调试, §会话快照 GET /turns,
§统一翻译层). The engine writes these rows (turns/models.py); this module only shapes them.
"""
from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from sessions.errors import InvalidCursor
from covel.times import iso
from turns.models import InteractionRecord, RuntimeOutput, TraceEvent, TurnResult

TRACE_WINDOW_MAX = 5000
TRACE_PAGE_DEFAULT, TRACE_PAGE_MAX = 400, 500
TURNS_LIMIT_MAX = 500
RECORDS_LIMIT_DEFAULT, RECORDS_LIMIT_MAX = 100, 500
SLOW_MS = 1000
_DIAGNOSTIC_KEYS = ("runtimeId", "pluginId", "stage", "operation", "provider", "model", "slot", "attempt",
                    "durationMs", "startedAt", "tool")
# io.concealed runtimes: their outputs and tool arguments/results never leave the server.
CONCEALED_SUMMARY = "(concealed)"


def trace_cursor_encode(pk: int) -> str:
    raw = json.dumps({"v": 1, "i": pk}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def trace_cursor_decode(cursor: str) -> int:
    """Raises InvalidCursor (400 invalid_cursor) for anything not issued by trace_cursor_encode."""
    try:
        data = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()).decode())
        if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("i"), int) or isinstance(data["i"], bool):
            raise ValueError
        return data["i"]
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor() from None


def trace_diagnostic(event: TraceEvent) -> dict[str, Any]:
    """The ``diagnostic`` summary of a trace event (spec 004 §Trace 调试); see trace_summary."""
    return trace_summary(event.type, event.payload, event.runtime_id, event.plugin_id)


def trace_summary(event_type: str, payload: Any, runtime_id: str | None, plugin_id: str | None) -> dict[str, Any]:
    """The ``diagnostic`` of one trace event from its type, payload and row columns: displayType and
    severity always; runtimeId, pluginId, stage, operation, provider, model, slot, attempt,
    durationMs, startedAt, tool from the payload's top level (the row's runtime/plugin columns when
    the payload has none); error {message, ...} or warning (a runtime warning, or {code: "slow",
    thresholdMs: 1000} for a call of 1000 ms or more); prompt when the payload carries its messages."""
    payload = payload if isinstance(payload, dict) else {}
    out: dict[str, Any] = {"displayType": event_type}
    for key in _DIAGNOSTIC_KEYS:
        if key in payload:
            out[key] = payload[key]
    if runtime_id and "runtimeId" not in out:
        out["runtimeId"] = runtime_id
    if plugin_id and "pluginId" not in out:
        out["pluginId"] = plugin_id
    severity = "info"
    error = payload.get("error")
    if error:
        severity = "error"
        out["error"] = error if isinstance(error, dict) else {"message": str(error)}
    elif isinstance(payload.get("warning"), dict):  # runtime.warning notices (turns.engine.trace.RUNTIME_WARNING)
        severity = "warning"
        out["warning"] = payload["warning"]
    elif isinstance(payload.get("durationMs"), (int, float)) and payload["durationMs"] >= SLOW_MS:
        severity = "warning"
        out["warning"] = {"code": "slow", "thresholdMs": SLOW_MS}
    if isinstance(payload.get("messages"), list):
        out["prompt"] = {"contentAvailable": True, "contentPath": "payload.messages"}
    out["severity"] = severity
    return out


def trace_event_out(event: TraceEvent, order: int) -> dict[str, Any]:
    """One trace event in the spec's shape (id, type, requestId, traceId, flowId, seq, eventOrder ...)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    request_id = payload.get("requestId")
    return {
        "id": str(event.id), "type": event.type, "requestId": request_id if isinstance(request_id, str) else "",
        "traceId": event.trace_id, "sessionId": event.session_id, "turnId": event.turn_id, "flowId": event.trace_id,
        "seq": event.seq, "eventOrder": order, "timestamp": iso(event.created_at), "diagnostic": trace_diagnostic(event),
        "payload": event.payload,
    }


def traces_window(session, *, limit: int, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """The newest ``limit`` events older than ``cursor``, oldest first, and the cursor of the page's
    oldest event when older events exist (else None)."""
    qs = TraceEvent.objects.filter(session=session)
    if cursor:
        qs = qs.filter(id__lt=trace_cursor_decode(cursor))
    rows = list(qs.order_by("-id")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    return [trace_event_out(e, i) for i, e in enumerate(rows)], (trace_cursor_encode(rows[0].id) if has_more and rows else None)


def turns_group(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group events by turnId in first-seen order: ``{turnId, flowId, traceId, startedAt,
    completedAt, eventCount, events}``."""
    groups: dict[str, dict[str, Any]] = {}
    for event in events:
        group = groups.setdefault(event["turnId"], {"turnId": event["turnId"], "flowId": event["flowId"],
                                                     "traceId": event["traceId"], "startedAt": event["timestamp"],
                                                     "completedAt": event["timestamp"], "eventCount": 0, "events": []})
        group["completedAt"] = event["timestamp"]
        group["eventCount"] += 1
        group["events"].append(event)
    return list(groups.values())


def discovery(session, registry) -> dict[str, Any]:
    """The session's plugin/runtime discovery snapshot used by the debug page for names."""
    from sessions.selectors import runnable_plugins

    runnable, _ = runnable_plugins(session, registry)
    plugins = []
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        plugins.append({"id": plugin_id, "displayName": record.manifest.display_name or plugin_id,
                        "runtimes": [{"id": r.id, "stage": r.stage, "runtimeType": r.runtime_type} for r in record.manifest.runtimes]})
    return {"sessionId": session.id, "plugins": plugins}


def _is_concealed(registry, runtime_id: str) -> bool:
    runtime = registry.runtime(runtime_id) if runtime_id else None
    return bool(runtime and runtime.is_concealed)


def turn_result_out(row: TurnResult, registry) -> dict[str, Any]:
    """A persisted turn (turn_results) with commitStatus and origin; concealed runtimes' output and
    tool arguments/results are cleared."""
    summary = row.summary if isinstance(row.summary, dict) else {}
    runtime_results = []
    for result in summary.get("runtimeResults") or []:
        if not isinstance(result, dict):
            continue
        result = dict(result)
        if _is_concealed(registry, str(result.get("runtimeId") or "")):
            result["output"] = None
            result["toolCalls"] = [{**c, "input": None, "output": None} for c in result.get("toolCalls") or [] if isinstance(c, dict)]
            result["operations"] = [{k: v for k, v in op.items() if k not in ("request", "result")} | {"summary": CONCEALED_SUMMARY}
                                    for op in result.get("operations") or [] if isinstance(op, dict)]
        runtime_results.append(result)
    out = {**{k: v for k, v in summary.items() if k != "runtimeResults"},
           "turnId": row.turn_id, "origin": row.origin, "commitStatus": "committed" if row.committed else "failed",
           "createdAt": iso(row.created_at), "runtimeResults": runtime_results}
    if row.abort_reason:
        out["abortReason"] = row.abort_reason
    if row.player_turn_index is not None:
        out["playerTurnIndex"] = row.player_turn_index
    return out


def turn_results_list(session, registry, *, limit: int) -> list[dict[str, Any]]:
    rows = list(TurnResult.objects.filter(session=session).order_by("-id")[:limit])
    rows.reverse()
    return [turn_result_out(r, registry) for r in rows]


def runtime_output_out(row: RuntimeOutput, registry) -> dict[str, Any]:
    """RuntimeOutput (spec 004 §统一翻译层) from the engine's row (``output`` holds results/metaData)."""
    output = row.output if isinstance(row.output, dict) else {}
    results = output.get("results")
    if not isinstance(results, list):
        text = output.get("text")
        results = [{"text": text}] if isinstance(text, str) else []
    meta = dict(output.get("metaData") or {})
    meta.setdefault("turn", output.get("turn", 0))
    out: dict[str, Any] = {"id": row.output_id, "sessionId": row.session_id, "turnId": row.turn_id, "pluginId": row.plugin_id,
                           "runtimeId": row.runtime_id, "timestamp": iso(row.created_at), "status": row.status,
                           "results": results, "metaData": meta}
    if output.get("runtimeResultId"):
        out["runtimeResultId"] = output["runtimeResultId"]
    if _is_concealed(registry, row.runtime_id):
        out["results"] = []
        if isinstance(meta.get("toolCallList"), list):
            meta["toolCallList"] = [{**c, "input": None, "output": None} for c in meta["toolCallList"] if isinstance(c, dict)]
    return out


def runtime_outputs_list(session, registry, *, runtime_id: str | None, plugin_id: str | None, since: datetime | None,
                         limit: int) -> list[dict[str, Any]]:
    """Newest first; filters ``runtimeId``, ``pluginId``, ``since`` (created at or after)."""
    qs = RuntimeOutput.objects.filter(session=session)
    if runtime_id:
        qs = qs.filter(runtime_id=runtime_id)
    if plugin_id:
        qs = qs.filter(plugin_id=plugin_id)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    return [runtime_output_out(r, registry) for r in qs.order_by("-created_at", "-id")[:limit]]


def runtime_output_get(session, output_id: str) -> RuntimeOutput | None:
    return RuntimeOutput.objects.filter(session=session, output_id=output_id).first()


def full_prompt(session, output: RuntimeOutput) -> dict[str, Any]:
    """Best-effort message history at the time of the call, rebuilt from turn_messages: every
    prompt-history row up to the output's turn (no system prompt, no injected segments)."""
    from sessions.models import TurnMessage

    last = TurnMessage.objects.filter(session=session, turn_id=output.turn_id).order_by("-id").values_list("id", flat=True).first()
    qs = TurnMessage.objects.filter(session=session)
    qs = qs.filter(id__lte=last) if last is not None else qs.filter(created_at__lte=output.created_at)
    messages = []
    for row in qs.order_by("id"):
        content = row.content
        if isinstance(content, dict) and set(content) <= {"content", "role", "toolCalls", "toolCallId", "name"} and "content" in content:
            content = content["content"]
        messages.append({"role": row.role, "content": content, "turnId": row.turn_id, "runtimeId": row.runtime_id})
    return {"outputId": output.output_id, "sessionId": session.id, "turnId": output.turn_id, "messages": messages,
            "approximate": True}


def interaction_record_out(row: InteractionRecord) -> dict[str, Any]:
    """InteractionRecord (spec 004 §统一翻译层) of one external-input row (status ``input``, written
    by the turn commit: turns.engine.appliers.interaction.interaction_inputs_record)."""
    spec = row.spec if isinstance(row.spec, dict) else {}
    out: dict[str, Any] = {
        "id": row.interaction_id, "sessionId": row.session_id, "turnId": row.turn_id or None,
        "timestamp": iso(row.created_at),
        "source": spec.get("source") if spec.get("source") in ("player", "plugin-ui", "external-api") else "player",
        "channel": spec.get("channel") if spec.get("channel") in ("web", "cli", "api", "external") else "web",
        "type": row.type,
        "payload": spec.get("payload"),
    }
    if row.plugin_id:
        out["targetPluginId"] = row.plugin_id
    if row.runtime_id:
        out["targetRuntimeId"] = row.runtime_id
    if isinstance(spec.get("metaData"), dict):
        out["metaData"] = spec["metaData"]
    return out


def interaction_records_list(session, *, record_type: str | None, source: str | None, target_plugin_id: str | None,
                             limit: int) -> list[dict[str, Any]]:
    """Newest first; filters ``type``, ``source``, ``targetPluginId``."""
    out = []
    qs = InteractionRecord.objects.filter(session=session, status=InteractionRecord.STATUS_INPUT)
    if target_plugin_id:
        qs = qs.filter(plugin_id=target_plugin_id)
    if record_type:
        qs = qs.filter(type=record_type)
    for row in qs.order_by("-created_at", "-id"):
        item = interaction_record_out(row)
        if source and item["source"] != source:
            continue
        out.append(item)
        if len(out) >= limit:
            break
    return out
