"""Event system endpoints (spec 004 §事件系统): GET /api/events/stream and POST /api/events/emit.

The streaming machinery lives in ``turns.event_stream``; the log in ``turns.events``.
"""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from ninja import Router

from covel.errors import ApiError, Conflict, Forbidden, error_response
from covel.openapi import OWNER, SESSION_ERRORS, contract, errors_merge
from covel.ratelimit import RateLimitExceeded, rate_limit_hit
from turns import event_stream
from turns.events import TOPIC_GAME, TYPE_EVENT_EMITTED, NewEvent, cursor_parse, session_events_append
from turns.schemas import EventEmitIn, EventEmitOut, EventStreamQuery

router = Router(tags=["events"])


def stream_cursor_choose(query: str | None, header: str | None) -> str | None:
    """The cursor a stream resumes from. ``?lastEventId=`` wins, except that the browser's
    ``Last-Event-ID`` header wins once it is past the URL's cursor in the same epoch: an EventSource
    keeps its URL across automatic reconnects, so without this rule every reconnect would replay
    everything since the page first opened the stream (duplicates)."""
    query, header = (query or "").strip() or None, (header or "").strip() or None
    if query and header:
        from_query, from_header = cursor_parse(query), cursor_parse(header)
        if from_query and from_header and from_query.epoch == from_header.epoch and from_header.seq > from_query.seq:
            return header
    return query or header


@router.get("/events/stream", include_in_schema=True, summary="SSE stream of a session's events")
@contract(query=EventStreamQuery, security=OWNER, stream=(
    "Named-event SSE stream of the session: `event: <type>`, `id: <epoch>:<seq>`, `data: SubscriptionEvent`; "
    "`: keep-alive` comments while idle"), errors=errors_merge(SESSION_ERRORS, {
    400: "sessionId required / Invalid topics", 429: "rate_limit_exceeded (with Retry-After) / connection_limit_exceeded / "
    "global_connection_limit_exceeded"}))
async def stream_events(request):
    """Named-event SSE stream of one session (spec 004 §事件系统, §SSE 协议).

    Query: ``sessionId`` (required), ``topics`` (comma-separated SubscriptionTopics; all when
    absent), ``lastEventId`` (cursor ``<epoch>:<seq>``; see stream_cursor_choose for the
    ``Last-Event-ID`` header). Errors: 429 rate_limit_exceeded (RATE_LIMIT_RPM stream opens a minute
    per client address and session, counted per deployment when hosted, with Retry-After);
    400 ``sessionId required`` / ``Invalid topics: …``; 404 session_not_found; 401 per tier;
    429 connection_limit_exceeded / global_connection_limit_exceeded.
    """
    if request.resolver_match is not None:
        # The list of URL patterns tried before this one (~6 KB with every router mounted) lives as
        # long as the request, i.e. the whole stream; only 404 debug pages read it.
        request.resolver_match.tried = None
    session_id = (request.GET.get("sessionId") or "").strip()
    try:
        # Counted per (client, session): many players behind one NAT each open their own sessions'
        # streams; one client hammering one session is what the limit is for (issue: 80 of 200
        # subscribers behind one address got 429).
        await sync_to_async(rate_limit_hit, thread_sensitive=False)(
            request, "event-stream", per_minute=settings.RATE_LIMIT_RPM, key=session_id[:200])
    except RateLimitExceeded as exc:
        response = error_response(exc.status, exc.message, exc.code, exc.details)
        response["Retry-After"] = str(exc.retry_after_seconds)
        return response
    if not session_id:
        raise ApiError(400, None, "sessionId required")
    topics = event_stream.topics_parse(request.GET.get("topics"))
    raw_cursor = stream_cursor_choose(request.GET.get("lastEventId"), request.headers.get("Last-Event-ID"))
    start = await sync_to_async(event_stream.stream_start)(request, session_id, raw_cursor)
    slot = await sync_to_async(event_stream.connection_registry.acquire, thread_sensitive=False)(start.session_id)
    return event_stream.EventStreamResponse(start, topics, slot, request)


@router.post("/events/emit", summary="Inject an external event into a session's stream")
@contract(ok=EventEmitOut, body=EventEmitIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "topic / sessionId missing, payload not an object", 403: "event injection is disabled (demo/commercial "
    "without ENABLE_DEBUG_PAGE)", 409: "session_not_active"}))
def emit_event(request):
    """Append ``event.emitted`` (topic ``game``, payload ``{"topic", "data"}``) to a session's log
    (spec 004 §事件系统 POST /api/events/emit). Does not trigger runtimes.

    Body: ``{"topic": str, "sessionId": str, "payload"?: object}``. Returns ``{"ok": true, "id":
    "<epoch>:<seq>"}`` (the SubscriptionEvent id). Errors: 400 missing/invalid fields; 403 in the
    demo/commercial tiers unless ENABLE_DEBUG_PAGE; 404 session_not_found; 401 per tier;
    409 session_not_active.
    """
    from sessions.auth import session_get_authorized
    from sessions.models import Session

    body = getattr(request, "covel_json", None) or {}
    topic, session_id, payload = body.get("topic"), body.get("sessionId"), body.get("payload", {})
    if not isinstance(topic, str) or not topic.strip():
        raise ApiError(400, None, "topic is required and must be a string")
    if not isinstance(session_id, str) or not session_id.strip():
        raise ApiError(400, None, "sessionId is required and must be a string")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise ApiError(400, None, "payload must be an object")
    if settings.DEPLOYMENT_TIER in ("demo", "commercial") and not settings.ENABLE_DEBUG_PAGE:
        raise Forbidden(message="Event injection is disabled in production")
    with transaction.atomic():
        session = session_get_authorized(request, session_id, for_update=True)
        if session.status != Session.STATUS_ACTIVE:
            raise Conflict(code="session_not_active", message=f"Session is not active ({session.status})")
        (row,) = session_events_append(
            session.pk, [NewEvent(type=TYPE_EVENT_EMITTED, topic=TOPIC_GAME, payload={"topic": topic, "data": payload})]
        )
    return {"ok": True, "id": f"{session.event_epoch}:{row.seq}"}
