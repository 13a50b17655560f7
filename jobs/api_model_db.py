"""Model database endpoints (spec 004 §模型数据库（Model DB）), mounted at /api/ by covel.api; the logic
is in jobs/model_db.py."""
from __future__ import annotations

from ninja import Router

from covel.auth import require_operator
from covel.errors import ApiError
from covel.openapi import OPERATOR, OPERATOR_ERRORS, contract, errors_merge
from jobs import model_db
from jobs import schemas

router = Router(tags=["model-db"])


@router.get("/model-db")
@contract(ok=schemas.ModelDbOut)
def get_model_db(request):
    """``{source: bundled|cache, upstream, count, providers}``."""
    return model_db.model_db_info()


@router.get("/model-db/search")
@contract(ok=schemas.ModelSearchOut, errors={400: "invalid_query: limit outside 1-100"})
def search_model_db(request, q: str = "", limit: int = model_db.SEARCH_LIMIT_DEFAULT):
    """``{items: ModelSearchResult[]}``: ids containing every term of ``q``; at most ``limit`` (1-100)."""
    if not 1 <= limit <= model_db.SEARCH_LIMIT_MAX:
        raise ApiError(400, "invalid_query", f"limit must be between 1 and {model_db.SEARCH_LIMIT_MAX}")
    return {"items": model_db.model_db_search(q, limit=limit)}


@router.get("/model-db/lookup")
@contract(ok=schemas.ModelLookupOut, errors={400: "invalid_query: model is required"})
def lookup_model_db(request, model: str, provider: str | None = None, protocol: str | None = None):
    """Capability, how it was matched (matchedModelId, matchKind, candidates) and its source."""
    if not model.strip():
        raise ApiError(400, "invalid_query", "model is required")
    return model_db.model_db_lookup(model, provider=provider, protocol=protocol)


@router.post("/model-db/refresh")
@contract(ok=schemas.ModelDbRefreshOut, security=OPERATOR, errors=errors_merge(OPERATOR_ERRORS, {
    502: "model_db_refresh_failed: the source cannot be read"}))
def refresh_model_db(request):
    """``{ok, count, persisted}``; 502 model_db_refresh_failed when the source cannot be read. Hosted
    tiers: operator token (401 operator_token_required)."""
    require_operator(request)
    return model_db.model_db_refresh()
