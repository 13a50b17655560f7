"""Model probes of the AI endpoints (spec 004 AI 生成): POST /api/ai/ping, POST /api/ai/models,
GET /api/ai/protocols. Slots come from the engine's llm.toml loader and calls go through the
engine's provider clients (turns.engine.providers); the model-list read of POST /api/ai/models
is the only request made here, and it too goes through covel.outbound.

Who may call them follows the spec's endpoint table (jobs/api.py): POST /api/ai/ping is open in
every tier, POST /api/ai/models needs the operator token in demo/commercial (托管部署需运维 token);
visitors test and list with their own keys (§生产 MemoryStore 例外: 列出服务商的模型和测试模型保持开放).
What keeps an open probe safe is covel.outbound, not a closed route: a target the request
describes (X-Slot-Config ``customPresets``, the body ``baseUrl``) never receives a server key,
passes the SSRF guard, and its failures all read alike.
"""
from __future__ import annotations

import json
import time
from typing import Any

import httpx

from jobs.config_services import llm_config_active, slots_effective
from covel import model_relay, outbound
from covel.errors import ApiError
from covel.headers import b64_json_header, provider_keys_from_request
from turns.engine.providers import config as llm
from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse
from turns.engine.providers.config import provider_base_url_valid
from turns.engine.providers.routing import SlotRouting, SlotRoutingError, slot_routing_parse

CODE_INVALID_LLM_CONFIGURATION = "invalid_llm_configuration"
PING_TARGET_FIELDS = ("presetId", "modelRef", "slot")
PING_PROMPT = "Reply with the single word: pong"
PING_MAX_OUTPUT_TOKENS = 32
PING_TOOL = {"name": "covel_ping", "description": "Answer the connection test.",
             "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}
PING_TOOL_PROMPT = 'Connection test: call the tool covel_ping with word "pong". Do not write anything else.'
MODELS_TIMEOUT_SECONDS = 15.0
MODELS_MAX_IDS = 2000
#: Most bytes of a model list read (large catalogues with descriptions stay well below this).
MODELS_MAX_BYTES = 16 * 1024 * 1024
PROTOCOLS = [{"id": llm.PROTOCOL_OPENAI_CHAT, "label": "OpenAI Chat", "output": "text"}]
MODELS_FIELDS = ("provider", "baseUrl", "protocol")


def slot_routing_from_request(request) -> SlotRouting:
    """Parse ``X-Slot-Config`` (base64 JSON; turns.engine.providers.routing). Raises 400
    invalid_llm_configuration."""
    raw = request.headers.get("X-Slot-Config", "")
    if not raw.strip():
        return SlotRouting({}, {})
    data = b64_json_header(raw, code=CODE_INVALID_LLM_CONFIGURATION, what="X-Slot-Config")
    try:
        return slot_routing_parse(data)
    except SlotRoutingError as exc:
        raise ApiError(400, CODE_INVALID_LLM_CONFIGURATION, str(exc)) from None


def _ping_target(body: dict[str, Any]) -> tuple[str | None, str | None]:
    unknown = [k for k in body if k not in PING_TARGET_FIELDS]
    if unknown:
        raise ApiError(400, "invalid_request", f"Unknown field: {unknown[0]}")
    given = [k for k in PING_TARGET_FIELDS if k in body]
    if len(given) > 1:
        raise ApiError(400, "invalid_request", "Give only one of presetId, modelRef, slot")
    if not given:
        return None, None
    value = body[given[0]]
    if not isinstance(value, str) or not value:
        raise ApiError(400, "invalid_request", f"{given[0]} must be a non-empty string")
    return given[0], value


def _error_kind(exc: ModelError) -> str:
    if exc.code == "idle_timeout":
        return "timeout"
    if exc.code in outbound.REFUSAL_CODES:
        return "config"
    if exc.code in ("unreachable", "model_relay_failed"):  # a relayed call the browser could not make
        return "unreachable"
    if exc.code == "no_key" or exc.status in (401, 403):
        return "auth"
    if exc.status == 404:
        return "not_found"
    if exc.status == 429:
        return "rate_limited"
    if exc.status is not None and exc.status >= 500:
        return "server"
    if exc.code == "bad_response":
        return "protocol"
    if exc.code == "not_configured":
        return "config"
    return "unknown"


def _failure(exc: ModelError) -> dict[str, Any]:
    """``{error, errorKind, code?}`` of a failed probe; ``code`` names an outbound refusal."""
    out: dict[str, Any] = {"error": exc.message, "errorKind": _error_kind(exc)}
    if exc.code in outbound.REFUSAL_CODES:
        out["code"] = exc.code
    return out


def _resolve(kind: str | None, value: str | None, routing: SlotRouting) -> tuple[llm.SlotConfig | None, str, str | None]:
    """(slot to test or None, resolvedVia, error when the named target does not exist)."""
    config, _ = llm_config_active()
    slots = {slot.name: slot for slot in slots_effective(config)}

    def preset(preset_id: str) -> llm.SlotConfig | None:
        return slots.get(preset_id)

    if kind == "presetId":
        slot = preset(value)
        return slot, "direct", None if slot else f"Unknown preset: {value}"
    if kind == "modelRef":
        slot = routing.custom_presets.get(value)
        return slot, "direct", None if slot else f"Unknown model reference: {value}"
    name = value or llm.SLOT_STORY
    binding = routing.slot_bindings.get(name)
    if binding:
        ref_kind, ref = next(iter(binding.items()))
        slot = routing.custom_presets.get(ref) if ref_kind == "modelRef" else preset(ref)
        return slot, "slot", None if slot else f"Slot {name} is bound to an unknown {ref_kind}: {ref}"
    if name in slots:
        return slots[name], "slot", None
    if kind == "slot":
        return None, "slot", f"Slot {name} is not configured; add [covel.{name}] to llm.toml"
    # No target and no default slot: the server may fall back to any configured slot.
    return next(iter(slots.values())), "any", None


def ping(request, body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/ai/ping: test exactly one resolved model with one streamed request (no retry, no
    fallback). Returns 200 ``{ok, latencyMs, ttfbMs?, text?, testedTarget, error?, errorKind?}``.
    Raises 400 invalid_request (unknown field, several targets), 400 invalid_llm_configuration
    (bad X-Slot-Config), 400 invalid_provider_keys; no model request is sent in those cases.
    Keys: a server preset or slot uses the request's key or, at a trusted origin, the server's;
    a ``modelRef`` (customPresets) uses only the request's. An endpoint covel.outbound refuses is
    ``ok: false`` with ``errorKind: "config"`` and ``code`` (``target_not_allowed`` |
    ``model_relay_unavailable``), sent nothing. In the shared tiers a ``modelRef`` on loopback/LAN
    is tested through the player's model relay when the request carries ``X-Model-Relay``
    (covel.model_relay; 400 model_relay_channel_required for a malformed one).
    """
    kind, value = _ping_target(body)
    routing = slot_routing_from_request(request)
    keys = provider_keys_from_request(request)
    relay_channel = model_relay.channel_for_model_requests(request)
    slot, resolved_via, missing = _resolve(kind, value, routing)
    started = time.monotonic()
    if slot is None:
        return {"ok": False, "latencyMs": 0, "error": missing, "errorKind": "config",
                "testedTarget": {kind or "slot": value or llm.SLOT_STORY, "resolvedVia": resolved_via}}
    label = kind if kind in ("presetId", "modelRef") else "slot"
    tested = {label: value or slot.name, "provider": slot.provider, "model": slot.model, "resolvedVia": resolved_via}
    router = llm.ModelRouter(llm.ModelConfig(slots={slot.name: slot}), provider_keys=keys,
                             relay=model_relay.transport_for(relay_channel))
    api_key = router.key_for(slot)
    if slot.provider != llm.PROVIDER_SCRIPTED and not api_key and slot.base_url is None:
        return {"ok": False, "latencyMs": 0, "error": f"no API key for provider {slot.provider!r}", "errorKind": "auth",
                "testedTarget": tested}
    # Every runtime of a turn calls tools, so the probe asks for one tool call in its one request: a
    # server that cannot do tools (an error, or prose instead of the call) fails here, not in the
    # first turn. The offline scripted model has no wire to test.
    checks_tools = slot.provider != llm.PROVIDER_SCRIPTED
    model_request = ModelRequest(messages=[{"role": "user", "content": PING_TOOL_PROMPT if checks_tools else PING_PROMPT}],
                                 tools=[PING_TOOL] if checks_tools else [], slot=slot.name, model=slot.model,
                                 api_key=api_key, max_output_tokens=PING_MAX_OUTPUT_TOKENS,
                                 context={"is_story": False, "runtime_id": "ping", "locale": "en-US"})
    ttfb_ms: int | None = None
    response: ModelResponse | None = None
    try:
        for item in router.client_for(slot).stream(model_request):
            if ttfb_ms is None:
                ttfb_ms = int((time.monotonic() - started) * 1000)
            if isinstance(item, ModelResponse):
                response = item
                break
            if not checks_tools:
                break  # the first output is all a text probe needs
    except ModelError as exc:
        failure = _failure(exc)
        if checks_tools and exc.status in (400, 422, 500, 501) and "tool" in exc.message.lower():
            failure["errorKind"] = "tools_unsupported"
        return {"ok": False, "latencyMs": int((time.monotonic() - started) * 1000), **failure, "testedTarget": tested}
    latency_ms = int((time.monotonic() - started) * 1000)
    if checks_tools and not (response and any(c.name == PING_TOOL["name"] for c in response.tool_calls)):
        return {"ok": False, "latencyMs": latency_ms, "errorKind": "tools_unsupported", "testedTarget": tested,
                "error": "the model answered without calling the test tool: this server or model does not take tool "
                         "calls, which every runtime needs"}
    out: dict[str, Any] = {"ok": True, "latencyMs": latency_ms,
                           "text": f"{slot.name} ({slot.provider}/{slot.model or slot.provider})", "testedTarget": tested}
    if ttfb_ms is not None:
        out["ttfbMs"] = ttfb_ms
    return out


def protocols_list() -> dict[str, Any]:
    """GET /api/ai/protocols: the builtin wire protocols (plugins register none on this server)."""
    return {"protocols": [dict(p) for p in PROTOCOLS]}


def _model_ids(raw: bytes) -> list[str] | None:
    """The ids of an OpenAI-compatible model list (``{"data": [{"id": str, ...}, ...]}``), or None
    when ``raw`` is anything else (then nothing of it is returned to the caller)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data["data"]):
        return None
    return [m["id"] for m in data["data"]]


def _is_model_error_body(raw: bytes) -> bool:
    """True for a model API's JSON error answer (``{"error": {...} | "..."}``)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), (dict, str))


def models_list(request, body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/ai/models ``{provider, baseUrl?, protocol?}``: model ids from ``GET {baseUrl}/models``.

    400 on unknown fields / unknown protocol / missing provider / a baseUrl that is not an http(s)
    URL. A failed read is 200 ``{ok: false, models: [], error, errorKind, code?}``. Without a
    ``baseUrl`` the endpoint is the provider's, as the operator configured it (llm.toml) or built
    in; the server's ``{PROVIDER}_API_KEY`` goes there only when its origin is trusted for the
    provider. A body ``baseUrl`` is request-supplied: only the X-Provider-Keys key is sent, the
    address passes the SSRF guard (refused: ``errorKind "config"`` with ``code``), redirects are
    followed at most 5 times with every Location checked again, and an answer that is not a model
    list (or a model API's JSON error) reads "could not reach the model endpoint" — nothing of it
    is echoed. 15 s timeout, at most 2000 ids. In the shared tiers a loopback/LAN ``baseUrl`` is
    read through the player's model relay when the request carries ``X-Model-Relay``
    (covel.model_relay; a relay failure reads like any unreachable target).
    """
    unknown = [k for k in body if k not in MODELS_FIELDS]
    if unknown:
        raise ApiError(400, "invalid_request", f"Unknown field: {unknown[0]}")
    provider = body.get("provider")
    if not isinstance(provider, str) or not provider:
        raise ApiError(400, "invalid_request", "provider (string) is required")
    for key in ("baseUrl", "protocol"):
        if key in body and not isinstance(body[key], str):
            raise ApiError(400, "invalid_request", f"{key} must be a string")
    if body.get("baseUrl") and not provider_base_url_valid(body["baseUrl"]):
        raise ApiError(400, "invalid_request", "baseUrl must be an http(s) URL with a host")
    protocol = body.get("protocol") or llm.PROTOCOL_OPENAI_CHAT
    if protocol not in {p["id"] for p in PROTOCOLS}:
        raise ApiError(400, "invalid_request", f"Unknown protocol: {protocol}")
    keys = provider_keys_from_request(request)
    relay = model_relay.transport_for(model_relay.channel_for_model_requests(request))
    config, _ = llm_config_active()
    is_request_supplied = bool(body.get("baseUrl"))
    if is_request_supplied:
        base_url = body["baseUrl"].rstrip("/")
    else:
        configured = [s.base_url for s in config.slots.values() if s.provider == provider and s.base_url]
        base_url = (configured[0] if configured else llm.PROVIDER_DEFAULT_BASE_URLS.get(provider) or "").rstrip("/")
    out: dict[str, Any] = {"ok": False, "models": [], "baseUrl": base_url or None, "protocol": protocol}
    if provider == llm.PROVIDER_SCRIPTED:
        return {**out, "ok": True, "models": [llm.PROVIDER_SCRIPTED]}
    if not base_url:
        return {**out, "error": f"no baseUrl known for provider {provider!r}", "errorKind": "config"}
    key = outbound.provider_key_for(provider, base_url, request_keys=keys, is_request_supplied=is_request_supplied)
    unreachable = {**out, "error": outbound.MESSAGE_UNREACHABLE, "errorKind": "unreachable"}
    try:
        with outbound.send("GET", f"{base_url}/models", is_request_supplied=is_request_supplied, key=key,
                           headers={"Accept": "application/json"}, timeout=MODELS_TIMEOUT_SECONDS,
                           max_redirects=outbound.MAX_REDIRECTS, relay=relay) as response:
            status = response.status_code
            raw = outbound.read_limited(response, MODELS_MAX_BYTES)
    except outbound.TargetRefused as exc:
        return {**out, "error": exc.message, "errorKind": "config", "code": exc.code}
    except outbound.OutboundError as exc:
        if is_request_supplied:
            return unreachable
        if exc.code == outbound.CODE_TIMEOUT:
            return {**out, "error": f"the provider did not answer within {MODELS_TIMEOUT_SECONDS:g} s", "errorKind": "timeout"}
        return {**out, "error": outbound.redact(exc.message, key), "errorKind": "unreachable"}
    except httpx.HTTPError as exc:
        return unreachable if is_request_supplied else {**out, "error": f"the provider's answer broke off ({type(exc).__name__})",
                                                        "errorKind": "unreachable"}
    if status >= 400:
        if is_request_supplied and not _is_model_error_body(raw):
            return unreachable
        kind = _error_kind(ModelError("provider_error", "", status=status))
        return {**out, "error": f"provider returned HTTP {status}", "errorKind": kind}
    ids = _model_ids(raw) if 200 <= status < 300 else None
    if ids is None:
        return unreachable if is_request_supplied else {**out, "error": "the provider's answer is not a model list",
                                                        "errorKind": "protocol"}
    return {**out, "ok": True, "models": ids[:MODELS_MAX_IDS]}
