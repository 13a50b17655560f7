"""covel.outbound: the key rule and the SSRF guard, over real loopback sockets (spec 004 POST
/api/ai/models 服务端环境里的密钥只发往该服务商的可信同源地址, §本地模型中继, ingestUrl redirects)."""
from __future__ import annotations

import socket

import pytest
from django.core.exceptions import ImproperlyConfigured

from covel import outbound
from covel.settings.base import _outbound_allow, _provider_origins
from tests.covel.outbound_support import CANARY, MODELS_PATH, Listener, RawListener, closed_port, redirect_to


@pytest.fixture
def listener():
    with Listener() as server:
        yield server


@pytest.fixture
def canary(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    return CANARY


@pytest.fixture
def shared_tier(settings):
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OUTBOUND_ALLOW = ()


def _get(url, **kwargs):
    kwargs.setdefault("is_request_supplied", True)
    with outbound.send("GET", url, timeout=5, **kwargs) as response:
        return response.status_code, response.read()


# --- the key rule ---------------------------------------------------------------------------------


def test_server_key_goes_only_to_the_providers_trusted_origin(canary):
    # given the default table (OpenAI: https://api.openai.com)
    # when / then
    trusted = outbound.provider_key_for("openai", "https://api.openai.com/v1", request_keys=None, is_request_supplied=False)
    assert trusted is not None and trusted.value == CANARY and trusted.source == "server"
    for url in ("http://api.openai.com/v1", "https://api.openai.com:8443/v1", "https://api.openai.com.evil.example/v1",
                "http://127.0.0.1:11434/v1", "https://openrouter.ai/api/v1"):
        assert outbound.provider_key_for("openai", url, request_keys=None, is_request_supplied=False) is None, url


def test_request_supplied_target_never_gets_a_server_key(canary):
    key = outbound.provider_key_for("openai", "https://api.openai.com/v1", request_keys=None, is_request_supplied=True)

    assert key is None


def test_request_key_goes_to_the_requests_target(canary):
    key = outbound.provider_key_for("openai", "http://127.0.0.1:1/v1", request_keys={"openai": "sk-player"},
                                    is_request_supplied=True)

    assert key is not None and key.value == "sk-player" and key.source == "request"


def test_trusted_origins_are_a_setting(canary, settings):
    settings.COVEL_PROVIDER_ORIGINS = {"openai": ("http://127.0.0.1:4000",)}

    assert outbound.provider_key_for("openai", "http://127.0.0.1:4000/v1", request_keys=None, is_request_supplied=False)
    assert outbound.provider_key_for("openai", "https://api.openai.com/v1", request_keys=None, is_request_supplied=False) is None


def test_provider_missing_from_the_table_trusts_the_operator_written_url(monkeypatch):
    monkeypatch.setenv("OPEN_ROUTER_API_KEY", "sk-or-server")

    key = outbound.provider_key_for("open-router", "https://openrouter.ai/api/v1", request_keys=None, is_request_supplied=False)

    assert outbound.provider_env_key_name("open-router") == "OPEN_ROUTER_API_KEY"
    assert key is not None and key.value == "sk-or-server" and key.origins == frozenset({"https://openrouter.ai:443"})


def test_key_value_never_shows_in_repr_or_str(canary):
    key = outbound.provider_key_for("openai", "https://api.openai.com/v1", request_keys=None, is_request_supplied=False)

    assert CANARY not in repr(key) and CANARY not in str(key)


def test_server_key_handed_over_as_a_plain_key_is_still_not_sent(canary, listener, settings):
    # given the server key wrapped as if a request had supplied nothing about it
    smuggled = outbound.ProviderKey("openai", CANARY, source="unknown")
    # when it is sent to a request-supplied target and to an operator target that is not trusted
    _get(listener.base_url + "/models", key=smuggled)
    _get(listener.base_url + "/models", key=smuggled, is_request_supplied=False)
    # then neither carried it
    assert listener.authorizations() == [None, None]


def test_authorization_header_only_travels_as_a_key(listener):
    _get(listener.base_url + "/models", headers={"Authorization": f"Bearer {CANARY}"})

    assert listener.authorizations() == [None]


def test_request_key_does_not_follow_a_redirect_to_another_origin(listener):
    with Listener() as other:
        listener.routes[("GET", MODELS_PATH)] = redirect_to(f"http://localhost:{other.port}{MODELS_PATH}")
        key = outbound.ProviderKey("openai", "sk-player", source="request")

        status, _ = _get(listener.base_url + "/models", key=key, max_redirects=5)

        assert status == 200
        assert listener.authorizations() == ["Bearer sk-player"]
        assert other.authorizations() == [None]


# --- the SSRF guard -----------------------------------------------------------------------------------


SHARED_TIER_REFUSED = [
    ("http://2130706433:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://0x7f.1:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://127.1:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://0177.0.0.1:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://127.0.0.1.:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://0.0.0.0:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://[::]:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://[::ffff:127.0.0.1]:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://[::ffff:7f00:1]:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://169.254.169.254/latest/meta-data", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://[fe80::1]:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://[fe80::1%25eth0]:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://224.0.0.1:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://240.0.0.1:{port}/v1", outbound.CODE_TARGET_NOT_ALLOWED),
    ("http://127.0.0.1:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://localhost:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://[::1]:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://10.0.0.1:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://192.168.1.20:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://100.64.0.1:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
    ("http://[fd00::1]:{port}/v1", outbound.CODE_MODEL_RELAY_UNAVAILABLE),
]


@pytest.mark.parametrize("template, code", SHARED_TIER_REFUSED)
def test_shared_tier_refuses_local_and_special_addresses_before_connecting(shared_tier, listener, template, code):
    # when
    with pytest.raises(outbound.TargetRefused) as caught:
        _get(template.format(port=listener.port) + "/models")
    # then refused with the rule's code, and nothing reached the listener
    assert caught.value.code == code
    assert listener.connections == 0


@pytest.mark.parametrize("template", [t for t, code in SHARED_TIER_REFUSED if code == outbound.CODE_TARGET_NOT_ALLOWED])
def test_personal_shape_still_refuses_numeric_forms_and_special_addresses(settings, listener, template):
    settings.DEPLOYMENT_TIER = "self"

    with pytest.raises(outbound.TargetRefused) as caught:
        _get(template.format(port=listener.port) + "/models")

    assert caught.value.code == outbound.CODE_TARGET_NOT_ALLOWED
    assert listener.connections == 0


def test_personal_shape_reaches_the_players_loopback_model(settings, listener):
    settings.DEPLOYMENT_TIER = "self"

    status, _ = _get(f"http://localhost:{listener.port}/v1/models")

    assert status == 200 and listener.connections == 1


def test_allow_list_admits_the_operators_model_server_in_a_shared_tier(shared_tier, settings, listener):
    settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.0/8",)

    status, _ = _get(listener.base_url + "/models")

    assert status == 200 and listener.connections == 1


def test_allow_list_never_admits_forbidden_addresses(shared_tier, settings, listener):
    settings.COVEL_OUTBOUND_ALLOW = ("0.0.0.0/0", "::/0")

    with pytest.raises(outbound.TargetRefused) as caught:
        _get(f"http://2130706433:{listener.port}/v1/models")

    assert caught.value.code == outbound.CODE_TARGET_NOT_ALLOWED and listener.connections == 0


def _fake_dns(monkeypatch, answers):
    """Answer getaddrinfo for the names in ``answers`` ({name: [[ip, ...] per call] | None for an
    unknown name}) and pass every other name to the real resolver (IP literals and /etc/hosts
    names only in these tests: no DNS traffic); returns the list of names looked up."""
    real = socket.getaddrinfo
    looked_up = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            looked_up.append(host)
            if answers[host] is None:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            ips = answers[host][min(len(looked_up), len(answers[host])) - 1]
            return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ips]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return looked_up


def test_every_resolved_address_must_pass(shared_tier, listener, monkeypatch):
    # given a name answering a public and a loopback address
    _fake_dns(monkeypatch, {"mixed.example": [["93.184.216.34", "127.0.0.1"]]})
    # when / then
    with pytest.raises(outbound.TargetRefused) as caught:
        _get(f"http://mixed.example:{listener.port}/v1/models")
    assert caught.value.code == outbound.CODE_MODEL_RELAY_UNAVAILABLE and listener.connections == 0


def test_connection_goes_to_the_checked_address_not_a_second_dns_answer(shared_tier, settings, listener, monkeypatch):
    # given an allowed first answer and a rebinding second answer (a loopback address the allow-list
    # does not cover, where nothing listens)
    settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1/32",)
    looked_up = _fake_dns(monkeypatch, {"rebind.example": [["127.0.0.1"], ["127.0.0.2"]]})
    # when
    status, _ = _get(f"http://rebind.example:{listener.port}/v1/models")
    # then one lookup, the connection went to the checked address, the Host header kept the name
    assert status == 200 and looked_up == ["rebind.example"]
    assert listener.requests[0][2]["Host"] == f"rebind.example:{listener.port}"


def test_redirect_to_a_private_address_is_refused(shared_tier, settings, listener):
    settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1/32",)
    listener.routes[("GET", MODELS_PATH)] = redirect_to(f"http://[::1]:{listener.port}/v1/models")

    with pytest.raises(outbound.TargetRefused) as caught:
        _get(listener.base_url + "/models", max_redirects=5)

    assert caught.value.code == outbound.CODE_MODEL_RELAY_UNAVAILABLE
    assert listener.connections == 1  # the first hop only


def test_redirect_from_an_operator_target_is_checked_like_a_request_supplied_one(shared_tier, listener):
    listener.routes[("GET", MODELS_PATH)] = redirect_to("http://169.254.169.254/latest/meta-data")

    with pytest.raises(outbound.TargetRefused) as caught:
        _get(listener.base_url + "/models", is_request_supplied=False, max_redirects=5)

    assert caught.value.code == outbound.CODE_TARGET_NOT_ALLOWED


def test_at_most_five_redirects(settings, listener):
    settings.DEPLOYMENT_TIER = "self"
    listener.routes[("*", "*")] = lambda handler: (302, {"Location": handler.path + "x"}, b"")
    listener.routes.pop(("GET", MODELS_PATH))

    with pytest.raises(outbound.TargetRefused) as caught:
        _get(listener.base_url + "/models", max_redirects=outbound.MAX_REDIRECTS)

    assert caught.value.code == outbound.CODE_TOO_MANY_REDIRECTS
    assert len(listener.requests) == 1 + outbound.MAX_REDIRECTS


def test_redirects_are_not_followed_unless_asked(settings, listener):
    settings.DEPLOYMENT_TIER = "self"
    listener.routes[("GET", MODELS_PATH)] = redirect_to("http://169.254.169.254/")

    status, _ = _get(listener.base_url + "/models")

    assert status == 302 and len(listener.requests) == 1


def test_closed_silent_and_non_http_ports_fail_alike(settings, monkeypatch):
    # given the personal shape, where loopback is allowed: a closed port, a port speaking another
    # protocol, and a name that does not resolve
    settings.DEPLOYMENT_TIER = "self"
    _fake_dns(monkeypatch, {"no-such-host.invalid": None})
    with RawListener() as raw:
        failures = []
        for port in (closed_port(), raw.port):
            with pytest.raises(outbound.TargetUnreachable) as caught:
                _get(f"http://127.0.0.1:{port}/v1/models")
            failures.append((caught.value.code, caught.value.message))
        with pytest.raises(outbound.TargetUnreachable) as caught:
            _get("http://no-such-host.invalid/v1/models")
        failures.append((caught.value.code, caught.value.message))
    # then every failure reads the same and quotes nothing of the listener
    assert failures == [(outbound.CODE_UNREACHABLE, outbound.MESSAGE_UNREACHABLE)] * 3


# --- settings -----------------------------------------------------------------------------------------


def test_provider_origins_setting_parses_pairs_and_replaces_a_default():
    assert _provider_origins([]) == {"openai": ("https://api.openai.com",)}
    assert _provider_origins(["openai=https://gw.example:8443", "openai=https://api.openai.com/", "acme=http://10.0.0.5:8000"]) == {
        "openai": ("https://gw.example:8443", "https://api.openai.com"), "acme": ("http://10.0.0.5:8000",)}


@pytest.mark.parametrize("item", ["openai", "openai=ftp://x", "openai=https://x/v1", "=https://x", "openai=https://u:p@x"])
def test_provider_origins_setting_rejects_malformed_entries(item):
    with pytest.raises(ImproperlyConfigured):
        _provider_origins([item])


def test_outbound_allow_setting_takes_cidrs_addresses_and_names():
    assert _outbound_allow(["10.0.0.0/8", "192.168.1.5", "fd00::/8", "ollama.internal"]) == (
        "10.0.0.0/8", "192.168.1.5", "fd00::/8", "ollama.internal")
    with pytest.raises(ImproperlyConfigured):
        _outbound_allow(["not a host/99"])


# --- TLS through the pinned connection ---------------------------------------------------------------


@pytest.fixture
def tls_listener(tmp_path, monkeypatch):
    """An HTTPS listener on 127.0.0.1 with a certificate for ``model.example`` from a test CA that
    SSL_CERT_FILE makes the trusted bundle; yields (port, SNI names seen)."""
    import datetime
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(common_name):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test ca")).issuer_name(name("test ca")).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(name("model.example")).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(2).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("model.example")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    seen = []
    context.sni_callback = lambda sock, server_name, ctx: seen.append(server_name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def test_pinned_connection_keeps_sni_and_certificate_checks_on_the_host_name(settings, monkeypatch, tls_listener):
    # given both names resolving to the listener, whose certificate is for model.example only
    settings.DEPLOYMENT_TIER = "self"
    port, seen = tls_listener
    _fake_dns(monkeypatch, {"model.example": [["127.0.0.1"]], "other.example": [["127.0.0.1"]]})
    # when
    status, body = _get(f"https://model.example:{port}/v1/models")
    with pytest.raises(outbound.TargetUnreachable) as caught:
        _get(f"https://other.example:{port}/v1/models")
    # then the right name was verified and sent as SNI; the wrong one failed verification
    assert (status, body) == (200, b"ok")
    assert seen == ["model.example", "other.example"]
    assert caught.value.code == outbound.CODE_UNREACHABLE
