"""Desktop mode over HTTP (spec 004 配置信息 "仅桌面" rows, §桌面端的文件管理 API, GET/PUT
/api/config/keys, "Opening the effective configuration"): keys.env, settings.json, the outbound
proxy (a fake HTTP forward proxy and a fake SOCKS5 proxy on loopback see the model call), the
app-update check against a fake releases API, config.toml's data_root, open-folder, the bearer token
and what a server outside desktop mode answers."""
from __future__ import annotations

import base64
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from covel.settings.base import BASE_DIR
from tests.covel.outbound_support import Listener, chat_route, closed_port

pytestmark = pytest.mark.django_db

TOKEN = "desktop-sidecar-token-7"
MODEL_HOST = "model.desktop.test"  # never resolved here: only a proxy can answer for it (no direct attempt is made)
SLOT_TOML = """\
[covel.story]
provider = "local-llm"
model = "m"
baseUrl = "{base_url}"
"""
RELEASE = {"tag_name": "v1.4.2", "name": "Covel 1.4.2", "published_at": "2026-11-20T08:00:00Z",
           "draft": False, "prerelease": False}
RELEASE_PATH = "/repos/covel-app/covel/releases/latest"


@pytest.fixture
def home(settings, tmp_path) -> Path:
    """Desktop mode on a fresh COVEL_HOME (no token unless a test sets one)."""
    path = tmp_path / "home"
    path.mkdir()
    settings.COVEL_HOME = path
    settings.COVEL_DESKTOP_REST = True
    settings.COVEL_OPERATOR_TOKEN = None
    settings.COVEL_LLM_TOML = str(path / "llm.toml")
    return path


def _put(client, path, body, **headers):
    return client.put(path, data=json.dumps(body), content_type="application/json", **headers)


def _post(client, path, body, **headers):
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


def _slot(home: Path, base_url: str) -> None:
    (home / "llm.toml").write_text(SLOT_TOML.format(base_url=base_url))


def _ping(client):
    return _post(client, "/api/ai/ping", {"slot": "story"}).json()


# --- keys.env -------------------------------------------------------------------------------------


def test_keys_are_written_to_keys_env_and_listed_without_values(client, home):
    response = _put(client, "/api/config/keys", {"openai": "sk-secret-one", "deep-seek": "ds-secret-two"})

    assert response.status_code == 200, response.content
    assert response.json() == {"items": ["deep-seek", "openai"]}
    assert b"secret" not in response.content
    text = (home / "keys.env").read_text()
    assert "OPENAI_API_KEY=sk-secret-one\n" in text and "DEEP_SEEK_API_KEY=ds-secret-two\n" in text
    assert stat.S_IMODE((home / "keys.env").stat().st_mode) == 0o600
    listed = client.get("/api/config/keys")
    assert listed.json() == {"items": ["deep-seek", "openai"]} and b"secret" not in listed.content
    assert client.get("/api/provider-keys").json() == {"providers": {"deep-seek": {"configured": True},
                                                                     "openai": {"configured": True}}}

    cleared = _put(client, "/api/config/keys", {"openai": None, "deep-seek": ""})
    assert cleared.json() == {"items": []}
    assert not (home / "keys.env").exists()
    assert client.get("/api/provider-keys").json() == {"providers": {}}


@pytest.mark.parametrize("body", [{"openai": "sk-a\nINJECTED_API_KEY=x"}, {"openai": 42}, {"bad id!": "k"}])
def test_an_invalid_key_batch_writes_nothing(client, home, body):
    _put(client, "/api/config/keys", {"openai": "sk-kept"})
    before = (home / "keys.env").read_bytes()

    response = _put(client, "/api/config/keys", {"mistral": "ms-new", **body})

    assert response.status_code == 400 and response.json()["code"] == "invalid_config_keys"
    assert (home / "keys.env").read_bytes() == before
    assert client.get("/api/config/keys").json() == {"items": ["openai"]}


def test_a_saved_key_reaches_the_model_call_and_the_environment_wins(client, home, monkeypatch):
    with Listener() as model:
        _slot(home, model.base_url)
        _put(client, "/api/config/keys", {"local-llm": "saved-key"})

        assert _ping(client)["ok"] is True
        monkeypatch.setenv("LOCAL_LLM_API_KEY", "env-key")
        assert _ping(client)["ok"] is True

    assert model.authorizations() == ["Bearer saved-key", "Bearer env-key"]
    assert client.get("/api/llm-config").json()["envKeyOverrides"] == ["local-llm"]


# --- settings.json ------------------------------------------------------------------------------


def test_settings_round_trip_through_an_atomic_settings_json(client, home):
    first = _put(client, "/api/config/settings", {"entries": {"ui.theme": "dark", "play.autoAdvance": 3}})
    assert first.status_code == 200, first.content
    assert first.json() == {"entries": {"play.autoAdvance": 3, "ui.theme": "dark"}}

    second = _put(client, "/api/config/settings", {"entries": {"ui.theme": None, "ui.locale": "zh-CN"}})

    assert second.json() == {"entries": {"play.autoAdvance": 3, "ui.locale": "zh-CN"}}
    assert client.get("/api/config/settings").json() == second.json()
    assert json.loads((home / "settings.json").read_text()) == {"play.autoAdvance": 3, "ui.locale": "zh-CN"}
    assert sorted(p.name for p in home.iterdir()) == ["settings.json"]  # no temp file left behind


@pytest.mark.parametrize("body", [{"entries": []}, {}, {"entries": {}, "extra": 1}])
def test_a_settings_body_that_is_not_entries_is_400(client, home, body):
    response = _put(client, "/api/config/settings", body)
    assert response.status_code == 400 and response.json()["code"] in ("invalid_settings_body", "invalid_request")
    assert not (home / "settings.json").exists()


def test_a_corrupt_settings_json_is_kept_and_not_blamed_on_the_input(client, home):
    (home / "settings.json").write_text("{not json")
    response = _put(client, "/api/config/settings", {"entries": {"a": 1}})
    assert response.status_code == 500
    assert (home / "settings.json").read_text() == "{not json"


# --- proxy ---------------------------------------------------------------------------------------


def test_proxy_round_trip_keeps_the_password_out_of_answers(client, home):
    assert client.get("/api/config/proxy").json()["mode"] == "system"

    response = _put(client, "/api/config/proxy", {"mode": "http", "url": "http://user:pw-secret@127.0.0.1:8888"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["mode"] == "http" and body["url"] == "http://user:***@127.0.0.1:8888"
    assert body["effective"] == "http://user:***@127.0.0.1:8888" and isinstance(body["systemAvailable"], bool)
    assert client.get("/api/config/proxy").json() == body
    assert json.loads((home / "proxy.json").read_text()) == {"mode": "http", "url": "http://user:pw-secret@127.0.0.1:8888"}
    assert stat.S_IMODE((home / "proxy.json").stat().st_mode) == 0o600

    direct = _put(client, "/api/config/proxy", {"mode": "direct"})
    assert direct.json() == {"mode": "direct", "effective": "direct", "systemAvailable": body["systemAvailable"]}


def test_system_mode_reports_the_environment_proxy(client, home, monkeypatch):
    for name in ("https_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://corp:8080")
    body = _put(client, "/api/config/proxy", {"mode": "system"}).json()
    assert body == {"mode": "system", "effective": "http://corp:8080", "systemAvailable": True}


@pytest.mark.parametrize("body", [
    {"mode": "ftp"}, {"mode": "socks", "url": "http://127.0.0.1:1080"}, {"mode": "http", "url": "socks5://127.0.0.1:1"},
    {"mode": "http"}, {"mode": "http", "url": "http://127.0.0.1"}, {"mode": "direct", "url": "http://127.0.0.1:1"},
    {"mode": "http", "url": "http://127.0.0.1:8080/path"},
])
def test_an_invalid_proxy_is_400_and_changes_nothing(client, home, body):
    _put(client, "/api/config/proxy", {"mode": "direct"})
    response = _put(client, "/api/config/proxy", body)
    assert response.status_code == 400 and response.json()["code"] == "invalid_proxy_config", response.content
    assert client.get("/api/config/proxy").json()["mode"] == "direct"
    assert json.loads((home / "proxy.json").read_text()) == {"mode": "direct"}


def test_a_failed_proxy_write_leaves_the_old_proxy_in_effect(client, home):
    _put(client, "/api/config/proxy", {"mode": "direct"})
    (home / "proxy.json").unlink()
    (home / "proxy.json").mkdir()  # os.replace onto a directory fails

    response = _put(client, "/api/config/proxy", {"mode": "http", "url": "http://127.0.0.1:8888"})

    assert response.status_code == 500
    assert client.get("/api/config/proxy").json()["mode"] == "direct"


def test_an_http_proxy_carries_the_model_call(client, home):
    with Listener() as forward_proxy:
        # An HTTP forward proxy receives the absolute URL and answers for the (unresolvable) host.
        forward_proxy.routes[("POST", f"http://{MODEL_HOST}/v1/chat/completions")] = chat_route
        _slot(home, f"http://{MODEL_HOST}/v1")
        _put(client, "/api/config/proxy", {"mode": "http", "url": forward_proxy.origin})
        result = _ping(client)

    assert result["ok"] is True, result
    assert [(m, p) for m, p, _ in forward_proxy.requests] == [("POST", f"http://{MODEL_HOST}/v1/chat/completions")]


def test_system_mode_uses_the_environment_proxy(client, home, monkeypatch):
    for name in ("http_proxy", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with Listener() as forward_proxy:
        forward_proxy.routes[("POST", f"http://{MODEL_HOST}/v1/chat/completions")] = chat_route
        monkeypatch.setenv("HTTP_PROXY", forward_proxy.origin)
        _slot(home, f"http://{MODEL_HOST}/v1")
        _put(client, "/api/config/proxy", {"mode": "system"})
        assert _ping(client)["ok"] is True
    assert [(m, p) for m, p, _ in forward_proxy.requests] == [("POST", f"http://{MODEL_HOST}/v1/chat/completions")]


class Socks5Proxy:
    """A minimal SOCKS5 server on loopback (no auth, CONNECT only) that records every requested
    (host, port) and connects it to ``upstream`` — a test double, so a hand-written one."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.requested: list[tuple[str, int]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        with conn:
            greeting = conn.recv(2)
            conn.recv(greeting[1])
            conn.sendall(b"\x05\x00")
            head = conn.recv(4)
            if head[3] == 3:
                host = conn.recv(conn.recv(1)[0]).decode()
            else:
                host = socket.inet_ntoa(conn.recv(4))
            port = int.from_bytes(conn.recv(2), "big")
            self.requested.append((host, port))
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            conn.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + self.upstream.to_bytes(2, "big"))
            pump = threading.Thread(target=self._pipe, args=(upstream, conn), daemon=True)
            pump.start()
            self._pipe(conn, upstream)
            pump.join(timeout=5)
            upstream.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def __enter__(self) -> "Socks5Proxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def test_a_socks_proxy_carries_the_model_call(client, home):
    with Listener() as model, Socks5Proxy(upstream=model.port) as socks:
        _slot(home, f"http://{MODEL_HOST}:8080/v1")
        assert _put(client, "/api/config/proxy", {"mode": "socks", "url": f"socks5://127.0.0.1:{socks.port}"}).status_code == 200

        result = _ping(client)

    assert result["ok"] is True, result
    assert socks.requested == [(MODEL_HOST, 8080)]  # the proxy resolved the name, not the server
    assert [(m, p) for m, p, _ in model.requests] == [("POST", "/v1/chat/completions")]


def test_a_model_on_loopback_bypasses_the_proxy(client, home):
    with Listener() as model:
        _slot(home, model.base_url)
        _put(client, "/api/config/proxy", {"mode": "http", "url": f"http://127.0.0.1:{closed_port()}"})
        assert _ping(client)["ok"] is True
        # A request-supplied target on loopback too (stays pinned to the checked address).
        preset = {"customPresets": {"mine": {"provider": "openai", "model": "m", "baseUrl": model.base_url}}}
        header = {"HTTP_X_SLOT_CONFIG": base64.b64encode(json.dumps(preset).encode()).decode()}
        assert _post(client, "/api/ai/ping", {"modelRef": "mine"}, **header).json()["ok"] is True
    assert len(model.requests) == 2


# --- app update ----------------------------------------------------------------------------------


def test_app_update_reads_the_latest_stable_release(client, home, settings):
    with Listener() as releases:
        releases.routes[("GET", RELEASE_PATH)] = (200, {"Content-Type": "application/json"}, json.dumps(RELEASE).encode())
        settings.COVEL_APP_UPDATE_API_URL = releases.origin
        response = client.get("/api/app-update/latest")

    assert response.status_code == 200, response.content
    assert response.json() == {"version": "1.4.2", "name": "Covel 1.4.2", "publishedAt": "2026-11-20T08:00:00Z"}
    assert releases.requests[0][2]["Accept"] == "application/vnd.github+json"


def test_app_update_goes_through_the_proxy(client, home, settings):
    with Listener() as forward_proxy:
        forward_proxy.routes[("GET", f"http://releases.desktop.test{RELEASE_PATH}")] = (
            200, {"Content-Type": "application/json"}, json.dumps(RELEASE).encode())
        settings.COVEL_APP_UPDATE_API_URL = "http://releases.desktop.test"
        _put(client, "/api/config/proxy", {"mode": "http", "url": forward_proxy.origin})
        response = client.get("/api/app-update/latest")
    assert response.status_code == 200 and response.json()["version"] == "1.4.2"


def test_app_update_offline_and_without_a_release_are_clear_errors(client, home, settings):
    settings.COVEL_APP_UPDATE_API_URL = f"http://127.0.0.1:{closed_port()}"
    offline = client.get("/api/app-update/latest")
    assert offline.status_code == 502 and offline.json()["code"] == "app_update_unreachable"
    assert offline.json()["details"] == {"reason": "unreachable"}

    with Listener() as releases:
        settings.COVEL_APP_UPDATE_API_URL = releases.origin
        missing = client.get("/api/app-update/latest")
        releases.routes[("GET", RELEASE_PATH)] = (500, {"Content-Type": "text/plain"}, b"oops")
        broken = client.get("/api/app-update/latest")
    assert missing.status_code == 404 and missing.json()["code"] == "app_update_not_found"
    assert broken.status_code == 502 and broken.json() == {
        "error": "The release server answered 500", "code": "app_update_upstream_error", "details": {"status": 500}}


# --- data root, config.toml, config/info ---------------------------------------------------------


def test_data_root_rewrites_only_its_config_toml_line(client, home, tmp_path):
    (home / "config.toml").write_text('# mine\ndata_root = "/old/place"\nwindow = "max"\n\n[ui]\nzoom = 2\n')
    target = tmp_path / "elsewhere"

    response = _put(client, "/api/config/data-root", {"dataRoot": str(target)})

    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "dataRoot": str(target), "configPath": str(home / "config.toml"),
                               "restartRequired": True}
    assert (home / "config.toml").read_text() == f'# mine\ndata_root = "{target}"\nwindow = "max"\n\n[ui]\nzoom = 2\n'
    info = client.get("/api/config/info").json()
    assert info["isDesktop"] is True and info["pendingDataRoot"] == str(target)
    assert info["configPath"] == str(home / "config.toml") and info["keysPath"] == str(home / "keys.env")


@pytest.mark.parametrize("body", [{"dataRoot": "relative/dir"}, {"dataRoot": ""}, {"dataRoot": 3}, {}])
def test_an_invalid_data_root_is_400(client, home, body):
    response = _put(client, "/api/config/data-root", body)
    assert response.status_code == 400 and response.json()["code"] == "invalid_data_root"
    assert not (home / "config.toml").exists()


def test_config_toml_is_editable_as_text_in_desktop_mode_only(client, home, settings):
    items = client.get("/api/config/raw").json()["items"]
    assert [(i["name"], i["applies"]) for i in items] == [("llm.toml", "reload"), ("config.toml", "restart")]
    read = client.get("/api/config/raw/config.toml").json()
    bad = _put(client, "/api/config/raw/config.toml", {"content": "data_root = 5\n", "baseDigest": read["digest"]})
    assert bad.status_code == 400 and bad.json()["code"] == "config_file_invalid"

    saved = _put(client, "/api/config/raw/config.toml", {"content": 'data_root = "/srv/covel"\n', "baseDigest": read["digest"]})

    assert saved.status_code == 200, saved.content
    assert saved.json()["reload"] is None and saved.json()["applies"] == "restart"
    assert (home / "config.toml").read_text() == 'data_root = "/srv/covel"\n'
    settings.COVEL_DESKTOP_REST = False
    assert [i["name"] for i in client.get("/api/config/raw").json()["items"]] == ["llm.toml"]
    assert client.get("/api/config/raw/config.toml").json()["code"] == "config_file_unknown"


def test_the_desktop_server_opens_its_database_under_config_toml_data_root(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data-root"
    home.mkdir()
    (home / "config.toml").write_text(f'data_root = "{data}"\n')
    env = {**os.environ, "COVEL_HOME": str(home), "COVEL_DESKTOP_REST": "1", "DJANGO_SETTINGS_MODULE": "covel.settings.embedded"}
    env.pop("SQLITE_PATH", None)
    code = "import django; django.setup(); from django.conf import settings; print(settings.DATABASES['default']['NAME'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=BASE_DIR, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(data / "covel.db")

    refused = subprocess.run([sys.executable, "-c", code], env={**env, "DEPLOYMENT_TIER": "demo",
                             "COVEL_DESKTOP_REST_TOKEN": "t", "COVEL_MEDIA_TOKEN_SECRET": "s"},
                             cwd=BASE_DIR, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "COVEL_DESKTOP_REST=1" in refused.stderr


# --- open-folder ---------------------------------------------------------------------------------


@pytest.fixture
def opener(settings, tmp_path) -> Path:
    """COVEL_DESKTOP_OPENER: a script that records the path it was asked to open."""
    record = tmp_path / "opened.txt"
    script = tmp_path / "opener.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{record}"\n')
    script.chmod(0o755)
    settings.COVEL_DESKTOP_OPENER = str(script)
    return record


def _opened(record: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if record.exists() and len(lines := record.read_text().splitlines()) >= count:
            return lines
        time.sleep(0.02)
    return record.read_text().splitlines() if record.exists() else []


def test_open_folder_creates_a_missing_llm_toml_and_opens_targets(client, home, opener):
    created = _post(client, "/api/config/open-folder", {"target": "llm.toml"})
    assert created.status_code == 200 and created.json() == {"ok": True, "created": True}
    assert "[covel.story]" in (home / "llm.toml").read_text()

    folder = _post(client, "/api/config/open-folder", {"target": "config"})
    assert folder.json() == {"ok": True, "created": False}
    # The two opener processes run on their own: either may write first.
    assert sorted(_opened(opener, 2)) == sorted([str(home / "llm.toml"), str(home)])

    missing = _post(client, "/api/config/open-folder", {"target": "keys.env"})
    assert missing.status_code == 400 and missing.json()["code"] == "open_target_unavailable"
    unknown = _post(client, "/api/config/open-folder", {"target": "/etc/passwd"})
    assert unknown.status_code == 400


def test_open_folder_is_refused_without_a_desktop(client, home, settings, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    settings.COVEL_DESKTOP_OPENER = None
    headless = _post(client, "/api/config/open-folder", {"target": "config"})
    assert headless.status_code == 400 and headless.json()["code"] == "open_target_unavailable"

    settings.COVEL_DESKTOP_REST = False
    outside = _post(client, "/api/config/open-folder", {"target": "llm.toml"})
    assert outside.status_code == 400 and outside.json()["code"] == "open_target_unavailable"
    assert not (home / "llm.toml").exists()


# --- gate: token and mode ------------------------------------------------------------------------

DESKTOP_ROUTES = [
    ("get", "/api/config/keys", None), ("put", "/api/config/keys", {"openai": "k"}),
    ("get", "/api/config/settings", None), ("put", "/api/config/settings", {"entries": {"a": 1}}),
    ("get", "/api/config/proxy", None), ("put", "/api/config/proxy", {"mode": "direct"}),
    ("get", "/api/app-update/latest", None), ("put", "/api/config/data-root", {"dataRoot": "/tmp/x"}),
    ("post", "/api/config/open-folder", {"target": "config"}),
]


def _call(client, method, path, body, **headers):
    if body is None:
        return getattr(client, method)(path, **headers)
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **headers)


@pytest.mark.parametrize("method,path,body", DESKTOP_ROUTES)
def test_with_a_token_every_desktop_route_wants_the_bearer(client, home, settings, method, path, body):
    settings.COVEL_OPERATOR_TOKEN = TOKEN
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_X_SESSION_TOKEN": TOKEN}):
        response = _call(client, method, path, body, **headers)
        assert response.status_code == 401 and response.json()["code"] == "desktop_rest_token_invalid", (path, headers)
    assert not (home / "keys.env").exists() and not (home / "settings.json").exists()


def test_the_right_bearer_passes(client, home, settings):
    settings.COVEL_OPERATOR_TOKEN = TOKEN
    response = _put(client, "/api/config/keys", {"openai": "k"}, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200 and response.json() == {"items": ["openai"]}


@pytest.mark.parametrize("method,path,body", [r for r in DESKTOP_ROUTES if r[1] != "/api/config/open-folder"])
def test_outside_desktop_mode_the_routes_are_403(client, settings, tmp_path, method, path, body):
    settings.COVEL_HOME = tmp_path
    response = _call(client, method, path, body)
    assert response.status_code == 403 and response.json()["code"] == "desktop_rest_disabled"
    assert list(tmp_path.iterdir()) == []


def test_config_info_outside_desktop_mode(client):
    info = client.get("/api/config/info").json()
    assert info["isDesktop"] is False
    assert {info[k] for k in ("configPath", "keysPath", "settingsPath", "proxyPath", "logsDir", "pendingDataRoot")} == {None}


def test_keys_env_is_ignored_outside_desktop_mode(client, home, settings):
    _put(client, "/api/config/keys", {"openai": "sk-desktop"})
    settings.COVEL_DESKTOP_REST = False
    assert client.get("/api/provider-keys").json() == {"providers": {}}
