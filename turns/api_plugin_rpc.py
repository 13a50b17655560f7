"""POST /api/sessions/:id/plugin-rpc (spec 004 §插件 RPC 通道). Thin: authorize, delegate to
``turns.plugin_rpc``; its module docstring lists the four kinds, their shapes and errors."""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from covel.headers import plugin_user_settings_from_request, provider_keys_from_request
from covel.openapi import BUSY_ERRORS, OWNER, SESSION_ERRORS, contract, errors_merge
from sessions.api_scope import request_json, session_scope
from turns import plugin_rpc
from turns.schemas import PluginRpcAccepted, PluginRpcIn, PluginRpcOk

router = Router(tags=["plugin-rpc"])


@router.post("/sessions/{session_id}/plugin-rpc", auth=session_scope, response={200: dict, 202: dict})
@contract(ok={200: PluginRpcOk, 202: PluginRpcAccepted}, body=PluginRpcIn, security=OWNER,
          errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    400: "invalid_rpc_request / reserved_action / command_args_invalid / plugin_mismatch / event_payload_invalid / "
         "command_context_required",
    404: "plugin_not_active / unknown_action / runtime_not_active / command_not_active / event_not_declared / "
         "retry_turn_not_found",
    409: "session_not_active / session_deleting / session_incarnation_changed / runtime_subagent_only / "
         "command_changed / retry_source_not_committed",
    429: "queue_full / background_queue_full", 500: "turn_commit_failed, or the handler failed",
    504: "handler_timeout"}))
def post_plugin_rpc(request: HttpRequest, session_id: str):
    """Body ``{kind: action|runtime|command|event, ...}``. 200 ``{status: "ok", ...}``; 202
    ``{status: "accepted", jobId, ...}`` (background runtime) or ``{status: "approval-required",
    approvalId, pending}`` (a community plugin lacks a grant; decide, then repeat the request).
    Errors: 400 invalid_rpc_request / reserved_action / command_args_invalid / plugin_mismatch /
    event_payload_invalid / command_context_required / invalid_plugin_user_settings, 404 session_not_found / plugin_not_active /
    unknown_action / runtime_not_active / command_not_active / event_not_declared /
    retry_turn_not_found, 409 session_not_active / session_deleting / session_incarnation_changed /
    runtime_subagent_only / command_changed / retry_source_not_committed, 429 queue_full /
    background_queue_full, 500 turn_commit_failed (or no code: the handler failed), 503
    session_busy, 504 handler_timeout."""
    status, body = plugin_rpc.plugin_rpc(request.auth, request_json(request),
                                         provider_keys=provider_keys_from_request(request),
                                         plugin_settings=plugin_user_settings_from_request(request))
    return JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
