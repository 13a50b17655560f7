"""Model slots from ``COVEL_HOME/llm.toml`` and the client that serves a runtime.

File shape (one table per slot, spec 004 "模型配置"):

    [covel.story]
    provider = "openai"            # a free provider id ("openai", "deepseek", "ollama", "my-lab"...);
                                   # "scripted" is the offline model. It names the key: DEEPSEEK_API_KEY
    model = "gpt-4o-mini"
    baseUrl = "https://api.openai.com/v1"   # required for providers without a known endpoint
    protocol = "openai-chat-v1"    # the wire: the only protocol this server speaks (the default)
    tag = "fast"                   # optional label
    fallback = "plugin"            # optional: another slot tried when this one cannot answer

Without the file every slot is ``scripted``. Keys come from the per-request ``X-Provider-Keys``
map ({provider: key}), which the caller passes in memory and nothing stores, or from
``{PROVIDER}_API_KEY`` environment variables (``OPENAI_API_KEY``) — a server key only for a slot
whose endpoint origin is trusted for the provider (covel.outbound: ``COVEL_PROVIDER_ORIGINS``,
OpenAI's own ``https://api.openai.com`` by default), never for a slot a request supplied
(``SlotConfig.is_request_supplied``). Slot choice for a runtime:
request ``model`` > ``session.metadata.runtimeModelOverrides[runtimeId]`` > the manifest's
``agent.model`` > ``story`` for story runtimes, ``plugin`` otherwise.
"""

from __future__ import annotations

import re
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from covel import metrics, outbound
from turns.engine.providers.base import ModelClient, ModelError, ModelRequest, StreamItem, TextDelta
from turns.engine.providers.scripted import ScriptedClient

LLM_TOML = "llm.toml"
PROVIDER_SCRIPTED = "scripted"
PROVIDER_OPENAI = "openai"
PROTOCOL_OPENAI_CHAT = "openai-chat-v1"
SLOT_STORY = "story"
SLOT_PLUGIN = "plugin"
SLOT_MEMORY = "memory"
#: Wire protocols a non-scripted slot may name (``protocol``); the provider id itself is free.
PROTOCOLS = (PROTOCOL_OPENAI_CHAT,)
PROVIDER_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: The endpoint of a provider slot that names no ``baseUrl``.
PROVIDER_DEFAULT_BASE_URLS = {PROVIDER_OPENAI: "https://api.openai.com/v1"}


class ModelConfigError(ValueError):
    """llm.toml is malformed (bad TOML, a malformed provider id, an unusable baseUrl, fallback cycle)."""


@dataclass(frozen=True)
class SlotConfig:
    name: str
    provider: str = PROVIDER_SCRIPTED
    model: str = ""
    base_url: str | None = None
    protocol: str = PROTOCOL_OPENAI_CHAT
    tag: str | None = None
    fallback: str | None = None
    idle_timeout_ms: int | None = None
    #: True for a slot a client described (X-Slot-Config ``customPresets``): its endpoint passes
    #: the SSRF guard and never receives a server key (covel.outbound).
    is_request_supplied: bool = False

    @property
    def endpoint(self) -> str | None:
        """The base URL calls go to: ``baseUrl``, else the provider's default (None for scripted)."""
        return self.base_url or PROVIDER_DEFAULT_BASE_URLS.get(self.provider)


@dataclass
class ModelConfig:
    """Parsed llm.toml. ``slots`` empty means "no file": every slot is scripted."""

    slots: dict[str, SlotConfig] = field(default_factory=dict)

    def slot(self, name: str) -> SlotConfig:
        """The named slot; an unknown name (or no file) is a scripted slot of that name."""
        if name in self.slots:
            return self.slots[name]
        if not self.slots:
            return SlotConfig(name=name)
        raise ModelConfigError(f"model slot {name!r} is not configured; add [covel.{name}] to llm.toml")

    def has_slot(self, name: str) -> bool:
        return not self.slots or name in self.slots


def provider_base_url_valid(url: Any) -> bool:
    """True when ``url`` can address a model provider: an http(s) URL with a host and a valid port,
    no whitespace or control characters (the HTTP client cannot send anything else; a request with
    such a URL would fail as a 500 instead of a configuration error)."""
    if not isinstance(url, str) or not url.isprintable() or any(ch.isspace() for ch in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def model_config_parse(text: str) -> ModelConfig:
    """Parse llm.toml text. Raises ModelConfigError (bad TOML, nesting too deep for the parser,
    unknown provider or protocol, unusable ``baseUrl``, dangling or cyclic ``fallback``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelConfigError(f"llm.toml is not valid TOML: {exc}") from None
    except RecursionError:
        raise ModelConfigError("llm.toml is nested too deeply") from None
    tables = data.get("covel") or {}
    if not isinstance(tables, dict):
        raise ModelConfigError("llm.toml: [covel] must be a table of slots")
    slots: dict[str, SlotConfig] = {}
    for name, raw in tables.items():
        if not isinstance(raw, dict):
            raise ModelConfigError(f"llm.toml: [covel.{name}] must be a table")
        provider = str(raw.get("provider", PROVIDER_SCRIPTED))
        if not PROVIDER_ID_RE.match(provider):
            raise ModelConfigError(f"llm.toml: [covel.{name}] provider {provider!r} must be an id of lowercase "
                                   "letters, digits, '.', '_' or '-'")
        # An unknown protocol is the slot's problem, not the file's: runtimes that use the slot fail
        # loudly (protocol_unsupported) while the other slots keep working.
        protocol = str(raw.get("protocol", PROTOCOL_OPENAI_CHAT))
        base_url = raw.get("baseUrl")
        if base_url is not None and not provider_base_url_valid(base_url):
            raise ModelConfigError(f"llm.toml: [covel.{name}] baseUrl must be an http(s) URL with a host")
        idle = raw.get("idleTimeoutMs")
        slots[name] = SlotConfig(
            name=name,
            provider=provider,
            model=str(raw.get("model", "")),
            base_url=base_url,
            protocol=protocol,
            tag=raw.get("tag"),
            fallback=raw.get("fallback"),
            idle_timeout_ms=int(idle) if isinstance(idle, int) else None,
        )
    for slot in slots.values():
        seen = {slot.name}
        current = slot
        while current.fallback:
            if current.fallback not in slots:
                raise ModelConfigError(f"llm.toml: [covel.{current.name}] fallback {current.fallback!r} is not a slot")
            if current.fallback in seen:
                raise ModelConfigError(f"llm.toml: fallback cycle through {current.fallback!r}")
            seen.add(current.fallback)
            current = slots[current.fallback]
    return ModelConfig(slots=slots)


def model_config_load(covel_home: Path | str | None, *, path: Path | str | None = None) -> ModelConfig:
    """Read ``path`` or ``COVEL_HOME/llm.toml``; a missing file gives the all-scripted config."""
    target = Path(path) if path else (Path(covel_home) / LLM_TOML if covel_home else None)
    if target is None or not target.is_file():
        return ModelConfig()
    return model_config_parse(target.read_text(encoding="utf-8"))


def slot_chain_has_scripted(config: ModelConfig, slot: SlotConfig) -> bool:
    """Whether a call on ``slot`` can reach the offline scripted provider: the slot itself or one
    of its ``fallback`` slots (ModelRouter.stream's order) is scripted. A dangling fallback ends
    the chain (the router raises there); llm.toml parsing refuses cycles, a guard stops them anyway."""
    current: SlotConfig | None = slot
    seen: set[str] = set()
    while current is not None and current.name not in seen:
        if current.provider == PROVIDER_SCRIPTED:
            return True
        seen.add(current.name)
        if not current.fallback:
            return False
        try:
            current = config.slot(current.fallback)
        except ModelConfigError:
            return False
    return False


def slot_for_runtime(
    *,
    config: ModelConfig,
    runtime_id: str,
    is_story: bool,
    request_model: str | None = None,
    overrides: dict[str, Any] | None = None,
    manifest_model: str | None = None,
) -> tuple[SlotConfig, str]:
    """Resolve (slot, model id): request model > runtimeModelOverrides > agent.model > default.

    A request model that names no slot is taken as a model id on the default slot.
    """
    default = SLOT_STORY if is_story else SLOT_PLUGIN
    if request_model:
        if config.has_slot(request_model):
            slot = config.slot(request_model)
            return slot, slot.model
        slot = config.slot(default) if config.has_slot(default) else config.slot(next(iter(config.slots)))
        return slot, request_model
    for candidate in ((overrides or {}).get(runtime_id), manifest_model):
        if isinstance(candidate, str) and candidate and config.has_slot(candidate):
            slot = config.slot(candidate)
            return slot, slot.model
    if config.has_slot(default):
        slot = config.slot(default)
    elif config.has_slot(SLOT_STORY):
        slot = config.slot(SLOT_STORY)
    else:
        slot = config.slot(next(iter(config.slots)))
    return slot, slot.model


class ModelRouter:
    """Hands out a client per slot and runs a call with its fallback chain.

    A call falls back only when the primary fails before streaming anything and the failure is
    not an idle timeout (spec: no retry on idle). Thread-safe.
    """

    def __init__(self, config: ModelConfig | None = None, *, provider_keys: dict[str, str] | None = None,
                 clients: dict[str, ModelClient] | None = None, relay: Any = None) -> None:
        """relay: the request's model-relay transport (covel.model_relay.transport_for), given to the
        clients of request-supplied slots (spec 004 §本地模型中继); None relays nothing."""
        self.config = config or ModelConfig()
        self.provider_keys = dict(provider_keys or {})
        self.relay = relay
        self._clients: dict[str, ModelClient] = dict(clients or {})

    def client_for(self, slot: SlotConfig) -> ModelClient:
        """The client for ``slot``: one injected for its provider, else one per endpoint (a slot a
        request supplied gets its own client, which guards its endpoint)."""
        if slot.provider in self._clients:
            return self._clients[slot.provider]
        key = slot.provider + "|" + (slot.base_url or "") + ("|request" if slot.is_request_supplied else "")
        if key in self._clients:
            return self._clients[key]
        if slot.provider == PROVIDER_SCRIPTED:
            client: ModelClient = ScriptedClient()
        elif slot.protocol not in PROTOCOLS:
            raise ModelError("protocol_unsupported", f"slot {slot.name!r}: protocol {slot.protocol!r} is not supported "
                             f"(this server speaks {', '.join(PROTOCOLS)})")
        elif not slot.endpoint:
            raise ModelError("not_configured", f"slot {slot.name!r}: provider {slot.provider!r} has no known endpoint; "
                             "set baseUrl in llm.toml")
        else:
            from turns.engine.providers.openai_chat import OpenAIChatClient

            client = OpenAIChatClient(base_url=slot.endpoint, idle_timeout_ms=slot.idle_timeout_ms,
                                      is_request_supplied=slot.is_request_supplied,
                                      relay=self.relay if slot.is_request_supplied else None)
        self._clients[key] = client
        return client

    def key_for(self, slot: SlotConfig) -> outbound.ProviderKey | None:
        """The key a call on ``slot`` carries: this request's ``X-Provider-Keys`` entry for the
        provider, else the server's ``{PROVIDER}_API_KEY`` when the slot is the operator's and its
        endpoint origin is trusted for the provider (covel.outbound.provider_key_for)."""
        if slot.provider == PROVIDER_SCRIPTED or not slot.endpoint:
            return None
        return outbound.provider_key_for(slot.provider, slot.endpoint, request_keys=self.provider_keys,
                                         is_request_supplied=slot.is_request_supplied)

    def stream(self, slot: SlotConfig, model: str, request: ModelRequest) -> Iterator[StreamItem]:
        """Stream one call on ``slot`` (model id ``model``), falling back as described above."""
        current: SlotConfig | None = slot
        current_model = model
        while current is not None:
            request.slot = current.name
            request.model = current_model or current.model
            request.api_key = self.key_for(current)
            if current.provider != PROVIDER_SCRIPTED and not request.api_key and current.base_url is None \
                    and current.endpoint is not None:
                error: ModelError | None = ModelError(
                    "no_key", f"no API key for provider {current.provider!r} (set {outbound.provider_env_key_name(current.provider)})")
            else:
                error = None
                started = False
                called = time.monotonic()
                try:
                    for item in self.client_for(current).stream(request):
                        if isinstance(item, TextDelta):
                            started = True
                        yield item
                    metrics.model_call_observe(provider=current.provider, seconds=time.monotonic() - called)
                    return
                except ModelError as exc:
                    metrics.model_call_observe(provider=current.provider, seconds=time.monotonic() - called,
                                               error_code=exc.code)
                    if started or exc.code == "idle_timeout":
                        raise
                    error = exc
            if current.fallback and error is not None:
                current = self.config.slot(current.fallback)
                current_model = current.model
                continue
            raise error  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# The configuration in effect (GET /api/llm-config, POST /api/llm-config/reload; spec 004
# "Personal configuration API"): loaded once per file path, replaced only by a reload that parses.
# --------------------------------------------------------------------------------------------

_active_lock = threading.Lock()
_active: dict[str, tuple[ModelConfig, str | None, tuple[float, int] | None]] = {}


def model_config_path(covel_home: Path | str | None, *, path: Path | str | None = None) -> Path | None:
    """The llm.toml path the server reads: ``path`` (COVEL_LLM_TOML) or ``COVEL_HOME/llm.toml``."""
    if path:
        return Path(path).expanduser().resolve()
    return (Path(covel_home) / LLM_TOML) if covel_home else None


def _file_stamp(target: Path | None) -> tuple[float, int] | None:
    try:
        stat = target.stat() if target else None
    except OSError:
        return None
    return (stat.st_mtime, stat.st_size) if stat else None


def model_config_active(covel_home: Path | str | None, *, path: Path | str | None = None) -> tuple[ModelConfig, str | None]:
    """(config in effect, load error or None), cached per process and re-read when the file changes.

    A file that does not parse never replaces a working configuration: the previous config stays in
    effect (the all-scripted default on first load) and the error text is returned (spec 004
    §Personal configuration API: 无效时继续使用当前生效的配置). Because the cache follows the file's
    mtime/size, every process — web and Celery workers alike — sees an edit without a restart.
    """
    target = model_config_path(covel_home, path=path)
    key = str(target)
    stamp = _file_stamp(target)
    with _active_lock:
        cached = _active.get(key)
        if cached is not None and cached[2] == stamp:
            return cached[0], cached[1]
        try:
            entry = (model_config_load(covel_home, path=target), None, stamp)
        except ModelConfigError as exc:
            previous = cached[0] if cached is not None else ModelConfig()
            entry = (previous, str(exc), stamp)
        _active[key] = entry
        return entry[0], entry[1]


def model_config_reload(covel_home: Path | str | None, *, path: Path | str | None = None) -> tuple[bool, ModelConfig, str | None]:
    """Re-read the file. Returns (ok, config in effect, error). A file that does not parse leaves
    the current configuration in effect (ok False); a missing file means the all-scripted default."""
    target = model_config_path(covel_home, path=path)
    key = str(target)
    try:
        config = model_config_load(covel_home, path=target)
    except ModelConfigError as exc:
        current, _ = model_config_active(covel_home, path=path)
        return False, current, str(exc)
    with _active_lock:
        _active[key] = (config, None, _file_stamp(target))
    return True, config, None
