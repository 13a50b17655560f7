"""HTTP endpoints of this app (one ninja Router, mounted at /api/ by covel.api): the AI endpoints
of spec 004 AI 生成 — model probes (jobs/ai.py) and world generation (jobs/worldgen.py)."""
from __future__ import annotations

from django.http import StreamingHttpResponse
from ninja import Router

from jobs import ai, worldgen
from sessions.api_scope import request_json
from sessions.auth import require_operator

router = Router(tags=["ai"])

_SSE_OPENAPI = {"responses": {"200": {"description": "SSE stream of progress / done / error frames",
                                      "content": {"text/event-stream": {}}}}}


@router.post("/ai/ping")
def ping_model(request):
    """200 {ok, latencyMs, ttfbMs?, text?, testedTarget, error?, errorKind?}; 400 invalid_request /
    invalid_llm_configuration / invalid_provider_keys before any model request."""
    return ai.ping(request, request_json(request))


@router.post("/ai/models")
def list_provider_models(request):
    """200 {ok, models, baseUrl, protocol, error?, errorKind?}. Demo/commercial: operator token."""
    require_operator(request)
    return ai.models_list(request, request_json(request))


@router.get("/ai/protocols")
def list_protocols(request):
    return ai.protocols_list()


@router.post("/ai/generate-world", openapi_extra=_SSE_OPENAPI, response={200: None})
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
