"""Event system endpoints (spec 004 §事件系统): GET /api/events/stream and POST /api/events/emit.

The streaming machinery lives in ``turns.event_stream``; the log in ``turns.events``.
"""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from ninja import Router

from covel.errors import ApiError, Conflict, Forbidden, error_response
from turns import event_stream
from turns.events import TOPIC_GAME, TYPE_EVENT_EMITTED, NewEvent, session_events_append

router = Router(tags=["events"])


def _client_address(request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


@router.get("/events/stream", include_in_schema=True, summary="SSE stream of a session's events")
async def stream_events(request):
    """Named-event SSE stream of one session (spec 004 §事件系统, §SSE 协议).

    Query: ``sessionId`` (required), ``topics`` (comma-separated SubscriptionTopics; all when
    absent), ``lastEventId`` (cursor ``<epoch>:<seq>``; wins over the ``Last-Event-ID`` header).
    Errors: 429 rate_limit_exceeded (RATE_LIMIT_RPM per client address, with Retry-After);
    400 ``sessionId required`` / ``Invalid topics: …``; 404 session_not_found; 401 per tier;
    429 connection_limit_exceeded / global_connection_limit_exceeded.
    """
    if request.resolver_match is not None:
        # The list of URL patterns tried before this one (~6 KB with every router mounted) lives as
        # long as the request, i.e. the whole stream; only 404 debug pages read it.
        request.resolver_match.tried = None
    try:
        event_stream.rate_limiter.hit(_client_address(request))
    except event_stream.RateLimitExceeded as exc:
        response = error_response(exc.status, exc.message, exc.code, exc.details)
        response["Retry-After"] = str(max(1, round(exc.retry_after_seconds + 0.5)))
        return response
    session_id = (request.GET.get("sessionId") or "").strip()
    if not session_id:
        raise ApiError(400, None, "sessionId required")
    topics = event_stream.topics_parse(request.GET.get("topics"))
    raw_cursor = (request.GET.get("lastEventId") or request.headers.get("Last-Event-ID") or "").strip() or None
    start = await sync_to_async(event_stream.stream_start)(request, session_id, raw_cursor)
    slot = event_stream.connection_registry.acquire(start.session_id)
    return event_stream.EventStreamResponse(start, topics, slot, request)


@router.post("/events/emit", summary="Inject an external event into a session's stream")
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
