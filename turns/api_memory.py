"""GET /api/sessions/:id/memory-index and POST /api/sessions/:id/memory-index/rebuild (spec 004).
Thin: authorize, resolve the request's embedding model (the ``memory`` slot under the request's
``X-Slot-Config`` and ``X-Provider-Keys``, as a turn would), delegate to
``turns.engine.memory_index``; its module docstring has the rules."""
from __future__ import annotations

from typing import Optional

from django.conf import settings
from django.http import HttpRequest
from ninja import Router

from covel.headers import provider_keys_from_request
from covel.openapi import OWNER, SESSION_ERRORS, Nullable, Wire, contract, errors_merge
from covel.taskqueue import TASK_MEMORY_INDEX_REBUILD, task_send
from sessions.api_scope import session_scope
from turns.api import _model_routing
from turns.engine import memory_index
from turns.engine.providers.config import model_config_active
from turns.engine.providers.embeddings import EmbeddingChoice, embedder_for
from turns.engine.providers.routing import request_model_router

router = Router(tags=["memory"])


class MemoryModelOut(Wire):
    """An embedding model: ``provider``, ``modelName`` (+ ``dim``, ``lockedAt`` for the lock)."""

    provider: str
    model_name: str
    dim: Optional[int] = None
    locked_at: Nullable[str] = None  # null: no recorded lock time (spec 004)


class MemoryIndexProgressOut(Wire):
    """The background re-index: ``state`` idle|running|failed|deferred, ``indexed`` of ``total``."""

    state: str
    indexed: int
    total: int


class MemoryIndexOut(Wire):
    """The session's memory index (spec 004 §GET /api/sessions/:id/memory-index)."""

    available: bool
    locked: Nullable[MemoryModelOut] = None  # null until the session's first index (spec 004)
    configured: Nullable[MemoryModelOut] = None  # null when no embedding model is configured
    stale: bool
    progress: Optional[MemoryIndexProgressOut] = None


def _choice(request: HttpRequest) -> EmbeddingChoice:
    """The embedding model this request's turns would use (400 invalid_llm_configuration /
    invalid_provider_keys for malformed headers)."""
    config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    model_router = request_model_router(config, provider_keys=provider_keys_from_request(request),
                                        routing=_model_routing(request))
    return embedder_for(model_router)


def _schedule(session_id: str, generation: int) -> None:
    task_send(TASK_MEMORY_INDEX_REBUILD, session_id, generation)


@router.get("/sessions/{session_id}/memory-index", auth=session_scope)
@contract(ok=MemoryIndexOut, security=OWNER, errors=errors_merge(SESSION_ERRORS, {400: "invalid_llm_configuration"}))
def get_memory_index(request: HttpRequest, session_id: str):
    """The embedding model the session's memory index is locked to, the one the request's
    configuration selects, and ``stale`` when they differ (then recall is keyword-only)."""
    return memory_index.memory_index_state(request.auth.id, _choice(request))


@router.post("/sessions/{session_id}/memory-index/rebuild", auth=session_scope)
@contract(ok=MemoryIndexOut, body=None, security=OWNER, errors=errors_merge(SESSION_ERRORS, {
    400: "invalid_llm_configuration / invalid_provider_keys",
    409: "memory_index_unavailable / memory_index_changed / session_incarnation_changed",
    502: "embedding_unavailable: the configured embedding model did not answer (details.reason); the index is unchanged"}))
def rebuild_memory_index(request: HttpRequest, session_id: str):
    """Rebuild with the configured embedding model: probe, wait for in-flight writes, swap in one
    transaction, re-index in the background (``progress``). 200: the state after the swap."""
    return memory_index.memory_index_rebuild(request.auth, _choice(request), schedule=_schedule)
