"""The outbound proxy every client of ``covel.outbound`` uses (spec 004 GET/PUT /api/config/proxy).

Modes: ``direct`` (no proxy), ``system`` (the operating system's / environment's proxy —
``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` — as ``urllib.request.getproxies``
reads them; the default), ``http`` (an ``http://`` or ``https://`` proxy URL) and ``socks``
(``socks5://`` or ``socks5h://``, through httpx's SOCKS support, package ``socksio``). Both URL
kinds may carry ``user:password@``; the password is never shown (``url_masked``).

Which requests use it (``proxy_url_for``): every request the operator configured (llm.toml
slots, GitHub installs, the app-update check, the model database); requests to loopback never do
(a model server on this machine stays reachable). Request-supplied targets (covel.outbound) use an
explicit http/socks proxy only in the personal shape and only when every address they resolve to is
public — LAN and loopback targets stay direct and pinned to the checked address; the ``system``
mode leaves them direct, as before this module existed.

State: in desktop mode (covel.desktop) the setting lives in ``<COVEL_HOME>/proxy.json``, loaded on
first use; outside desktop mode it is always ``system``. ``proxy_prepare`` builds and checks the
transport a setting needs without applying it; ``PreparedProxy.commit`` applies it in this process,
``dispose`` drops it (spec: 先准备并验证新的传输 → 原子写盘 → 在进程内生效).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from covel import desktop

logger = logging.getLogger("covel.proxy")

MODE_DIRECT = "direct"
MODE_SYSTEM = "system"
MODE_HTTP = "http"
MODE_SOCKS = "socks"
MODES = (MODE_DIRECT, MODE_SYSTEM, MODE_HTTP, MODE_SOCKS)
URL_SCHEMES = {MODE_HTTP: ("http", "https"), MODE_SOCKS: ("socks5", "socks5h")}
EFFECTIVE_DIRECT = "direct"
_LOOPBACK_NAMES = ("localhost", "localhost.")


class ProxySettingInvalid(ValueError):
    """A proxy setting that cannot be used; the message says why (shown to the client as a 400)."""


@dataclass(frozen=True)
class ProxySetting:
    """``mode`` (one of MODES) and, for http/socks, the proxy ``url`` (hidden from repr: it may
    hold a password)."""

    mode: str
    url: str | None = field(default=None, repr=False)

    def as_file(self) -> dict[str, Any]:
        """The proxy.json object (the URL as written, credentials included)."""
        return {"mode": self.mode, **({"url": self.url} if self.url else {})}


DEFAULT = ProxySetting(MODE_SYSTEM)


def url_masked(url: str | None) -> str | None:
    """``url`` with its password replaced by ``***`` (None stays None)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def proxy_setting_from(body: Any) -> ProxySetting:
    """Validate a PUT body ``{mode, url?}``. Raises ProxySettingInvalid: not an object, unknown
    mode, a url for direct/system, a missing url or one with the wrong scheme, no host or no port."""
    if not isinstance(body, dict):
        raise ProxySettingInvalid("The body must be { mode, url? }")
    unknown = sorted(set(body) - {"mode", "url"})
    if unknown:
        raise ProxySettingInvalid(f"Unknown field(s): {', '.join(unknown)}")
    mode, url = body.get("mode"), body.get("url")
    if mode not in MODES:
        raise ProxySettingInvalid(f"mode must be one of {', '.join(MODES)}")
    if mode in (MODE_DIRECT, MODE_SYSTEM):
        if url not in (None, ""):
            raise ProxySettingInvalid(f"mode {mode} takes no url")
        return ProxySetting(mode)
    if not isinstance(url, str) or not url.strip():
        raise ProxySettingInvalid(f"mode {mode} needs a url")
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ProxySettingInvalid(f"Invalid proxy url: {exc}") from None
    if parts.scheme.lower() not in URL_SCHEMES[mode]:
        raise ProxySettingInvalid(f"A {mode} proxy url starts with {' or '.join(s + '://' for s in URL_SCHEMES[mode])}")
    if not parts.hostname:
        raise ProxySettingInvalid("The proxy url has no host")
    if port is None:
        raise ProxySettingInvalid("The proxy url needs a port (host:port)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxySettingInvalid("The proxy url is scheme://[user:password@]host:port, nothing after the port")
    return ProxySetting(mode, url)


_lock = threading.Lock()
_active: dict[str, ProxySetting] = {}  # COVEL_HOME → the setting in effect for that home


class PreparedProxy:
    """A checked setting and the transport built for it, not applied yet. ``commit()`` applies the
    setting in this process; ``dispose()`` (also after commit) closes the trial transport."""

    def __init__(self, setting: ProxySetting, transport: httpx.BaseTransport | None) -> None:
        self.setting = setting
        self._transport = transport

    def commit(self) -> None:
        """Make the setting the one in effect for this COVEL_HOME (every later request uses it)."""
        with _lock:
            _active[_home_key()] = self.setting
        self.dispose()

    def dispose(self) -> None:
        """Close the trial transport; safe to call twice."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None


def proxy_prepare(setting: ProxySetting) -> PreparedProxy:
    """Build the transport ``setting`` needs (a proxy pool for http/socks), proving it can be used
    (SOCKS support installed, URL accepted by httpx). Raises ProxySettingInvalid otherwise.
    Nothing is applied; the caller commits or disposes the result."""
    if setting.mode not in (MODE_HTTP, MODE_SOCKS):
        return PreparedProxy(setting, None)
    try:
        transport = httpx.HTTPTransport(proxy=setting.url, trust_env=False)
    except ImportError:
        raise ProxySettingInvalid("SOCKS support is not installed on this server (socksio)") from None
    except (ValueError, httpx.InvalidURL) as exc:
        raise ProxySettingInvalid(f"Invalid proxy url: {exc}") from None
    return PreparedProxy(setting, transport)


def proxy_configure(setting: ProxySetting) -> None:
    """Prepare and apply ``setting`` at once (start-up and tests)."""
    proxy_prepare(setting).commit()


def _home_key() -> str:
    return str(desktop.home_file(""))


def proxy_file_load() -> ProxySetting:
    """The setting saved in proxy.json; DEFAULT when there is none. A file that cannot be read or
    used is logged and DEFAULT returned (the server must still start)."""
    path = desktop.home_file(desktop.PROXY_JSON)
    try:
        raw = path.read_text("utf-8")
    except FileNotFoundError:
        return DEFAULT
    except OSError as exc:
        logger.warning("proxy: %s could not be read (%s); using the system proxy", path, type(exc).__name__)
        return DEFAULT
    try:
        setting = proxy_setting_from(json.loads(raw))
        proxy_prepare(setting).dispose()
    except (ValueError, ProxySettingInvalid) as exc:
        logger.warning("proxy: %s is not usable (%s); using the system proxy", path, exc)
        return DEFAULT
    return setting


def proxy_active() -> ProxySetting:
    """The setting in effect: outside desktop mode always DEFAULT (system); in desktop mode the
    committed one, loaded from proxy.json on first use."""
    if not desktop.is_desktop():
        return DEFAULT
    key = _home_key()
    with _lock:
        setting = _active.get(key)
    if setting is None:
        setting = proxy_file_load()
        with _lock:
            setting = _active.setdefault(key, setting)
    return setting


def system_proxies() -> dict[str, str]:
    """``{scheme: proxy url}`` of the system / environment (urllib's view: env variables, and the
    registry or System Configuration on Windows / macOS)."""
    return {k: v for k, v in urllib.request.getproxies().items() if k in ("http", "https", "all") and v}


def _is_loopback(host: str) -> bool:
    host = host.lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def proxy_url_for(url: str, *, is_request_supplied: bool, personal: bool) -> str | None:
    """The proxy URL a request to ``url`` goes through, or None for a direct connection (rules in
    the module docstring). ``personal``: the deployment is the personal shape (tier self)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # an unparsable URL (e.g. "http://[::1"): the request itself fails to send
        return None
    if not host or _is_loopback(host):
        return None
    setting = proxy_active()
    if setting.mode in (MODE_HTTP, MODE_SOCKS):
        return setting.url if (personal or not is_request_supplied) else None
    if setting.mode == MODE_SYSTEM and not is_request_supplied:
        proxies = system_proxies()
        chosen = proxies.get(parts.scheme.lower()) or proxies.get("all")
        return chosen if chosen and not urllib.request.proxy_bypass(host) else None
    return None


def proxy_effective() -> str:
    """What an https request to a public host uses now: ``"direct"`` or the proxy URL (masked)."""
    setting = proxy_active()
    if setting.mode in (MODE_HTTP, MODE_SOCKS):
        return url_masked(setting.url) or EFFECTIVE_DIRECT
    if setting.mode == MODE_SYSTEM:
        proxies = system_proxies()
        chosen = proxies.get("https") or proxies.get("all")
        return url_masked(chosen) if chosen else EFFECTIVE_DIRECT
    return EFFECTIVE_DIRECT
