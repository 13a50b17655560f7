"""POST /api/actions (the SSE action bridge) and GET /api/sessions/:id/execution (spec 004
§Actions（SSE 桥接）, §刷新与未完成回合恢复). One ninja Router, mounted at /api/ by covel.api."""
from __future__ import annotations

from django.http import StreamingHttpResponse
from ninja import Router

from covel import model_relay
from covel.errors import ApiError
from covel.openapi import OWNER, SESSION_ERRORS, contract, errors_merge
from covel.headers import b64_json_header, plugin_user_settings_from_request, provider_keys_from_request
from covel.jsonbody import json_body_load
from sessions.auth import session_and_players_get_authorized, session_get_authorized
from turns import control, errors, services
from turns.errors import SessionIncarnationChanged
from turns.schemas import AbortOut, ActionRequestIn, ApprovalRequiredOut, SessionExecutionStatusOut, SteerIn, SteerOut
from turns.sse import execution_stream

router = Router(tags=["actions"])


def _model_routing(request) -> dict | None:
    """The turn's own model routing (kept in memory with the keys, turns.control): ``X-Slot-Config``
    checked against the configuration in effect (bindings must resolve), and the ``X-Model-Relay``
    channel where the relay is served (spec 004 §本地模型中继). Raises 400 invalid_llm_configuration
    or 400 model_relay_channel_required; None when the request names neither."""
    from django.conf import settings

    from turns.engine.providers.config import model_config_active
    from turns.engine.providers.routing import (CODE_INVALID_LLM_CONFIGURATION, SlotRoutingError, config_with_routing,
                                                slot_routing_parse)

    routing: dict = {}
    raw = request.headers.get("X-Slot-Config", "")
    if raw.strip():
        data = b64_json_header(raw, code=CODE_INVALID_LLM_CONFIGURATION, what="X-Slot-Config")
        config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
        try:
            config_with_routing(config, slot_routing_parse(data))
        except SlotRoutingError as exc:
            raise ApiError(400, CODE_INVALID_LLM_CONFIGURATION, str(exc)) from None
        routing["slotConfig"] = data
    channel = model_relay.channel_for_model_requests(request)
    if channel:
        routing["relay"] = channel
    return routing or None


def _request_body(request) -> object:
    cached = getattr(request, "covel_json", None)
    if cached is not None:
        return cached
    if not request.body.strip():
        raise ApiError(400, errors.INVALID_ACTION_REQUEST, "Request body is required")
    return json_body_load(request.body)


@router.post("/actions", response={200: None})
@contract(body=ActionRequestIn, security=OWNER, ok={200: None, 202: ApprovalRequiredOut},
          stream="SSE stream of SseEnvelope frames (`event: <type>`, `id: <epoch>:<seq>`, `data: {...}`) ending "
                 "after execution.completed; 202 JSON when an approval is required first", errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_action_request / invalid_action / invalid_action_fields / no_active_plugins / invalid_provider_keys / "
         "invalid_plugin_user_settings / invalid_llm_configuration / model_relay_channel_required / "
         "form_provider_inactive / form_provider_unavailable / form_validator_undeclared",
    404: "seat_not_found",
    409: "seat_not_human / unknown_action_kind / action_kind_not_allowed / actor_not_bound / session_not_active / "
         "session_deleting / request_id_conflict",
    503: "service_unavailable: the turn could not be queued (details.retryable; send the same requestId again)"}))
def post_action(request):
    """Run a player action as a turn and stream its events (text/event-stream of SseEnvelope).

    Rejections before the stream are JSON errors: 400 invalid_action_request, 404
    session_not_found, 404 seat_not_found, 409 seat_not_human / unknown_action_kind /
    action_kind_not_allowed / actor_not_bound, 400 invalid_action / invalid_action_fields,
    409 session_not_active / session_deleting / request_id_conflict, 400 no_active_plugins,
    400 invalid_provider_keys (malformed ``X-Provider-Keys``; the keys are never stored),
    400 invalid_plugin_user_settings (malformed ``X-Plugin-User-Settings``),
    400 invalid_llm_configuration (``X-Slot-Config`` malformed, or a binding naming no preset),
    400 model_relay_channel_required (a malformed ``X-Model-Relay`` where the relay is served),
    400 form_provider_inactive / form_provider_unavailable / form_validator_undeclared (an answered
    form's validator cannot run: its plugin is disabled, cannot run, or never declared it),
    202 ``{status: "approval-required", approvalId, pending}`` when a community plugin the turn would
    run lacks a grant (nothing written), 503 service_unavailable ``{details: {retryable: true}}``
    when the turn could not be queued (nothing recorded; send the same requestId again).
    """
    action = services.action_request_parse(_request_body(request))
    session, player_character_ids = session_and_players_get_authorized(request, action.session_id)
    provider_keys = provider_keys_from_request(request)
    execution, created = services.execution_request(session=session, request=action, provider_keys=provider_keys,
                                                     plugin_settings=plugin_user_settings_from_request(request),
                                                     model_routing=_model_routing(request),
                                                     player_character_ids=player_character_ids)
    response = StreamingHttpResponse(
        execution_stream(
            execution_id=str(execution.id),
            request_id=execution.request_id,
            trace_id=execution.trace_id,
            session_id=execution.session_id,
            turn_id=execution.turn_id,
            reap=services.execution_reap_one,
            fresh=created,
        ),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response


@router.get("/sessions/{session_id}/execution", response=SessionExecutionStatusOut, exclude_none=True)
@contract(ok=SessionExecutionStatusOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    409: "session_incarnation_changed: the session was deleted or recreated while the status was read"}))
def get_session_execution(request, session_id: str):
    """SessionExecutionStatus: is a turn running on this session? Never waits for the turn's lock.

    404 session_not_found, 401 session_owner_required, 409 session_incarnation_changed when the
    session was deleted or recreated while the status was being read.
    """
    from sessions.models import Session

    session = session_get_authorized(request, session_id)
    status = services.execution_status(session)
    incarnation = Session.objects.filter(pk=session_id).values_list("incarnation", flat=True).first()
    if incarnation != session.incarnation:
        raise SessionIncarnationChanged()
    return status


# --- in-turn control (spec 004 §回合中控制（W4）); mechanics in turns.control ----------------------


@router.post("/sessions/{session_id}/abort")
@contract(ok=AbortOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    409: "no_active_turn / turn_not_reachable"}))
def abort_session_turn(request, session_id: str):
    """Stop the player's running action (idempotent while it runs). 200 ``{ok: true, requestIds,
    turnId?}``; the action's stream ends with ``execution.completed`` carrying ``abortReason:
    "aborted-by-player"`` and nothing of the stopped turn is committed.

    404 session_not_found, 401 session_owner_required, 409 no_active_turn (nothing running or
    waiting), 409 turn_not_reachable (no worker acknowledged the stop in time).
    """
    session = session_get_authorized(request, session_id)
    return control.turn_abort(session)


@router.post("/sessions/{session_id}/steer")
@contract(ok=SteerOut, body=SteerIn, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_request_body", 409: "no_active_turn / turn_not_reachable / steer_closed"}))
def steer_session_turn(request, session_id: str):
    """Body ``{message: string}``: a player message for the running turn's story runtime.

    400 invalid_request_body, 404 session_not_found, 401 session_owner_required, 409
    no_active_turn, 409 turn_not_reachable, 409 steer_closed (the turn's story runtime can no
    longer take a message; see turns.control). 200 ``{"ok": true, "requestId", "turnId"}``: the
    story runtime's next model call includes the message (saved with the turn if it commits).
    """
    session = session_get_authorized(request, session_id)
    body = getattr(request, "covel_json", None)
    message = control.steer_message_parse(body if body is not None else _steer_body(request))
    return control.turn_steer(session, message)


def _steer_body(request) -> object:
    if not request.body.strip():
        return None
    return json_body_load(request.body)
