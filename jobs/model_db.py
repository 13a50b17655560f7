"""The model database (spec 004 §模型数据库（Model DB）): what a model can do — context window, output
limit, tools, vision, reasoning — and its list price, looked up by the model id a slot names.

Data: LiteLLM's ``model_prices_and_context_window.json`` (MIT License). A trimmed snapshot of its
chat models ships in ``jobs/data/model_db.json.gz`` (``{source, models: {id: entry}}``, entry
``{provider, contextWindow?, maxOutputTokens?, in?, out? (USD per million tokens), caps?: [tools,
vision, reasoning, toolChoice]}``). ``POST /api/model-db/refresh`` downloads the upstream file from
``COVEL_MODEL_DB_URL`` and writes the same trimmed shape to ``COVEL_HOME/cache/model_db.json.gz``;
that cache wins over the bundled snapshot from then on (also after a restart).

Lookup treats the model id as opaque (it never rewrites the id a request uses); ``matchedModelId``,
``matchKind`` and ``candidates`` only explain where the capability came from. ``source``: ``known``
(this server's own models, e.g. the offline ``scripted`` one), ``model-database`` or
``protocol-default`` (nothing matched: the protocol's defaults).
"""
from __future__ import annotations

import gzip
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from covel import outbound
from covel.errors import ApiError

BUNDLED_PATH = Path(__file__).resolve().parent / "data" / "model_db.json.gz"
CACHE_RELATIVE = Path("cache") / "model_db.json.gz"
CODE_REFRESH_FAILED = "model_db_refresh_failed"
SEARCH_LIMIT_DEFAULT = 20
SEARCH_LIMIT_MAX = 100
CANDIDATES_MAX = 5
CHAT_MODES = ("chat", "responses")
REFRESH_MAX_BYTES = 64 * 1024 * 1024
_DATE_SUFFIX_RE = re.compile(r"-(20\d{2}-?\d{2}-?\d{2}|\d{4})$")

#: Models this server provides itself, not found in any upstream list.
KNOWN: dict[str, dict[str, Any]] = {
    "scripted": {"provider": "scripted", "contextWindow": 32768, "maxOutputTokens": 4096, "caps": ["tools", "toolChoice"]},
}
#: What an OpenAI-compatible endpoint is assumed to offer when the model is unknown.
PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "openai-chat-v1": {"contextWindow": 8192, "maxOutputTokens": 2048, "caps": ["tools"]},
}
#: Reasoning effort levels by upstream family (matched on the model id's last path part).
REASONING_FAMILIES: tuple[tuple[str, re.Pattern[str], tuple[str, ...], str], ...] = (
    ("openai-o", re.compile(r"^(o\d|gpt-5)"), ("minimal", "low", "medium", "high"), "medium"),
    ("claude", re.compile(r"^claude"), ("low", "medium", "high"), "medium"),
    ("gemini", re.compile(r"^gemini"), ("low", "medium", "high"), "medium"),
    ("deepseek", re.compile(r"^deepseek"), ("medium",), "medium"),
    ("qwen", re.compile(r"^qw"), ("low", "medium", "high"), "medium"),
)


@dataclass
class ModelDatabase:
    """The loaded data: ``models`` {id: trimmed entry}, where it came from (``bundled`` | ``cache``)."""

    models: dict[str, dict[str, Any]]
    origin: str
    upstream: str
    path: Path


_loaded: ModelDatabase | None = None
_lock = threading.Lock()


def _cache_path() -> Path:
    return Path(settings.COVEL_HOME) / CACHE_RELATIVE


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, EOFError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("models"), dict) else None


def model_db() -> ModelDatabase:
    """The database in effect: the refreshed cache when one is readable, else the bundled snapshot."""
    global _loaded
    with _lock:
        cache = _cache_path()
        if _loaded is None or (_loaded.origin == "bundled" and cache.is_file()) or (
                _loaded.origin == "cache" and _loaded.path != cache):
            data, origin, path = _read(cache), "cache", cache
            if data is None:
                data, origin, path = _read(BUNDLED_PATH), "bundled", BUNDLED_PATH
            if data is None:
                raise RuntimeError(f"the bundled model database {BUNDLED_PATH} is unreadable")
            _loaded = ModelDatabase(models=data["models"], origin=origin, upstream=str(data.get("source") or ""), path=path)
        return _loaded


def trimmed(upstream: dict[str, Any], *, source: str) -> dict[str, Any]:
    """LiteLLM's file (``{model id: {litellm_provider, mode, max_input_tokens, ...}}``) → the stored
    shape (chat models only, prices per million tokens). Raises ValueError when it is not that file."""
    if not isinstance(upstream, dict):
        raise ValueError("the model list is not a JSON object")
    models: dict[str, dict[str, Any]] = {}
    for model_id, raw in upstream.items():
        if not isinstance(raw, dict) or raw.get("mode") not in CHAT_MODES or not isinstance(model_id, str):
            continue
        entry: dict[str, Any] = {"provider": raw.get("litellm_provider") if isinstance(raw.get("litellm_provider"), str) else ""}
        for key, name in (("max_input_tokens", "contextWindow"), ("max_output_tokens", "maxOutputTokens")):
            if isinstance(raw.get(key), int) and not isinstance(raw.get(key), bool):
                entry[name] = raw[key]
        for key, name in (("input_cost_per_token", "in"), ("output_cost_per_token", "out")):
            if isinstance(raw.get(key), (int, float)) and not isinstance(raw.get(key), bool):
                entry[name] = round(raw[key] * 1_000_000, 6)
        caps = [cap for cap, key in (("tools", "supports_function_calling"), ("vision", "supports_vision"),
                                     ("reasoning", "supports_reasoning"), ("toolChoice", "supports_tool_choice"))
                if raw.get(key) is True]
        if caps:
            entry["caps"] = caps
        models[model_id] = entry
    if not models:
        raise ValueError("the model list has no chat models")
    return {"source": source, "models": models}


# --- reads ----------------------------------------------------------------------------------------


def _reasoning(model_id: str) -> dict[str, Any] | None:
    tail = model_id.rsplit("/", 1)[-1].lower()
    for family, pattern, levels, default in REASONING_FAMILIES:
        if pattern.match(tail):
            return {"family": family, "levels": list(levels), "default": default}
    return None


def capability(model_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """ModelCapability of one entry: contextWindow, maxOutputTokens, tools, vision, reasoning
    (``{family, levels, default}`` or None), toolChoice, and pricing (``{inputPerMToken,
    outputPerMToken}``, USD) when the list has prices."""
    caps = set(entry.get("caps") or [])
    out: dict[str, Any] = {
        "contextWindow": entry.get("contextWindow"),
        "maxOutputTokens": entry.get("maxOutputTokens"),
        "tools": "tools" in caps,
        "toolChoice": "toolChoice" in caps,
        "vision": "vision" in caps,
        "reasoning": _reasoning(model_id) if "reasoning" in caps else None,
    }
    if "in" in entry or "out" in entry:
        out["pricing"] = {"inputPerMToken": entry.get("in"), "outputPerMToken": entry.get("out")}
    return out


def _result(model_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {"id": model_id, "provider": entry.get("provider") or None, "capability": capability(model_id, entry)}


def model_db_info() -> dict[str, Any]:
    """GET /api/model-db: ``{source: bundled|cache, upstream, count, providers}``."""
    db = model_db()
    return {"source": db.origin, "upstream": db.upstream, "count": len(db.models),
            "providers": sorted({e.get("provider") for e in db.models.values() if e.get("provider")})}


def model_db_search(query: str, *, limit: int = SEARCH_LIMIT_DEFAULT) -> list[dict[str, Any]]:
    """GET /api/model-db/search?q=: ModelSearchResult ``{id, provider, capability}`` for ids containing
    every whitespace-separated term (case-insensitive), exact and shorter ids first."""
    terms = [t for t in query.lower().split() if t]
    if not terms:
        return []
    db = model_db()
    hits = [m for m in db.models if all(t in m.lower() for t in terms)]
    hits.sort(key=lambda m: (m.lower() != query.lower(), "/" in m, len(m), m))
    return [_result(m, db.models[m]) for m in hits[:limit]]


def _normalized(model_id: str) -> str:
    return _DATE_SUFFIX_RE.sub("", model_id.lower().rsplit("/", 1)[-1])


def model_db_lookup(model: str, *, provider: str | None = None, protocol: str | None = None) -> dict[str, Any]:
    """GET /api/model-db/lookup: ``{model, matchedModelId, matchKind, candidates, source, pricingKind?,
    capability}``. matchKind: exact | provider-prefixed | unprefixed | normalized | aggregator | none.
    pricingKind: ``direct``, or ``reference`` when matched through an aggregator's listing of the
    upstream model (the bill may differ)."""
    db = model_db()
    out: dict[str, Any] = {"model": model, "matchedModelId": None, "matchKind": "none", "candidates": []}
    if model in KNOWN:
        return {**out, "matchedModelId": model, "matchKind": "exact", "source": "known",
                "capability": capability(model, KNOWN[model])}
    steps: list[tuple[str, str | None]] = [("exact", model if model in db.models else None)]
    if provider:
        prefixed = f"{provider}/{model}"
        steps.append(("provider-prefixed", prefixed if prefixed in db.models else None))
    if "/" in model:
        tail = model.rsplit("/", 1)[-1]
        steps.append(("unprefixed", tail if tail in db.models else None))
    normalized = _normalized(model)
    same = sorted((m for m in db.models if "/" not in m and _normalized(m) == normalized), key=len)
    steps.append(("normalized", same[0] if same else None))
    aggregated = sorted((m for m in db.models if m.lower().endswith("/" + model.lower().rsplit("/", 1)[-1])), key=len)
    steps.append(("aggregator", aggregated[0] if aggregated else None))
    out["candidates"] = sorted({m for m in [*same, *aggregated] if m})[:CANDIDATES_MAX]
    for kind, matched in steps:
        if matched:
            entry = db.models[matched]
            return {**out, "matchedModelId": matched, "matchKind": kind, "source": "model-database",
                    "pricingKind": "reference" if kind == "aggregator" else "direct",
                    "capability": capability(matched, entry)}
    default = PROTOCOL_DEFAULTS.get(protocol or "openai-chat-v1") or PROTOCOL_DEFAULTS["openai-chat-v1"]
    return {**out, "source": "protocol-default", "capability": capability(model, default)}


_capability_cache: dict[tuple[str, str, str, int], dict[str, Any]] = {}
_capability_lock = threading.Lock()


def model_capability_cached(model: str, *, provider: str, protocol: str) -> dict[str, Any]:
    """``model_db_lookup`` memoised per (model, provider, protocol) and database generation: a
    lookup scans the whole list for unknown ids (milliseconds), and every agent runtime of a turn
    asks. The agent loop's capability port (turns.engine.ports.model_capability)."""
    key = (model, provider, protocol, id(model_db()))
    with _capability_lock:
        hit = _capability_cache.get(key)
    if hit is None:
        hit = model_db_lookup(model, provider=provider, protocol=protocol)
        with _capability_lock:
            if len(_capability_cache) > 1024:
                _capability_cache.clear()
            _capability_cache[key] = hit
    return hit


# --- refresh --------------------------------------------------------------------------------------


def model_db_refresh() -> dict[str, Any]:
    """POST /api/model-db/refresh: download ``COVEL_MODEL_DB_URL``, trim it, write the cache atomically.
    Returns ``{ok: true, count, persisted: true}``. Raises 502 model_db_refresh_failed (nothing written)
    when the download or its parsing fails. The URL is the operator's setting, never a request's."""
    url = settings.COVEL_MODEL_DB_URL
    try:
        # The operator's URL (not request-supplied): no SSRF guard, no key; redirects re-checked.
        with outbound.send("GET", url, is_request_supplied=False, timeout=settings.COVEL_MODEL_DB_TIMEOUT_SECONDS,
                           max_redirects=3) as response:
            if response.status_code != 200:
                raise ValueError(f"upstream answered HTTP {response.status_code}")
            body = outbound.read_limited(response, REFRESH_MAX_BYTES)
        data = trimmed(json.loads(body), source=f"LiteLLM model list from {url}")
    except (outbound.OutboundError, httpx.HTTPError, ValueError, RecursionError) as exc:
        reason = exc.message if isinstance(exc, outbound.OutboundError) else str(exc)
        raise ApiError(502, CODE_REFRESH_FAILED, f"The model database could not be refreshed: {reason}") from None
    cache = _cache_path()
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial")
    with gzip.open(partial, "wt", encoding="utf-8") as handle:
        json.dump(data, handle, separators=(",", ":"), sort_keys=True)
    partial.replace(cache)
    with _lock:
        global _loaded
        _loaded = None
    return {"ok": True, "count": len(data["models"]), "persisted": True}
