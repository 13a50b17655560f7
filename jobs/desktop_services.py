"""Desktop mode routes' logic (spec 004 配置信息 "仅桌面" rows, §桌面端的文件管理 API, GET/PUT
/api/config/keys, "Opening the effective configuration"): provider keys in keys.env, the
SettingsStore in settings.json, the outbound proxy, the app-update check, config.toml's data_root
and opening a configuration folder or file. The files themselves are covel.desktop / covel.proxy.

Gate of every route here (``desktop_authorize``): outside desktop mode (``COVEL_DESKTOP_REST`` not
1) 403 ``desktop_rest_disabled`` — the spec names no code for it — except POST
/api/config/open-folder, which answers 400 ``open_target_unavailable`` (there is no desktop to open
it on). With ``COVEL_DESKTOP_REST_TOKEN`` set, a request without ``Authorization: Bearer <that
token>`` is 401 ``desktop_rest_token_invalid``.

Writes are atomic file replacements (covel.desktop.atomic_write), validated as a whole first: an
invalid body writes nothing. A file that exists but cannot be read is a server fault (500 through
the global handler, logged), never a 400, and is left as it is (spec 004 配置端点的其他规则).
"""
from __future__ import annotations

import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from covel import desktop, outbound, proxy
from covel.errors import ApiError
from jobs.config_services import CODE_DESKTOP_TOKEN, LLM_TOML_STARTER, data_root_current, llm_config_path


CODE_DISABLED = "desktop_rest_disabled"
CODE_TOKEN = CODE_DESKTOP_TOKEN
CODE_KEYS_INVALID = "invalid_config_keys"
CODE_SETTINGS_INVALID = "invalid_settings_body"
CODE_PROXY_INVALID = "invalid_proxy_config"
CODE_DATA_ROOT_INVALID = "invalid_data_root"
CODE_OPEN_UNAVAILABLE = "open_target_unavailable"
CODE_UPDATE_UNREACHABLE = "app_update_unreachable"
CODE_UPDATE_NOT_FOUND = "app_update_not_found"
CODE_UPDATE_UPSTREAM = "app_update_upstream_error"

TARGET_CONFIG = "config"
TARGET_DATA = "data"
TARGET_LOGS = "logs"
TARGET_LLM_TOML = "llm.toml"
TARGET_KEYS_ENV = "keys.env"
OPEN_TARGETS = (TARGET_CONFIG, TARGET_DATA, TARGET_LOGS, TARGET_LLM_TOML, TARGET_KEYS_ENV)
PROVIDER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
APP_UPDATE_MAX_BYTES = 1024 * 1024
_settings_lock = threading.Lock()
_proxy_lock = threading.Lock()


def desktop_authorize(request, *, disabled_code: str = CODE_DISABLED, disabled_status: int = 403) -> None:
    """403 desktop_rest_disabled outside desktop mode (open-folder passes 400
    open_target_unavailable), then 401 desktop_rest_token_invalid when COVEL_DESKTOP_REST_TOKEN is
    set and the request's ``Authorization: Bearer`` is not it (spec 004: 必须携带匹配的 Bearer token)."""
    if not desktop.is_desktop():
        raise ApiError(disabled_status, disabled_code, "This route belongs to the desktop mode (COVEL_DESKTOP_REST=1)")
    expected = settings.COVEL_OPERATOR_TOKEN
    if not expected:
        return
    header = request.headers.get("Authorization", "")
    presented = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise ApiError(401, CODE_TOKEN, "The desktop bearer token is missing or wrong")


# --- keys.env ---------------------------------------------------------------------------------


def config_keys_list() -> dict[str, Any]:
    """GET /api/config/keys: ``{items: [provider, ...]}`` (sorted) of the keys saved in keys.env;
    never a value, masked or not."""
    return {"items": sorted(desktop.saved_keys())}


def config_keys_update(body: Any) -> dict[str, Any]:
    """PUT /api/config/keys with ``{provider: string | null}``; "" or null deletes the provider's
    saved key. The whole body is checked first: not an object, a provider id that is not
    ``[A-Za-z0-9][A-Za-z0-9_-]*``, a value with a line break or of another type → 400
    invalid_config_keys (details.provider), and neither the file nor the runtime keys change.
    Then keys.env is replaced atomically; the runtime keys follow the file. Keys of the outside
    environment keep winning (covel.outbound.server_key). Returns the GET body."""
    if not isinstance(body, dict):
        raise ApiError(400, CODE_KEYS_INVALID, "The body must be an object { provider: key | null }")
    changes: dict[str, str | None] = {}
    for provider, value in body.items():
        if not PROVIDER_RE.match(provider):
            raise ApiError(400, CODE_KEYS_INVALID, f"Not a provider id: {provider!r}", {"provider": provider})
        if value is not None and not isinstance(value, str):
            raise ApiError(400, CODE_KEYS_INVALID, f"The key of {provider} must be a string or null", {"provider": provider})
        if isinstance(value, str) and ("\n" in value or "\r" in value):
            raise ApiError(400, CODE_KEYS_INVALID, f"The key of {provider} holds a line break", {"provider": provider})
        normalized = provider.lower().replace("_", "-")
        changes[normalized] = value.strip() if isinstance(value, str) and value.strip() else None
    keys = desktop.saved_keys()
    for provider, value in changes.items():
        if value is None:
            keys.pop(provider, None)
        else:
            keys[provider] = value
    desktop.saved_keys_write(keys)
    return config_keys_list()


# --- settings.json ----------------------------------------------------------------------------


def _settings_read() -> dict[str, Any]:
    path = desktop.home_file(desktop.SETTINGS_JSON)
    try:
        raw = path.read_text("utf-8")
    except FileNotFoundError:
        return {}
    data = json.loads(raw)  # a corrupt file is a server fault (500), and stays as it is
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def config_settings_get() -> dict[str, Any]:
    """GET /api/config/settings: ``{entries: {key: value}}`` from settings.json ({} without it)."""
    return {"entries": _settings_read()}


def config_settings_update(body: Any) -> dict[str, Any]:
    """PUT /api/config/settings with ``{entries: {key: value | null}}``: each value is saved, null
    removes the key; settings.json is replaced atomically. 400 invalid_settings_body when the body
    is not ``{entries: object}``. Returns the GET body."""
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, dict) or set(body) - {"entries"}:
        raise ApiError(400, CODE_SETTINGS_INVALID, "Body must be { entries: object }")
    with _settings_lock:
        data = _settings_read()
        for key, value in entries.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        encoded = json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8") + b"\n"
        desktop.atomic_write(desktop.home_file(desktop.SETTINGS_JSON), encoded)
    return {"entries": data}


# --- proxy ------------------------------------------------------------------------------------


def config_proxy_get() -> dict[str, Any]:
    """GET /api/config/proxy: ``{mode, url?, effective, systemAvailable}``. url: the saved proxy
    (password shown as ***); effective: "direct" or the proxy an https request uses now;
    systemAvailable: the system / environment defines a proxy."""
    setting = proxy.proxy_active()
    out: dict[str, Any] = {"mode": setting.mode}
    if setting.url:
        out["url"] = proxy.url_masked(setting.url)
    out["effective"] = proxy.proxy_effective()
    out["systemAvailable"] = bool(proxy.system_proxies())
    return out


def config_proxy_update(body: Any) -> dict[str, Any]:
    """PUT /api/config/proxy with ``{mode: direct|system|http|socks, url?}``, in the spec's order:
    prepare and check the transport (400 invalid_proxy_config with the diagnosis), write proxy.json
    atomically, apply in this process. When the write fails, the old transport and the GET answer
    stay as they were (the prepared one is disposed; the OSError becomes a 500). Returns the GET body."""
    try:
        setting = proxy.proxy_setting_from(body)
        prepared = proxy.proxy_prepare(setting)
    except proxy.ProxySettingInvalid as exc:
        raise ApiError(400, CODE_PROXY_INVALID, str(exc)) from None
    with _proxy_lock:
        try:
            data = json.dumps(setting.as_file()).encode("utf-8") + b"\n"
            path = desktop.home_file(desktop.PROXY_JSON)
            desktop.atomic_write(path, data)
            os.chmod(path, 0o600)  # the URL may carry a password
        except BaseException:
            prepared.dispose()
            raise
        prepared.commit()
    return config_proxy_get()


# --- app update -------------------------------------------------------------------------------


def app_update_latest() -> dict[str, Any]:
    """GET /api/app-update/latest: the latest stable release of COVEL_APP_UPDATE_REPOSITORY from
    ``{COVEL_APP_UPDATE_API_URL}/repos/<owner>/<repo>/releases/latest`` (GitHub leaves drafts and
    pre-releases out of it), through the outbound proxy. Returns ``{version, name, publishedAt}``
    (version: the tag without a leading "v"). Raises 502 app_update_unreachable (no answer:
    offline, refused, timeout; details.reason), 404 app_update_not_found (no stable release),
    502 app_update_upstream_error (another status or a malformed answer; details.status)."""
    base = settings.COVEL_APP_UPDATE_API_URL.rstrip("/")
    url = f"{base}/repos/{settings.COVEL_APP_UPDATE_REPOSITORY}/releases/latest"
    timeout = float(settings.COVEL_APP_UPDATE_TIMEOUT_SECONDS)
    try:
        with outbound.send("GET", url, is_request_supplied=False, timeout=httpx.Timeout(timeout),
                           headers={"Accept": "application/vnd.github+json", "User-Agent": "covel-app-update"}) as response:
            status = response.status_code
            raw = outbound.read_limited(response, APP_UPDATE_MAX_BYTES) if status == 200 else b""
    except outbound.OutboundError as exc:
        raise ApiError(502, CODE_UPDATE_UNREACHABLE, f"The release server could not be reached ({exc.code}); "
                       "check the network or the proxy (GET /api/config/proxy)", {"reason": exc.code}) from None
    except httpx.HTTPError as exc:
        raise ApiError(502, CODE_UPDATE_UNREACHABLE, "The release server stopped answering",
                       {"reason": type(exc).__name__}) from None
    if status == 404:
        raise ApiError(404, CODE_UPDATE_NOT_FOUND, "No stable release has been published")
    if status != 200:
        raise ApiError(502, CODE_UPDATE_UPSTREAM, f"The release server answered {status}", {"status": status})
    try:
        release = json.loads(raw)
        tag = release["tag_name"]
        if not isinstance(tag, str) or not tag or release.get("draft") or release.get("prerelease"):
            raise ValueError("not a stable release")
    except (ValueError, KeyError, TypeError):
        raise ApiError(502, CODE_UPDATE_UPSTREAM, "The release server's answer is not a stable release",
                       {"status": status}) from None
    version = tag[1:] if tag[:1] in ("v", "V") else tag
    return {"version": version, "name": release.get("name") or tag, "publishedAt": release.get("published_at")}


# --- config.toml data_root --------------------------------------------------------------------


def data_root_update(body: Any) -> dict[str, Any]:
    """PUT /api/config/data-root with ``{dataRoot: "/abs/dir"}`` (``~`` allowed): rewrites the
    ``data_root`` line of <COVEL_HOME>/config.toml atomically, keeping every other line. Takes
    effect at the next start. 400 invalid_data_root: not a string, empty, relative, or an existing
    non-directory. Returns ``{ok: true, dataRoot, configPath, restartRequired}``."""
    value = body.get("dataRoot") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value.strip() or (isinstance(body, dict) and set(body) - {"dataRoot"}):
        raise ApiError(400, CODE_DATA_ROOT_INVALID, "Body must be { dataRoot: string }")
    target = Path(value.strip()).expanduser()
    if not target.is_absolute():
        raise ApiError(400, CODE_DATA_ROOT_INVALID, "dataRoot must be an absolute directory path")
    if target.exists() and not target.is_dir():
        raise ApiError(400, CODE_DATA_ROOT_INVALID, "dataRoot names a file, not a directory")
    target = target.resolve()
    path = desktop.home_file(desktop.CONFIG_TOML)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    desktop.config_toml_parse(text)  # an unreadable existing file is kept as it is (500)
    updated = desktop.config_toml_with_data_root(text, str(target))
    desktop.config_toml_parse(updated)
    desktop.atomic_write(path, updated.encode("utf-8"))
    return {"ok": True, "dataRoot": str(target), "configPath": str(path), "restartRequired": target != data_root_current()}


# --- open-folder ------------------------------------------------------------------------------


def opener_command() -> list[str] | None:
    """The command that shows a path in the system's file manager / default app: COVEL_DESKTOP_OPENER
    when set (split on spaces), else ``open`` (macOS), ``xdg-open`` (Linux with a display);
    None when there is none (a headless server). Windows uses os.startfile (returned as [])."""
    configured = getattr(settings, "COVEL_DESKTOP_OPENER", None)
    if configured:
        return configured.split()
    if sys.platform == "win32":  # pragma: no cover - not our CI's platform
        return []
    if sys.platform == "darwin":  # pragma: no cover
        return ["open"] if shutil.which("open") else None
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return None
    return ["xdg-open"] if shutil.which("xdg-open") else None


def _open_target_path(target: str) -> Path:
    if target == TARGET_CONFIG:
        return Path(settings.COVEL_HOME)
    if target == TARGET_DATA:
        return data_root_current()
    if target == TARGET_LOGS:
        return desktop.home_file(desktop.LOGS_DIR)
    if target == TARGET_LLM_TOML:
        return llm_config_path() or desktop.home_file(TARGET_LLM_TOML)
    return desktop.home_file(desktop.KEYS_ENV)


def open_folder(body: Any) -> dict[str, Any]:
    """POST /api/config/open-folder with ``{target}``: config (COVEL_HOME) | data (the data root) |
    logs (COVEL_HOME/logs) | llm.toml (COVEL_LLM_TOML, else COVEL_HOME/llm.toml) | keys.env
    (always COVEL_HOME). A missing llm.toml is first created with the builtin default (the same
    slots as the fallback in effect). Returns ``{ok: true, created}``. 400 open_target_unavailable:
    unknown target, a target that does not exist, or no way to open it on this machine. A file
    manager that fails to start is a 500 (logged)."""
    target = body.get("target") if isinstance(body, dict) else None
    if target not in OPEN_TARGETS:
        raise ApiError(400, CODE_OPEN_UNAVAILABLE, f"target must be one of {', '.join(OPEN_TARGETS)}")
    command = opener_command()
    if command is None:
        raise ApiError(400, CODE_OPEN_UNAVAILABLE, "This machine has no file manager to open it with")
    path = _open_target_path(target)
    created = False
    if target == TARGET_LLM_TOML and not path.exists():
        desktop.atomic_write(path, LLM_TOML_STARTER.encode("utf-8"))
        created = True
    if not path.exists():
        raise ApiError(400, CODE_OPEN_UNAVAILABLE, f"{target} does not exist yet")
    if command:
        subprocess.Popen([*command, str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    else:  # pragma: no cover - Windows
        os.startfile(str(path))  # type: ignore[attr-defined]
    return {"ok": True, "created": created}
