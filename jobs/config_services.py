"""Configuration the server reports and lets a client change (spec 004 "Personal configuration API",
配置信息, "Editing a configuration file as text").

- Model configuration: the engine's llm.toml loader (``turns.engine.providers.config``) supplies the
  slots; this module only shapes them for GET /api/llm-config, GET /api/presets and the reload.
- Server settings: a registry of ``scope: "server"`` keys. Effective value = the operator's
  environment variable, else the saved ``jobs.ServerSetting`` row, else the default.
- Provider keys: which ``{PROVIDER}_API_KEY`` variables are set; key text never leaves here.
- Raw files: llm.toml read and written as text with a digest compare-and-swap.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.db import transaction

from covel import desktop, outbound
from covel.errors import ApiError
from sessions import world_packages as wp
from covel.auth import is_operator, owner_checks_enabled, session_owner_checks_enabled
from turns.engine.providers import config as llm

# --------------------------------------------------------------------------------------------
# Model configuration
# --------------------------------------------------------------------------------------------

BUILTIN_SLOTS = (llm.SLOT_STORY, llm.SLOT_PLUGIN, llm.SLOT_MEMORY)
KEYLESS_PROVIDERS = (llm.PROVIDER_SCRIPTED,)
PROVIDER_INFO = {
    llm.PROVIDER_SCRIPTED: {"id": llm.PROVIDER_SCRIPTED, "label": "Scripted (offline)", "protocol": None, "requiresKey": False},
    llm.PROVIDER_OPENAI: {"id": llm.PROVIDER_OPENAI, "label": "OpenAI-compatible", "protocol": llm.PROTOCOL_OPENAI_CHAT,
                          "requiresKey": True},
}


def providers_out(config: llm.ModelConfig) -> dict[str, dict[str, Any]]:
    """``{provider id: {id, label, protocol, requiresKey}}``: the builtin entries plus every free
    provider id llm.toml names (its wire is the slot's protocol; every non-scripted one needs a key
    unless its endpoint takes none, which only a call can tell)."""
    out = {k: dict(v) for k, v in PROVIDER_INFO.items()}
    for slot in config.slots.values():
        if slot.provider not in out:
            out[slot.provider] = {"id": slot.provider, "label": slot.provider, "protocol": slot.protocol,
                                  "requiresKey": True}
    return out


def llm_config_path() -> Path | None:
    """The llm.toml the server loads (COVEL_LLM_TOML, else COVEL_HOME/llm.toml)."""
    return llm.model_config_path(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)


def llm_config_active() -> tuple[llm.ModelConfig, str | None]:
    """(configuration in effect, load error or None)."""
    return llm.model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)


def provider_env_key_name(provider: str) -> str:
    """``openai`` → ``OPENAI_API_KEY`` (hyphens become underscores), as the engine reads it."""
    return f"{provider.upper().replace('-', '_')}_API_KEY"


def slots_effective(config: llm.ModelConfig) -> list[llm.SlotConfig]:
    """The configured slots, or the builtin scripted slots when llm.toml defines none."""
    if config.slots:
        return list(config.slots.values())
    return [llm.SlotConfig(name=name) for name in BUILTIN_SLOTS]


def _server_key_usable(slot: llm.SlotConfig) -> bool:
    """True when the server has a key for the slot's provider AND would send it to the slot's
    endpoint (covel.outbound key rule: only to the provider's trusted origins)."""
    url = slot.base_url or llm.PROVIDER_DEFAULT_BASE_URLS.get(slot.provider)
    return bool(url) and outbound.provider_key_for(slot.provider, url, request_keys=None,
                                                   is_request_supplied=False) is not None


def _slot_out(slot: llm.SlotConfig, *, include_private: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"id": slot.name, "provider": slot.provider, "model": slot.model, "protocol": slot.protocol,
                           "serverKeyConfigured": slot.provider in KEYLESS_PROVIDERS or _server_key_usable(slot)}
    for key, value in (("tag", slot.tag), ("fallback", slot.fallback), ("idleTimeoutMs", slot.idle_timeout_ms)):
        if value is not None:
            out[key] = value
    if include_private and slot.base_url:
        out["baseUrl"] = slot.base_url
    return out


def _reveals_private(request) -> bool:
    """Hosted tiers hide deployment details from callers without the operator token (spec 004)."""
    return not owner_checks_enabled() or is_operator(request)


def slots_out(config: llm.ModelConfig, *, include_private: bool) -> dict[str, dict[str, Any]]:
    """``{slot: {id, provider, model, protocol, serverKeyConfigured, tag?, fallback?, baseUrl?}}``."""
    return {slot.name: _slot_out(slot, include_private=include_private) for slot in slots_effective(config)}


def llm_config_view(request) -> dict[str, Any]:
    """GET /api/llm-config: ``{slots, providers, source, envKeyOverrides, error?}``.

    source: ``{kind: "file"|"builtin", path}``; a file that failed to load reports kind
    "builtin" (the fallback in effect) plus ``error``. Public callers of demo/commercial get no
    source, envKeyOverrides, error or slot baseUrl. envKeyOverrides: providers whose key saved in
    the desktop's keys.env is shadowed by the outside environment (always [] outside desktop mode).
    """
    config, error = llm_config_active()
    private = _reveals_private(request)
    out: dict[str, Any] = {"slots": slots_out(config, include_private=private),
                           "providers": providers_out(config)}
    if private:
        path = llm_config_path()
        is_file = bool(path and path.is_file() and error is None and config.slots)
        out["source"] = {"kind": "file" if is_file else "builtin", "path": str(path) if path else None}
        out["envKeyOverrides"] = env_key_overrides()
        if error:
            out["error"] = error
    return out


def llm_config_reload(request) -> dict[str, Any]:
    """POST /api/llm-config/reload: ``{ok, slots, error?}`` (200 even when ok is false; the
    configuration in effect stays when the file does not parse)."""
    ok, config, error = llm.model_config_reload(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    out: dict[str, Any] = {"ok": ok, "slots": slots_out(config, include_private=_reveals_private(request))}
    if error:
        out["error"] = error
    return out


def presets_list(request) -> dict[str, Any]:
    """GET /api/presets: ``{items: [...]}``, one preset per configured slot (id = slot name).
    Public callers of demo/commercial get no baseUrl."""
    config, _ = llm_config_active()
    return {"items": [_slot_out(slot, include_private=_reveals_private(request)) for slot in slots_effective(config)]}


# --------------------------------------------------------------------------------------------
# Provider keys and deployment info
# --------------------------------------------------------------------------------------------

def provider_keys_configured() -> dict[str, Any]:
    """GET /api/provider-keys: ``{providers: {provider: {configured: true}}}`` from the runtime key
    table (covel.outbound.server_keys): every set, non-empty ``*_API_KEY`` variable
    (``OPENAI_API_KEY`` → ``openai``) and, in desktop mode, the keys saved in keys.env. Never the
    key text."""
    return {"providers": {provider: {"configured": True} for provider in sorted(outbound.server_keys())}}


def env_key_overrides() -> list[str]:
    """Providers whose key saved in the desktop's keys.env is shadowed by the outside environment
    (GET /api/llm-config envKeyOverrides); [] outside desktop mode."""
    return sorted(p for p in desktop.saved_keys() if os.environ.get(desktop.provider_env_name(p), "").strip())


def data_root_current() -> Path:
    """The directory of the database in use: the SQLite file's folder (``<data_root>`` of the
    desktop's config.toml, or SQLITE_PATH's), else COVEL_HOME/data."""
    name = settings.DATABASES.get("default", {}).get("NAME")
    if settings.STORE_BACKEND == "sqlite" and isinstance(name, str) and name and not name.startswith("file:"):
        return Path(name).parent
    return Path(settings.COVEL_HOME) / "data"


def data_root_pending() -> str | None:
    """config.toml's data_root when it differs from the one in use (the next start applies it)."""
    saved = desktop.config_data_root(Path(settings.COVEL_HOME))
    return str(saved) if saved is not None and saved != data_root_current() else None


def config_info(request) -> dict[str, Any]:
    """GET /api/config/info. Path fields are null for public callers of demo/commercial.

    Desktop mode (COVEL_DESKTOP_REST=1): isDesktop true, and the desktop's files —
    configPath (config.toml), keysPath (keys.env), settingsPath (settings.json), proxyPath
    (proxy.json), logsDir — plus pendingDataRoot (config.toml's data_root when a restart is needed
    to use it, else null). Outside desktop mode those fields are null."""
    private = _reveals_private(request)
    home = Path(settings.COVEL_HOME)
    is_desktop = desktop.is_desktop()
    paths = {
        "covelHome": str(home),
        "dataRoot": str(data_root_current()),
        "llmConfigPath": str(llm_config_path()),
        "worldsDir": str(wp.user_worlds_dir(home)),
        "pluginsDir": str(home / "plugins"),
        "mediaRoot": str(settings.MEDIA_ROOT),
    }
    desktop_paths = {
        "configPath": str(desktop.home_file(desktop.CONFIG_TOML)),
        "keysPath": str(desktop.home_file(desktop.KEYS_ENV)),
        "settingsPath": str(desktop.home_file(desktop.SETTINGS_JSON)),
        "proxyPath": str(desktop.home_file(desktop.PROXY_JSON)),
        "logsDir": str(desktop.home_file(desktop.LOGS_DIR)),
        "pendingDataRoot": data_root_pending(),
    }
    paths.update({key: (value if is_desktop else None) for key, value in desktop_paths.items()})
    return {
        "isDesktop": is_desktop,
        "requiresAuth": session_owner_checks_enabled(),
        "deploymentTier": settings.DEPLOYMENT_TIER,
        "storeBackend": settings.STORE_BACKEND,
        **{key: (value if private else None) for key, value in paths.items()},
    }


# --------------------------------------------------------------------------------------------
# Server settings
# --------------------------------------------------------------------------------------------

CODE_OPERATOR_ONLY = "server_settings_operator_only"
CODE_INVALID_BODY = "invalid_server_settings_body"
CODE_UNKNOWN = "unknown_server_setting"
CODE_INVALID_VALUE = "invalid_server_setting_value"
CODE_FIXED = "server_setting_fixed"
CODE_DESKTOP_TOKEN = "desktop_rest_token_invalid"

TRACE_RETENTION = "diagnostics.traceRetention"
TRUST_SOURCES = "trust.sources"
TRACE_RETENTION_CHOICES = ("7", "30", "90", "keep")
TRACE_RETENTION_KEEP = "keep"
_SOURCE_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38})(?:/[a-z0-9._-]{1,100})?$")
_GITHUB_PREFIXES = ("https://github.com/", "http://github.com/", "github.com/")


def trust_source_normalize(raw: Any) -> str | None:
    """A GitHub owner or owner/repo, lower-cased, without URL prefix, ``.git`` or slashes at the
    ends; None when it is not one."""
    if not isinstance(raw, str):
        return None
    text = raw.strip().lower()
    for prefix in _GITHUB_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip("/")
    if text.endswith(".git"):
        text = text[:-4]
    return text if _SOURCE_RE.match(text) and text.count("/") <= 1 else None


def _trace_retention_validate(value: Any) -> str | None:
    return value if isinstance(value, str) and value in TRACE_RETENTION_CHOICES else None


def _trust_sources_validate(value: Any) -> list[str] | None:
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for item in value:
        normalized = trust_source_normalize(item)
        if normalized is None:
            return None
        if normalized not in out:
            out.append(normalized)
    return out


def _trace_retention_env() -> str | None:
    days = settings.COVEL_TRACE_RETENTION_DAYS
    if days is None:
        return None
    return TRACE_RETENTION_KEEP if days == 0 else str(days)


def _trust_sources_env() -> list[str] | None:
    raw = settings.COVEL_TRUSTED_SOURCES
    if raw is None:
        return None
    return [s for s in (trust_source_normalize(part) for part in raw.split(",")) if s]


@dataclass(frozen=True)
class ServerSettingSpec:
    """One registry entry: default, validator (value → normalized value or None) and the
    environment variable reader that fixes it (None when unset)."""

    key: str
    default: Any
    validate: Callable[[Any], Any]
    env_value: Callable[[], Any]


SERVER_SETTINGS: dict[str, ServerSettingSpec] = {
    TRACE_RETENTION: ServerSettingSpec(TRACE_RETENTION, "30", _trace_retention_validate, _trace_retention_env),
    TRUST_SOURCES: ServerSettingSpec(TRUST_SOURCES, [], _trust_sources_validate, _trust_sources_env),
}


def _settable() -> bool:
    return not owner_checks_enabled()


def server_settings_view() -> dict[str, Any]:
    """GET /api/config/server-settings: ``{settings: {key: {value, source, settable}}}``; source is
    env | setting | default; settable is false when the env fixes the key and in demo/commercial."""
    from jobs.models import ServerSetting

    saved = {row.key: row.value for row in ServerSetting.objects.filter(key__in=list(SERVER_SETTINGS))}
    out: dict[str, Any] = {}
    for key, spec in SERVER_SETTINGS.items():
        env_value = spec.env_value()
        if env_value is not None:
            entry = {"value": env_value, "source": "env", "settable": False}
        elif key in saved and spec.validate(saved[key]) is not None:
            entry = {"value": spec.validate(saved[key]), "source": "setting", "settable": _settable()}
        else:
            entry = {"value": spec.default, "source": "default", "settable": _settable()}
        out[key] = entry
    return {"settings": out}


def server_setting_value(key: str) -> Any:
    """The effective value of one registry key (for the code that enforces it, e.g. trace pruning)."""
    return server_settings_view()["settings"][key]["value"]


def server_settings_update(request, body: Any) -> dict[str, Any]:
    """PUT /api/config/server-settings body ``{entries: {key: value | null}}``; all or nothing.

    Raises 403 server_settings_operator_only (demo/commercial, any token), 401
    desktop_rest_token_invalid (self tier with COVEL_DESKTOP_REST_TOKEN set but not presented),
    400 invalid_server_settings_body, 400 unknown_server_setting, 409 server_setting_fixed,
    400 invalid_server_setting_value (details.key on the last three). Returns the GET body.
    """
    from jobs.models import ServerSetting

    if owner_checks_enabled():
        raise ApiError(403, CODE_OPERATOR_ONLY, "Server settings are set by the operator in this deployment")
    if settings.COVEL_OPERATOR_TOKEN and not is_operator(request):
        raise ApiError(401, CODE_DESKTOP_TOKEN, "The desktop bearer token is missing or wrong")
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, dict):
        raise ApiError(400, CODE_INVALID_BODY, "Body must be { entries: object }")
    writes: dict[str, Any] = {}
    for key, value in entries.items():
        spec = SERVER_SETTINGS.get(key)
        if spec is None:
            raise ApiError(400, CODE_UNKNOWN, f"Not a server setting: {key}", {"key": key})
        if spec.env_value() is not None:
            raise ApiError(409, CODE_FIXED, f"{key} is fixed by the server environment", {"key": key})
        if value is None:
            writes[key] = None
            continue
        normalized = spec.validate(value)
        if normalized is None:
            raise ApiError(400, CODE_INVALID_VALUE, f"Invalid value for {key}", {"key": key})
        writes[key] = normalized
    with transaction.atomic():
        for key, value in writes.items():
            if value is None:
                ServerSetting.objects.filter(key=key).delete()
            else:
                ServerSetting.objects.update_or_create(key=key, defaults={"value": value})
    return server_settings_view()


# --------------------------------------------------------------------------------------------
# Raw configuration files
# --------------------------------------------------------------------------------------------

CODE_FILE_UNKNOWN = "config_file_unknown"
CODE_FILE_REQUEST_INVALID = "config_file_request_invalid"
CODE_FILE_TOO_LARGE = "config_file_too_large"
CODE_FILE_INVALID = "config_file_invalid"
CODE_FILE_CHANGED = "config_file_changed"
RAW_FILE_MAX_BYTES = 256 * 1024
APPLIES_RELOAD = "reload"
APPLIES_RESTART = "restart"
CONFIG_TOML_STARTER = """\
# Covel desktop configuration. Read when the server starts: changes apply after a restart.
# data_root: the folder of the database (covel.db); PUT /api/config/data-root rewrites this line.
# data_root = "~/.covel/data"
"""
LLM_TOML_STARTER = """\
# Model slots of this Covel server. One table per slot:
#   [covel.<slot>]
#   provider = "openai"            # "openai" | "scripted"
#   model = "gpt-4o-mini"
#   baseUrl = "https://api.openai.com/v1"
#   protocol = "openai-chat-v1"
#   tag = "fast"                   # optional label
#   fallback = "plugin"            # optional: slot tried when this one cannot answer
# Keys come from {PROVIDER}_API_KEY environment variables (OPENAI_API_KEY).
# These tables match the built-in default: every slot answers offline.

[covel.story]
provider = "scripted"

[covel.plugin]
provider = "scripted"

[covel.memory]
provider = "scripted"
"""

_raw_lock = threading.Lock()


def _raw_names() -> tuple[str, ...]:
    """The editable files: llm.toml, and config.toml in desktop mode (keys.env never)."""
    return (llm.LLM_TOML, desktop.CONFIG_TOML) if desktop.is_desktop() else (llm.LLM_TOML,)


def _raw_applies(name: str) -> str:
    return APPLIES_RESTART if name == desktop.CONFIG_TOML else APPLIES_RELOAD


def _raw_path(name: str) -> Path:
    if name not in _raw_names():
        raise ApiError(404, CODE_FILE_UNKNOWN, f"Not an editable configuration file: {name}")
    if name == desktop.CONFIG_TOML:
        return desktop.home_file(desktop.CONFIG_TOML)
    path = llm_config_path()
    if path is None:  # pragma: no cover - COVEL_HOME always has a value
        raise ApiError(404, CODE_FILE_UNKNOWN, f"Not an editable configuration file: {name}")
    return path


def _raw_check(name: str, content: str) -> None:
    """Parse the text as its loader will (llm.toml: the model config parser; config.toml:
    covel.desktop's); 400 config_file_invalid when it cannot be used."""
    try:
        if name == desktop.CONFIG_TOML:
            desktop.config_toml_parse(content)
        else:
            llm.model_config_parse(content)
    except (llm.ModelConfigError, ValueError) as exc:
        raise ApiError(400, CODE_FILE_INVALID, str(exc)) from None


def content_digest(data: bytes) -> str:
    """``sha256:<hex>`` of the file bytes; a missing file has the digest of b""."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def raw_files_list() -> dict[str, Any]:
    """GET /api/config/raw: ``{items: [{name, path, exists, applies}]}``: llm.toml (applies
    "reload"), and in desktop mode config.toml (applies "restart"); keys.env is never listed."""
    items = []
    for name in _raw_names():
        path = _raw_path(name)
        items.append({"name": name, "path": str(path), "exists": path.is_file(), "applies": _raw_applies(name)})
    return {"items": items}


def raw_file_get(name: str) -> dict[str, Any]:
    """GET /api/config/raw/:name: ``{name, path, exists, applies, content, digest}``; a missing file
    reads as the starter text with the digest of an empty file. 404 config_file_unknown."""
    path = _raw_path(name)
    data = _read_bytes(path)
    starter = CONFIG_TOML_STARTER if name == desktop.CONFIG_TOML else LLM_TOML_STARTER
    return {"name": name, "path": str(path), "exists": data is not None, "applies": _raw_applies(name),
            "content": data.decode("utf-8", "replace") if data is not None else starter,
            "digest": content_digest(data or b"")}


def raw_file_put(request, name: str, body: Any) -> dict[str, Any]:
    """PUT /api/config/raw/:name with ``{content, baseDigest}``.

    Order (spec 004): parse with the loader's parser (400 config_file_invalid, nothing written),
    compare baseDigest with the file on disk (409 config_file_changed), copy the file to
    ``<name>.bak``, replace it atomically, reload llm.toml. Earlier checks: 404
    config_file_unknown, 400 config_file_request_invalid, 413 config_file_too_large (256 KiB).
    Returns the GET fields plus ``backup`` (path or null when there was no file) and ``reload`` (null for config.toml).
    """
    path = _raw_path(name)
    content = body.get("content") if isinstance(body, dict) else None
    base_digest = body.get("baseDigest") if isinstance(body, dict) else None
    if not isinstance(content, str) or not isinstance(base_digest, str):
        raise ApiError(400, CODE_FILE_REQUEST_INVALID, "content and baseDigest must be strings")
    encoded = content.encode("utf-8")
    if len(encoded) > RAW_FILE_MAX_BYTES:
        raise ApiError(413, CODE_FILE_TOO_LARGE, f"The file exceeds {RAW_FILE_MAX_BYTES} bytes")
    _raw_check(name, content)
    path.parent.mkdir(parents=True, exist_ok=True)
    backup: Path | None = None
    # A thread lock for this process and an flock for other processes on the same COVEL_HOME:
    # the digest check and the replace must not interleave with another writer.
    with _raw_lock, open(path.with_name(path.name + ".lock"), "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        current = _read_bytes(path)
        if content_digest(current or b"") != base_digest:
            raise ApiError(409, CODE_FILE_CHANGED, "The file changed after it was read; reload it and retry")
        if current is not None:
            backup = path.with_name(path.name + ".bak")
            shutil.copy2(path, backup)
        desktop.atomic_write(path, encoded)
    out = raw_file_get(name)
    out["backup"] = str(backup) if backup else None
    # config.toml is read at start-up only: nothing to reload (applies "restart").
    out["reload"] = llm_config_reload(request) if name == llm.LLM_TOML else None
    return out


def raw_files_authorize(request) -> None:
    """The install endpoints' gate (spec 004): 401 operator_token_required in demo/commercial
    without the operator token; 401 unauthorized in the self tier when COVEL_DESKTOP_REST_TOKEN is
    set and not presented; 403 install_api_disabled when COVEL_INSTALL_API_ENABLED is off."""
    from covel.auth import require_operator

    require_operator(request)
    if settings.COVEL_OPERATOR_TOKEN and not is_operator(request):
        raise ApiError(401, "unauthorized", "This endpoint requires the bearer token")
    if not settings.COVEL_INSTALL_API_ENABLED:
        raise ApiError(403, "install_api_disabled", "The configuration file API is disabled")
