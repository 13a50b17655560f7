"""HTTP endpoints of this app (one ninja Router, mounted at /api/ by covel.api): the AI endpoints
of spec 004 AI 生成 — model probes (jobs/ai.py) and world generation (jobs/worldgen.py) — and the
runtime job endpoints of spec 004 §Staged Runtime 后台作业 (session-scoped, ``auth=session_scope``)."""
from __future__ import annotations

from django.http import StreamingHttpResponse
from ninja import Router
from ninja.responses import Status

from jobs import ai, worldgen
from jobs import schemas as job_schemas, selectors as job_selectors, services as job_services
from sessions.api_scope import request_json, session_scope
from covel.auth import require_operator
from covel.openapi import BUSY_ERRORS, OPERATOR, OPERATOR_ERRORS, OWNER, SESSION_ERRORS, contract, errors_merge

router = Router(tags=["ai"])

# An int key, as ninja writes its own (a "200" string key would be a duplicate key in the document).
_SSE_OPENAPI = {"responses": {200: {"description": "SSE stream of progress / done / error frames",
                                      "content": {"text/event-stream": {}}}}}


@router.post("/ai/ping")
@contract(ok=job_schemas.PingOut, body=job_schemas.PingIn, body_required=False, errors={
    400: "invalid_request / invalid_llm_configuration / invalid_provider_keys / model_relay_channel_required (no model "
         "request sent)"})
def ping_model(request):
    """200 {ok, latencyMs, ttfbMs?, text?, testedTarget, error?, errorKind?}; 400 invalid_request /
    invalid_llm_configuration / invalid_provider_keys before any model request."""
    return ai.ping(request, request_json(request))


@router.post("/ai/models")
@contract(ok=job_schemas.ProviderModelsOut, body=job_schemas.ProviderModelsIn, security=OPERATOR,
          errors=errors_merge(OPERATOR_ERRORS, {400: "invalid_request / invalid_provider_keys"}))
def list_provider_models(request):
    """200 {ok, models, baseUrl, protocol, error?, errorKind?}. Demo/commercial: operator token
    (open in the browser-private profile: visitors list models with their own keys)."""
    require_operator(request, open_in_browser_private=True)
    return ai.models_list(request, request_json(request))


@router.get("/ai/protocols")
@contract(ok=job_schemas.ProtocolsOut)
def list_protocols(request):
    return ai.protocols_list()


@router.post("/ai/generate-world", openapi_extra=_SSE_OPENAPI, response={200: None})
@contract(body=job_schemas.GenerateWorldIn, security=OPERATOR, stream=(
    "SSE stream of the generation: progress, done (the world or where it was saved) and error frames"),
          errors=errors_merge(OPERATOR_ERRORS, {400: "an invalid body (before the stream)",
                                                429: "operation_in_progress: a generation, revision or translation runs"}))
def generate_world(request):
    """Stream a world generation (text/event-stream). 400 before the stream for an invalid body;
    demo/commercial: 401 operator_token_required. The work runs as the worldgen.generate_world task."""
    require_operator(request)
    job = worldgen.generation_request_parse(request_json(request), contracts_catalog=worldgen.contracts_catalog(),
                                            packs=worldgen.packs_catalog())
    generation = worldgen.generation_start(request=job)
    response = StreamingHttpResponse(
        worldgen.generation_stream(str(generation.id), idle_timeout_ms=job["idleTimeoutMs"]),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response


@router.post("/ai/revise-world", openapi_extra=_SSE_OPENAPI, response={200: None})
@contract(body=job_schemas.ReviseWorldIn, security=OPERATOR, stream=(
    "SSE stream of the revision: progress (parts [revision]), then done {world, warnings?, usage?} or error"),
          errors=errors_merge(OPERATOR_ERRORS, {400: "worldId / instruction / idleTimeoutMs / world invalid (before the stream)",
                                                404: "world_not_found",
                                                409: "world_not_revisable | world_package_modified | world_deleting"}))
def revise_world(request):
    """Revise a generated world from one instruction (spec 004 POST /api/ai/revise-world); runs as
    the worldgen task like a generation."""
    from jobs.worldgen_revise import revise_request_parse

    require_operator(request)
    job = revise_request_parse(request_json(request))
    generation = worldgen.generation_start(request=job)
    response = StreamingHttpResponse(
        worldgen.generation_stream(str(generation.id), idle_timeout_ms=job["idleTimeoutMs"]),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response


@router.post("/worlds/{world_id}/translate", openapi_extra=_SSE_OPENAPI, response={200: None}, tags=["worlds"])
@contract(body=job_schemas.TranslateWorldIn, security=OPERATOR, stream=(
    "SSE stream of the translation: progress {step, done, total}, then done {world, total, translated, failed} or error"),
          errors=errors_merge(OPERATOR_ERRORS, {400: "locale or idleTimeoutMs invalid (before the stream)",
                                                404: "world_not_found",
                                                409: "world_not_translatable | world_already_translated | world_deleting"}))
def translate_world(request, world_id: str):
    """Add a locale to a user-directory world package with the configured model (spec 004
    POST /api/worlds/:id/translate); runs as the worldgen task like a generation."""
    from jobs.worldgen_translate import translate_request_parse

    require_operator(request)
    job = translate_request_parse(world_id=world_id, body=request_json(request))
    generation = worldgen.generation_start(request=job)
    response = StreamingHttpResponse(
        worldgen.generation_stream(str(generation.id), idle_timeout_ms=job["idleTimeoutMs"]),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response


# --- runtime jobs ------------------------------------------------------------------------------

RUNTIME_JOB_TAGS = ["runtime-jobs"]


@router.get("/sessions/{session_id}/runtime-jobs", auth=session_scope, tags=RUNTIME_JOB_TAGS)
@contract(ok=job_schemas.RuntimeJobsOut, security=OWNER, errors=SESSION_ERRORS)
def list_runtime_jobs(request, session_id: str):
    """200 {items: [RuntimeJob]} ordered by enqueuedAt, jobId; never the internal payload."""
    job_services.jobs_reap_maybe()
    return {"items": [job_schemas.runtime_job_out(j) for j in job_selectors.runtime_job_list(request.auth.pk)]}


@router.post("/sessions/{session_id}/runtime-jobs/{job_id}/cancel", auth=session_scope, tags=RUNTIME_JOB_TAGS)
@contract(ok=job_schemas.RuntimeJobOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    404: "runtime_job_not_found", 409: "runtime_job_not_cancellable"}))
def cancel_runtime_job(request, session_id: str, job_id: str):
    """200 the cancelled job; 409 runtime_job_not_cancellable; 503 session_busy."""
    job = job_services.runtime_job_cancel(session_id=request.auth.pk, job_id=job_id)
    return job_schemas.runtime_job_out(job)


@router.post("/sessions/{session_id}/runtime-jobs/{job_id}/retry", auth=session_scope, tags=RUNTIME_JOB_TAGS,
             response={202: dict})
@contract(ok=job_schemas.RuntimeJobOut, status=202, security=OWNER, errors=errors_merge(SESSION_ERRORS, BUSY_ERRORS, {
    404: "runtime_job_not_found", 409: "runtime_job_not_retryable / session_not_active",
    429: "background_queue_full"}))
def retry_runtime_job(request, session_id: str, job_id: str):
    """202 the new queued job; 409 runtime_job_not_retryable / session_not_active; 429 background_queue_full."""
    job = job_services.runtime_job_retry(session=request.auth, job_id=job_id)
    return Status(202, job_schemas.runtime_job_out(job))
