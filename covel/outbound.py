"""The one way out of the process for HTTP (ARCHITECTURE.md, "Things every instance must agree on":
one outbound-requests module serves every client that leaves the process — model chat and
streaming, the AI probes, and later embeddings, images, GitHub and app updates).

Every request goes through ``send`` and obeys two rules.

1. Keys stay where they belong (spec 004 POST /api/ai/models: 服务端环境里的密钥只发往该服务商的可信
   同源地址). A *server key* (``{PROVIDER}_API_KEY`` in the environment, see
   ``provider_env_key_name``) is attached only when the request's origin (scheme, host, port) is
   one of that provider's trusted origins: ``settings.COVEL_PROVIDER_ORIGINS`` (default
   ``{"openai": ("https://api.openai.com",)}``); for a provider the table does not list, the
   operator-written URL itself (an llm.toml ``baseUrl``) is its configured origin. A
   *request-supplied target* (X-Slot-Config ``customPresets``, the body ``baseUrl`` of
   POST /api/ai/models, anything a client chose) never receives a server key, only the key the
   same request supplied in ``X-Provider-Keys``. A key never follows a redirect to another origin,
   and key values never appear in logs, traces or error texts (``ProviderKey`` hides its value).

2. Request-supplied targets pass an SSRF guard on their *resolved* addresses (``target_resolve``):
   the host is resolved with getaddrinfo, every address is classified with ``ipaddress``, and the
   connection goes to exactly the checked addresses (``_PinnedBackend``), so a DNS answer that
   changes between the check and the connect (rebinding) cannot redirect it. Refused everywhere:
   unspecified (``0.0.0.0/8``, ``::``), link-local (``169.254.0.0/16`` — cloud metadata —,
   ``fe80::/10``), multicast, reserved, IPv4-mapped / 6to4 / Teredo IPv6, and non-canonical numeric
   hosts (``2130706433``, ``0x7f.1``, ``127.1``, ``0177.0.0.1``): ``target_not_allowed``.
   Loopback and private/LAN addresses are the player's own machine and network in the personal
   shape (``DEPLOYMENT_TIER=self``; spec 004 §本地模型中继: the personal server reaches them
   itself). In the shared tiers (demo/commercial) the server never fetches them itself: a request
   that names the player's model-relay channel (``send(relay=...)``, covel.model_relay) has them
   fetched by the player's browser instead; without one they are refused with
   ``model_relay_unavailable``, unless the operator lists them in ``settings.COVEL_OUTBOUND_ALLOW``
   (CIDRs, addresses or host names of the operator's own model servers, fetched directly).
   Redirects are never followed automatically; ``send(max_redirects=n)`` follows at most
   n (spec: ingestUrl, maxRedirects 5), re-checking every ``Location`` as a new request-supplied
   target.

Operator-configured targets (llm.toml slots, a provider's default endpoint) skip the guard: the
operator chose them, local model servers included.

Proxy: every client ``_open`` builds takes its proxy from ``covel.proxy.proxy_url_for`` (the
desktop's ``PUT /api/config/proxy`` setting, else the system's), so model calls, probes, GitHub
installs, the model database and the app-update check all see the same setting. Server keys are
the environment's ``{PROVIDER}_API_KEY`` over the desktop's saved ``keys.env`` (``server_keys``).

Errors (``OutboundError``; ``code``/``message`` are safe to show a client):
``TargetRefused`` (``target_not_allowed`` | ``model_relay_unavailable`` | ``too_many_redirects``)
before any connection to the refused address; ``TargetUnreachable`` (``unreachable``, and
``timeout`` for an operator target that accepted the connection but sent no response head).
For a request-supplied target every failure before a response head — unknown host, refused,
reset, filtered (connect timeout), silent or non-HTTP listener — is the same ``unreachable`` with
the same message, so the answer does not tell open, closed and filtered ports apart.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx
from django.conf import settings

from covel import desktop, proxy

logger = logging.getLogger("covel.outbound")

CODE_TARGET_NOT_ALLOWED = "target_not_allowed"
CODE_MODEL_RELAY_UNAVAILABLE = "model_relay_unavailable"
CODE_TOO_MANY_REDIRECTS = "too_many_redirects"
CODE_UNREACHABLE = "unreachable"
CODE_TIMEOUT = "timeout"
CODE_UNSENDABLE = "unsendable"
CODE_TOO_LARGE = "too_large"
REFUSAL_CODES = (CODE_TARGET_NOT_ALLOWED, CODE_MODEL_RELAY_UNAVAILABLE, CODE_TOO_MANY_REDIRECTS)

#: The one message every request-supplied target gets for any failure before a response head.
MESSAGE_UNREACHABLE = "could not reach the model endpoint"
MESSAGE_NOT_ALLOWED = ("the model endpoint's address is not allowed (unspecified, link-local, multicast, reserved, "
                       "IPv4-mapped IPv6 or a numeric host not written as a dotted quad)")
MESSAGE_RELAY = ("this server does not connect to loopback or private network addresses itself; a model on your "
                 "computer or LAN needs the local model relay (keep GET /api/model-relay/stream open and send its "
                 "channel in X-Model-Relay), which this request did not name")

#: Spec 004 ingestUrl: maxRedirects defaults to 5.
MAX_REDIRECTS = 5
DEFAULT_PROVIDER_ORIGINS: dict[str, tuple[str, ...]] = {"openai": ("https://api.openai.com",)}
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SERVER_KEY_VAR = re.compile(r"^([A-Z][A-Z0-9_]*)_API_KEY$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")

_PUBLIC, _LOCAL, _FORBIDDEN = "public", "local", "forbidden"


class OutboundError(Exception):
    """An outbound request that did not produce a response. ``code`` / ``message`` carry no key,
    no response body and nothing that tells port states apart."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TargetRefused(OutboundError):
    """The policy refused the target before any connection to it."""


class TargetUnreachable(OutboundError):
    """No response head came back (unknown host, refused, reset, timeout, not HTTP)."""


#: RelayError codes (covel.model_relay): no browser holds the channel, or its connection went away
#: before the answer was complete; the browser failed the request or answered malformed; it sent
#: nothing for COVEL_MODEL_RELAY_TIMEOUT_SECONDS; its answer passed 64 MiB.
CODE_RELAY_UNAVAILABLE = CODE_MODEL_RELAY_UNAVAILABLE
CODE_RELAY_FAILED = "model_relay_failed"
CODE_RELAY_TIMEOUT = "model_relay_timeout"
CODE_RELAY_TOO_LARGE = "model_relay_too_large"


class RelayError(OutboundError):
    """A request sent through the player's model relay (covel.model_relay) did not get its answer.
    ``code``: one of the ``CODE_RELAY_*`` above; ``message`` starts with ``Local model relay:`` and
    is meant to be shown as it is (it holds no key and nothing the server fetched)."""


# --- origins and keys ---------------------------------------------------------------------------


def origin_of(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL (host lower-cased, default port made explicit,
    IPv6 in brackets); None when ``url`` has no usable origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except (ValueError, TypeError):
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"


def provider_env_key_name(provider: str) -> str:
    """``openai`` → ``OPENAI_API_KEY``; ``open-router`` → ``OPEN_ROUTER_API_KEY``."""
    return f"{provider.upper().replace('-', '_')}_API_KEY"


def server_key(provider: str) -> str | None:
    """The server's own key for ``provider``: the environment (blank counts as unset), else in
    desktop mode the key saved in ``keys.env`` (covel.desktop; the environment always wins)."""
    value = os.environ.get(provider_env_key_name(provider), "").strip()
    return value or desktop.saved_keys().get(provider) or None


def server_keys() -> dict[str, str]:
    """``{provider: key}`` of every server key: the environment's ``*_API_KEY`` (non-blank) over the
    desktop's saved keys. Values are secrets: for the key rule only, never for a response."""
    keys = dict(desktop.saved_keys())
    for name, env_value in os.environ.items():
        match = _SERVER_KEY_VAR.match(name)
        if match and env_value.strip():
            keys[match.group(1).lower().replace("_", "-")] = env_value.strip()
    return keys


def provider_origins_table() -> Mapping[str, tuple[str, ...]]:
    """``settings.COVEL_PROVIDER_ORIGINS``: provider id → the origins its server key may go to."""
    return getattr(settings, "COVEL_PROVIDER_ORIGINS", DEFAULT_PROVIDER_ORIGINS)


def provider_trusted_origins(provider: str) -> frozenset[str] | None:
    """The origins ``provider``'s server key may go to; None when the table does not list the
    provider (then the operator-written URL of the request is its configured origin)."""
    table = provider_origins_table()
    if provider not in table:
        return None
    return frozenset(o for o in (origin_of(u) for u in table[provider]) if o)


@dataclass(frozen=True)
class ProviderKey:
    """A key and where it came from. ``source``: "server" (environment), "request"
    (``X-Provider-Keys`` of this request) or "unknown" (a plain string handed to a client; treated
    with suspicion, see ``_authorization``). ``origins``: where a server key may go. The value is
    never part of ``repr``/``str``, so a key in an exception or a log record shows as a mask."""

    provider: str
    value: str = field(repr=False)
    source: str = "request"
    origins: frozenset[str] | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return f"<{self.source} key for {self.provider}>"


def provider_key_for(provider: str, url: str, *, request_keys: Mapping[str, str] | None,
                     is_request_supplied: bool) -> ProviderKey | None:
    """The key to send with a request for ``provider`` to ``url``, or None.

    The request's own ``X-Provider-Keys`` entry wins and goes to whatever target the request uses.
    Otherwise the server key, only for an operator-configured target (``is_request_supplied``
    False) whose origin is trusted for the provider (``provider_trusted_origins``; a provider the
    table does not list trusts the operator-written ``url``).
    """
    supplied = (request_keys or {}).get(provider)
    if isinstance(supplied, str) and supplied:
        return ProviderKey(provider, supplied, source="request")
    if is_request_supplied:
        return None
    value = server_key(provider)
    origin = origin_of(url)
    if not value or origin is None:
        return None
    trusted = provider_trusted_origins(provider)
    if trusted is None:
        trusted = frozenset({origin})
    if origin not in trusted:
        return None
    return ProviderKey(provider, value, source="server", origins=trusted)


def _server_key_owner(value: str) -> str | None:
    """The provider whose server key (``server_keys``) equals ``value`` (None: no server key)."""
    for provider, key in server_keys().items():
        if key == value:
            return provider
    return None


def _authorization(key: ProviderKey | None, url: str, *, is_request_supplied: bool) -> str | None:
    """The key value to send to ``url``, after the last check of the key rule at the moment of
    sending (so a code path that obtained a server key some other way still cannot leak it)."""
    if key is None or not key.value:
        return None
    origin = origin_of(url)
    if key.source == "request":
        return key.value
    if key.source == "server":
        allowed = not is_request_supplied and key.origins is not None and origin in key.origins
    else:
        owner = _server_key_owner(key.value)
        trusted = provider_trusted_origins(owner) if owner else None
        allowed = owner is None or (not is_request_supplied and (trusted is None or origin in trusted))
    if not allowed:
        logger.warning("outbound: a %s key for %s was not sent to %s (not a trusted origin for it)",
                       key.source, key.provider, origin)
        return None
    return key.value


# --- the SSRF guard -----------------------------------------------------------------------------


def personal_shape() -> bool:
    """True in the personal shape (tier ``self``, not the browser-private profile): loopback and LAN
    are the player's own. The browser-private profile is a public site: model addresses a request
    supplies may not point at loopback or the LAN there (spec 004 §生产 MemoryStore 例外)."""
    from covel.auth import browser_private

    return settings.DEPLOYMENT_TIER == "self" and not browser_private()


def _host_is_noncanonical_number(host: str) -> bool:
    """``2130706433``, ``0x7f.1``, ``127.1``, ``0177.0.0.1``, ``127.0.0.1.``: numbers that
    resolvers accept as IPv4 but that are not the canonical dotted quad."""
    labels = host.split(".")
    if not labels or not all(_NUMERIC_LABEL.match(label) for label in labels if label) or labels[0] == "":
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return False


def _address_class(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``public`` | ``local`` (loopback, private, shared, documentation...) | ``forbidden``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64:  # DNS64 answers for IPv4 hosts on IPv6-only networks: judge the IPv4 inside
            return _address_class(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.ipv4_mapped is not None or ip.sixtofour is not None or ip.teredo is not None:
            return _FORBIDDEN
    elif ip in _THIS_NETWORK:
        return _FORBIDDEN
    if ip.is_loopback:  # before is_reserved: ::1 lies in the reserved ::/8
        return _LOCAL
    if ip.is_unspecified or ip.is_multicast or ip.is_link_local or ip.is_reserved:
        return _FORBIDDEN
    return _PUBLIC if ip.is_global else _LOCAL


def _allow_listed(host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True when ``settings.COVEL_OUTBOUND_ALLOW`` lists the host name or a network holding ``ip``."""
    for entry in getattr(settings, "COVEL_OUTBOUND_ALLOW", ()):
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            if entry.lower().rstrip(".") == host:
                return True
    return False


@dataclass(frozen=True)
class ResolvedTarget:
    """A request-supplied target that passed the guard: connect only to ``addresses``."""

    host: str
    port: int
    addresses: tuple[str, ...]


def target_resolve(url: str) -> ResolvedTarget:
    """Resolve and check a request-supplied target (see the module docstring for the rules).

    Every address getaddrinfo returns must pass; one refused address refuses the target (a name
    answering both a public and a private address would otherwise pick either at connect time).
    Raises TargetRefused (``target_not_allowed`` | ``model_relay_unavailable``) or
    TargetUnreachable (``unreachable``: not an http(s) URL, unknown host).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except (ValueError, TypeError):
        raise TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE) from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE)
    port = port or _DEFAULT_PORTS[scheme]
    if _host_is_noncanonical_number(host):
        raise TargetRefused(CODE_TARGET_NOT_ALLOWED, MESSAGE_NOT_ALLOWED)
    try:
        literal = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        literal = None
    if literal is not None and _address_class(literal) == _FORBIDDEN:
        # Judged as written, before the resolver (which may reject an IPv6 zone it does not know).
        raise TargetRefused(CODE_TARGET_NOT_ALLOWED, MESSAGE_NOT_ALLOWED)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError):
        raise TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE) from None
    addresses: list[str] = []
    name = host.rstrip(".")
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]
        ip = ipaddress.ip_address(text)
        kind = _address_class(ip)
        if kind == _FORBIDDEN:
            raise TargetRefused(CODE_TARGET_NOT_ALLOWED, MESSAGE_NOT_ALLOWED)
        if kind == _LOCAL and not personal_shape() and not _allow_listed(name, ip):
            raise TargetRefused(CODE_MODEL_RELAY_UNAVAILABLE, MESSAGE_RELAY)
        if str(info[4][0]) not in addresses:
            addresses.append(str(info[4][0]))
    if not addresses:
        raise TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE)
    return ResolvedTarget(host=host, port=port, addresses=tuple(addresses))


class _PinnedBackend(httpcore.NetworkBackend):
    """httpcore network backend that connects a host only to the addresses the guard checked.

    Why a network backend rather than rewriting the URL to the IP: the URL stays as the client
    wrote it, so the Host header, TLS SNI and certificate verification all still use the host name
    (httpcore passes the origin's host as ``server_hostname`` when it starts TLS on the stream we
    return), while the TCP connection can only go to an address that passed the check — there is
    no second DNS lookup for a rebinding answer to slip into.
    """

    def __init__(self, targets: dict[tuple[str, int], ResolvedTarget]) -> None:
        self._targets = targets
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        target = self._targets.get((host.lower(), port))
        if target is None:  # a connection nobody checked (cannot happen through send): refuse it
            raise httpcore.ConnectError("connection to an unchecked host refused")
        last: Exception | None = None
        for address in target.addresses:
            try:
                return self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                               socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError("no address")

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not outbound targets")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _PinnedTransport(httpx.HTTPTransport):
    """httpx transport over ``_PinnedBackend``, with no proxy (an environment proxy would resolve
    the host itself, after our check). httpx 0.28 (pinned in requirements.txt) offers no public
    way to give HTTPTransport a network backend, so the connection pool it builds is replaced by
    one that has ours; request mapping and exception translation stay httpx's own."""

    def __init__(self, backend: _PinnedBackend) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False)  # verify= a context: no CA bundle re-read
        self._pool = httpcore.ConnectionPool(ssl_context=_ssl_context(), network_backend=backend,
                                             max_connections=10, max_keepalive_connections=0)


_ssl_contexts: dict[tuple[str | None, str | None], Any] = {}


def _ssl_context() -> Any:
    """A verifying SSL context (certifi's CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when
    set, as httpx does), built once per CA setting: building one reads the bundle, and contexts
    are safe to share between threads."""
    source = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _ssl_contexts.get(source)
    if context is None:
        context = _ssl_contexts.setdefault(source, httpx.create_ssl_context())
    return context


# --- sending --------------------------------------------------------------------------------------


def _all_public(target: ResolvedTarget) -> bool:
    return all(_address_class(ipaddress.ip_address(a.split("%", 1)[0])) == _PUBLIC for a in target.addresses)


def _proxied_transport(proxy_url: str | None) -> httpx.HTTPTransport:
    """A transport through ``proxy_url`` (http(s) or SOCKS5, covel.proxy), or a direct one when
    None. trust_env=False: the environment's proxy is covel.proxy's ``system`` mode, decided there;
    the CA settings (SSL_CERT_FILE / SSL_CERT_DIR) are in ``_ssl_context``."""
    try:
        return httpx.HTTPTransport(verify=_ssl_context(), proxy=proxy_url, trust_env=False)
    except (ValueError, ImportError, httpx.InvalidURL):
        # A system proxy URL httpx cannot use (e.g. ALL_PROXY=socks://...): not the endpoint's fault.
        raise TargetUnreachable(CODE_UNSENDABLE, "the configured proxy cannot be used (check GET /api/config/proxy)") from None


def _failure(exc: Exception, *, is_request_supplied: bool) -> OutboundError:
    if isinstance(exc, (httpx.InvalidURL, UnicodeError, httpx.LocalProtocolError)):
        # A URL the client cannot address or a header value it cannot encode (a non-ASCII key):
        # the exception text may quote the value, so only its type is kept.
        return TargetUnreachable(CODE_UNSENDABLE, f"the request could not be sent ({type(exc).__name__})")
    if is_request_supplied:
        return TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE)
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
        return TargetUnreachable(CODE_TIMEOUT, "the endpoint accepted the connection but did not answer in time")
    return TargetUnreachable(CODE_UNREACHABLE, f"{MESSAGE_UNREACHABLE} ({type(exc).__name__}: {exc})")


def _open(method: str, url: str, *, is_request_supplied: bool, key: ProviderKey | None, json: Any,
          headers: Mapping[str, str] | None, timeout: httpx.Timeout | float,
          transport: httpx.BaseTransport | None,
          relay: httpx.BaseTransport | None = None) -> tuple[httpx.Client, httpx.Response]:
    proxy_url = proxy.proxy_url_for(url, is_request_supplied=is_request_supplied, personal=personal_shape())
    if is_request_supplied:
        try:
            target = target_resolve(url)
        except TargetRefused as exc:
            # Loopback/LAN in a shared tier: the player's browser fetches it, when the request named
            # its relay channel (spec 004 §本地模型中继); refused otherwise.
            if exc.code != CODE_MODEL_RELAY_UNAVAILABLE or relay is None:
                raise
            transport = relay
        else:
            if proxy_url and _all_public(target):
                # The player's own proxy (personal shape, covel.proxy): it resolves the host itself;
                # LAN/loopback targets never take this branch, so they stay pinned and direct.
                transport = transport or _proxied_transport(proxy_url)
            else:
                transport = transport or _PinnedTransport(_PinnedBackend({(target.host, target.port): target}))
    elif transport is None:
        transport = _proxied_transport(proxy_url)
    client = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False, trust_env=False)
    try:
        sent = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
        value = _authorization(key, url, is_request_supplied=is_request_supplied)
        if value:
            sent["Authorization"] = f"Bearer {value}"
        request = client.build_request(method, url, json=json, headers=sent)
        return client, client.send(request, stream=True)
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        client.close()
        raise _failure(exc, is_request_supplied=is_request_supplied) from None
    except BaseException:
        client.close()
        raise


@contextmanager
def send(method: str, url: str, *, is_request_supplied: bool, key: ProviderKey | None = None, json: Any = None,
         headers: Mapping[str, str] | None = None, timeout: httpx.Timeout | float = 15.0, max_redirects: int = 0,
         transport: httpx.BaseTransport | None = None,
         relay: httpx.BaseTransport | None = None) -> Iterator[httpx.Response]:
    """Send one request under both rules and yield the response, its body not read yet (stream it
    or ``read_limited`` it inside the ``with``; the connection closes when the block ends).

    is_request_supplied: the target came from a client (guarded, never a server key).
    key: sent as ``Authorization: Bearer`` when the key rule allows it for this origin; an
    ``Authorization`` entry in ``headers`` is dropped (keys travel only as ``key``).
    max_redirects: 0 returns a 3xx as it is; n > 0 follows up to n redirects (303, and 301/302 of
    a non-GET, become GET without a body), each ``Location`` checked as a request-supplied target
    when it leaves the origin, the key dropped from then on. One more → TargetRefused
    ``too_many_redirects``.
    transport: test seam replacing the network (the guard still runs before it).
    relay: the player's model-relay transport (``covel.model_relay.RelayTransport``), used only for
    a request-supplied target the guard refuses as ``model_relay_unavailable`` (loopback/LAN in a
    shared tier): the browser fetches it; the key rule is the same (only the request's own key).
    Raises OutboundError (see the module docstring; ``RelayError`` for a relayed request, also
    while its body is read). Other errors while reading the body are httpx's.
    """
    first_origin = origin_of(url)
    hops = 0
    while True:
        client, response = _open(method, url, is_request_supplied=is_request_supplied,
                                 key=key if origin_of(url) == first_origin else None, json=json, headers=headers,
                                 timeout=timeout, transport=transport, relay=relay)
        location = response.headers.get("location")
        if not (max_redirects and response.status_code in REDIRECT_STATUSES and location):
            break
        response.close()
        client.close()
        hops += 1
        if hops > max_redirects:
            raise TargetRefused(CODE_TOO_MANY_REDIRECTS, f"the endpoint redirected more than {max_redirects} times")
        next_url = urljoin(url, location)
        if origin_of(next_url) is None:
            raise TargetUnreachable(CODE_UNREACHABLE, MESSAGE_UNREACHABLE)
        if origin_of(next_url) != origin_of(url):
            # Where a redirect points was chosen by the remote server, not by the operator.
            is_request_supplied = True
        if response.status_code == 303 or (response.status_code in (301, 302) and method not in ("GET", "HEAD")):
            method, json = "GET", None
        url = next_url
    try:
        yield response
    finally:
        response.close()
        client.close()


def read_limited(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed response, at most ``max_bytes``. Raises TargetUnreachable
    ``too_large`` beyond that; httpx errors while reading propagate."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise TargetUnreachable(CODE_TOO_LARGE, f"the endpoint's answer is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def redact(text: str, key: ProviderKey | None) -> str:
    """``text`` with every occurrence of the key's value masked (upstream error bodies sometimes
    quote the key they rejected)."""
    if key is not None and key.value and len(key.value) >= 4:
        return text.replace(key.value, "***")
    return text
