"""A request's own model routing: ``X-Slot-Config`` (spec 004 §AI 生成: ``customPresets``,
``slotBindings``; 400 ``invalid_llm_configuration``), shared by POST /api/ai/ping (jobs.ai) and the
turns of POST /api/actions, and the request's local model relay (``X-Model-Relay``,
covel.model_relay).

Shape (decoded JSON):
    {"customPresets": {<id>: {"provider", "model", "baseUrl"?, "protocol"?}},
     "slotBindings":  {<slot>: {"presetId": <server slot>} | {"modelRef": <customPresets id>}}}

A custom preset is a slot the client described: ``is_request_supplied`` (covel.outbound: its
endpoint passes the SSRF guard, it never receives a server key, and in the shared tiers a loopback
or LAN endpoint is reached only through the player's model relay, covel.model_relay).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from covel import model_relay
from turns.engine.providers import config as llm


#: The code of a malformed X-Slot-Config (400), and of a binding that names no preset.
CODE_INVALID_LLM_CONFIGURATION = "invalid_llm_configuration"


class SlotRoutingError(ValueError):
    """X-Slot-Config is malformed (the HTTP layer answers 400 invalid_llm_configuration)."""


@dataclass
class SlotRouting:
    """The parsed ``X-Slot-Config``: ``custom_presets`` {id: SlotConfig} and ``slot_bindings``
    {slot: {"presetId": id} | {"modelRef": id}}."""

    custom_presets: dict[str, llm.SlotConfig]
    slot_bindings: dict[str, dict[str, str]]

    @property
    def is_empty(self) -> bool:
        """True when the header named no preset and no binding."""
        return not self.custom_presets and not self.slot_bindings


def _preset_from(raw: Any, preset_id: str) -> llm.SlotConfig:
    """A customPresets entry ``{provider, model, baseUrl?, protocol?}`` as a slot named after it,
    marked request-supplied (even without a ``baseUrl``: the preset and its model are the client's)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("provider"), str) or not isinstance(raw.get("model", ""), str):
        raise SlotRoutingError(f"customPresets.{preset_id} needs provider and model strings")
    provider = raw["provider"]
    protocol = raw.get("protocol", llm.PROTOCOL_OPENAI_CHAT)
    if not llm.PROVIDER_ID_RE.match(provider) or (provider != llm.PROVIDER_SCRIPTED and protocol not in llm.PROTOCOLS):
        raise SlotRoutingError(f"customPresets.{preset_id}: malformed provider id or unknown protocol")
    base_url = raw.get("baseUrl")
    if base_url is not None and not llm.provider_base_url_valid(base_url):
        raise SlotRoutingError(f"customPresets.{preset_id}.baseUrl must be an http(s) URL")
    return llm.SlotConfig(name=preset_id, provider=provider, model=raw.get("model", ""), base_url=base_url, protocol=protocol,
                          is_request_supplied=True)


def slot_routing_parse(data: dict[str, Any] | None) -> SlotRouting:
    """Validate decoded X-Slot-Config JSON (None or {} → empty routing). Raises SlotRoutingError.
    References are not resolved here (a probe reports an unknown one as ``ok: false``)."""
    data = data or {}
    presets_raw = data.get("customPresets") or {}
    bindings_raw = data.get("slotBindings") or {}
    if not isinstance(presets_raw, dict) or not isinstance(bindings_raw, dict):
        raise SlotRoutingError("customPresets and slotBindings must be objects")
    presets = {pid: _preset_from(value, pid) for pid, value in presets_raw.items()}
    bindings: dict[str, dict[str, str]] = {}
    for slot, binding in bindings_raw.items():
        if not (isinstance(binding, dict) and len(binding) == 1 and next(iter(binding)) in ("presetId", "modelRef")
                and isinstance(next(iter(binding.values())), str)):
            raise SlotRoutingError(f"slotBindings.{slot} must be {{presetId}} or {{modelRef}}")
        bindings[slot] = dict(binding)
    return SlotRouting(presets, bindings)


def config_with_routing(config: llm.ModelConfig, routing: SlotRouting) -> llm.ModelConfig:
    """``config`` with the request's bindings applied: each bound slot becomes the preset it names
    (a ``modelRef`` custom preset or a ``presetId`` server slot), keeping the slot's name; unbound
    slots stay as configured (all-scripted story/plugin/memory when there is no llm.toml).
    Raises SlotRoutingError for a binding whose reference does not exist.
    """
    if routing.is_empty:
        return config
    base = dict(config.slots) or {name: llm.SlotConfig(name=name) for name in (llm.SLOT_STORY, llm.SLOT_PLUGIN, llm.SLOT_MEMORY)}
    slots = dict(base)
    for slot_name, binding in routing.slot_bindings.items():
        kind, ref = next(iter(binding.items()))
        target = routing.custom_presets.get(ref) if kind == "modelRef" else base.get(ref)
        if target is None:
            raise SlotRoutingError(f"slotBindings.{slot_name} names an unknown {kind}: {ref}")
        slots[slot_name] = dataclasses.replace(target, name=slot_name)
    return llm.ModelConfig(slots=slots)


def request_model_router(config: llm.ModelConfig, *, provider_keys: dict[str, str] | None = None,
                         routing: dict[str, Any] | None = None) -> llm.ModelRouter:
    """The ModelRouter of one request's turn: ``config`` with the request's X-Slot-Config applied
    (``routing["slotConfig"]``, decoded JSON) and, when it named one, its model-relay channel
    (``routing["relay"]``; covel.model_relay.transport_for: None where the relay is not served).
    Raises SlotRoutingError when a binding no longer resolves (the request was checked on arrival)."""
    routing = routing or {}
    slot_routing = slot_routing_parse(routing.get("slotConfig"))
    return llm.ModelRouter(config_with_routing(config, slot_routing), provider_keys=provider_keys,
                           relay=model_relay.transport_for(routing.get("relay")))
