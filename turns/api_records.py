"""Read endpoints over the turn engine's records (spec 004 §Trace 调试, GET /api/sessions/:id/turns,
§统一翻译层 runtime-outputs / interaction-records). All session-scoped: ``auth=session_scope``."""
from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django.http import HttpRequest
from ninja import Router

from sessions.api_scope import session_scope
from covel.openapi import OWNER, SESSION_ERRORS, contract, errors_merge
from plugins_app.registry import plugin_registry
from sessions.errors import InvalidRequest, OutputNotFound
from turns import selectors_records as records
from turns.schemas import (CursorQuery, FullPromptOut, InteractionRecordsOut, InteractionRecordsQuery, LimitQuery,
                           RuntimeOutputOut, RuntimeOutputsOut, RuntimeOutputsQuery, TracePageQuery, TracesOut,
                           TraceTurnsOut, TurnResultsOut)

router = Router(tags=["records"])


def _limit(request: HttpRequest, default: int, maximum: int) -> int:
    raw = request.GET.get("limit")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(code="invalid_query", message="limit must be an integer") from None
    if value < 1:
        raise InvalidRequest(code="invalid_query", message="limit must be at least 1")
    return min(value, maximum)


@router.get("/traces/{session_id}", auth=session_scope)
@contract(ok=TracesOut, query=CursorQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_traces(request: HttpRequest, session_id: str):
    """Newest ≤5000 events (oldest first); ``?cursor`` reads older ones; discovery only without cursor."""
    cursor = request.GET.get("cursor") or None
    events, next_cursor = records.traces_window(request.auth, limit=records.TRACE_WINDOW_MAX, cursor=cursor)
    body = {"sessionId": session_id, "count": len(events), "events": events, "nextCursor": next_cursor}
    if cursor is None:
        body["discovery"] = records.discovery(request.auth, plugin_registry())
    return body


@router.get("/traces/{session_id}/turns", auth=session_scope)
@contract(ok=TraceTurnsOut, query=CursorQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_trace_turns(request: HttpRequest, session_id: str):
    cursor = request.GET.get("cursor") or None
    events, next_cursor = records.traces_window(request.auth, limit=records.TRACE_WINDOW_MAX, cursor=cursor)
    body = {"sessionId": session_id, "turns": records.turns_group(events), "nextCursor": next_cursor}
    if cursor is None:
        body["discovery"] = records.discovery(request.auth, plugin_registry())
    return body


@router.get("/traces/{session_id}/turns/page", auth=session_scope)
@contract(ok=TraceTurnsOut, query=TracePageQuery, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_trace_turns_page(request: HttpRequest, session_id: str):
    """``?limit`` events (default 400, max 500) grouped by turn; ``nextCursor`` = page's oldest event."""
    cursor = request.GET.get("cursor") or None
    limit = _limit(request, records.TRACE_PAGE_DEFAULT, records.TRACE_PAGE_MAX)
    events, next_cursor = records.traces_window(request.auth, limit=limit, cursor=cursor)
    body = {"sessionId": session_id, "turns": records.turns_group(events), "nextCursor": next_cursor}
    if cursor is None:
        body["discovery"] = records.discovery(request.auth, plugin_registry())
    return body


@router.get("/sessions/{session_id}/turns", auth=session_scope)
@contract(ok=TurnResultsOut, query=LimitQuery, security=OWNER, errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_session_turns(request: HttpRequest, session_id: str):
    limit = _limit(request, records.TURNS_LIMIT_MAX, records.TURNS_LIMIT_MAX)
    return {"items": records.turn_results_list(request.auth, plugin_registry(), limit=limit)}


@router.get("/sessions/{session_id}/runtime-outputs", auth=session_scope)
@contract(ok=RuntimeOutputsOut, query=RuntimeOutputsQuery, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_runtime_outputs(request: HttpRequest, session_id: str):
    since = None
    if request.GET.get("since"):
        try:
            since = datetime.fromisoformat(request.GET["since"].replace("Z", "+00:00"))
        except ValueError:
            raise InvalidRequest(code="invalid_query", message="since must be an ISO timestamp") from None
        if since.tzinfo is None:
            since = since.replace(tzinfo=dt_timezone.utc)
    items = records.runtime_outputs_list(
        request.auth, plugin_registry(), runtime_id=request.GET.get("runtimeId") or None,
        plugin_id=request.GET.get("pluginId") or None, since=since,
        limit=_limit(request, records.RECORDS_LIMIT_DEFAULT, records.RECORDS_LIMIT_MAX))
    return {"items": items}


@router.get("/sessions/{session_id}/runtime-outputs/{output_id}", auth=session_scope)
@contract(ok=RuntimeOutputOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "output_not_found"}))
def get_runtime_output(request: HttpRequest, session_id: str, output_id: str):
    row = records.runtime_output_get(request.auth, output_id)
    if row is None:
        raise OutputNotFound(output_id)
    return records.runtime_output_out(row, plugin_registry())


@router.get("/sessions/{session_id}/runtime-outputs/{output_id}/full-prompt", auth=session_scope)
@contract(ok=FullPromptOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {404: "output_not_found"}))
def get_runtime_output_full_prompt(request: HttpRequest, session_id: str, output_id: str):
    row = records.runtime_output_get(request.auth, output_id)
    if row is None:
        raise OutputNotFound(output_id)
    return records.full_prompt(request.auth, row)


@router.get("/sessions/{session_id}/interaction-records", auth=session_scope)
@contract(ok=InteractionRecordsOut, query=InteractionRecordsQuery, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, {400: "invalid_query / invalid_cursor"}))
def list_interaction_records(request: HttpRequest, session_id: str):
    items = records.interaction_records_list(
        request.auth, record_type=request.GET.get("type") or None, source=request.GET.get("source") or None,
        target_plugin_id=request.GET.get("targetPluginId") or None,
        limit=_limit(request, records.RECORDS_LIMIT_DEFAULT, records.RECORDS_LIMIT_MAX))
    return {"items": items}
