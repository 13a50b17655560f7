"""GET /api/sessions/:id/plugin-diagnostics and POST /api/plugins/:id/reload over HTTP.

``beacon`` is a builtin test plugin registering RPC actions; ``lantern`` the same package installed
as a community plugin, whose modules leave marker files when imported, so a test proves that reading
diagnostics (or reloading an unloaded package) imports nothing (tests/sessions/lantern_support.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.diagnostics import window_clear
from plugins_app.registry import registry_reset
from tests.sessions.grants_support import community_grants_allow
from tests.sessions.lantern_support import (
    ENTRY_PY, builtin_dir_with_beacon, lantern_install, lantern_uninstall, marks_clear, marks_of,
)
from tests.turns.test_actions_helpers import session_make

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def beacon(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_beacon(tmp_path / "builtin"))
    settings.COVEL_RPC_HANDLER_TIMEOUT_SECONDS = 1
    marks_clear()
    window_clear()
    registry_reset()
    yield
    lantern_uninstall()
    marks_clear()
    window_clear()


def rpc(api, session_id: str, body):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json")


def diagnostics(api, session_id: str, query: str = ""):
    return api.get(f"/api/sessions/{session_id}/plugin-diagnostics{query}")


def _item(body: dict, plugin_id: str) -> dict:
    return next(p for p in body["plugins"] if p["pluginId"] == plugin_id)


def test_registrations_and_recent_calls_of_the_session(api):
    # given a session whose builtin plugin answered two RPC calls (one timed out)
    session = session_make(plugins=("narrator", "beacon"))
    assert rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping", "payload": {"secret": "s3"}}).status_code == 200
    assert rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "nap", "payload": {"seconds": 2}}).status_code == 504
    # when the diagnostics are read
    response = diagnostics(api, session.id)
    # then the snapshot is not cacheable and describes the plugin as registered in this process
    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["sessionId"] == session.id and body["history"] == {"scope": "process", "limit": 100}
    item = _item(body, "beacon")
    assert item["source"] == "builtin" and item["hostState"] == "loaded" and item["sessionState"] == "active"
    assert item["active"] is True and item["serverCodeApproved"] is True
    assert item["registrations"]["actions"] == ["ping", "stash", "nap"]
    assert item["registrations"]["tools"] == [] and item["registrations"]["hooks"] == []
    assert item["commands"] == [{"name": "roll", "action": "ping", "registered": True}]
    assert "beacon/manual" in item["runtimeIds"]
    assert _item(body, "narrator")["sessionState"] == "active"
    # and the calls, newest first, carry identities and outcomes but no payload or result
    nap, ping = body["calls"]
    assert (nap["name"], nap["outcome"], nap["errorCode"]) == ("nap", "timeout", "timeout")
    assert (ping["name"], ping["outcome"]) == ("ping", "success")
    assert ping["providerPluginId"] == "beacon" and ping["callerPluginId"] == "framework"
    assert ping["contract"] == "covel.rpc-action@1" and isinstance(ping["durationMs"], int)
    assert "s3" not in json.dumps(body["calls"])
    assert body["extensionCalls"] == []


def test_the_plugin_filter_and_query_validation(api):
    session = session_make(plugins=("narrator", "beacon"))
    rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping"})
    only = diagnostics(api, session.id, "?pluginId=narrator").json()
    assert [p["pluginId"] for p in only["plugins"]] == ["narrator"] and only["calls"] == []
    assert len(diagnostics(api, session.id, "?pluginId=beacon").json()["calls"]) == 1
    assert diagnostics(api, session.id, "?session_token=x").status_code == 200  # the owner token's query form
    unknown = diagnostics(api, session.id, "?pluginId=nope")
    assert unknown.status_code == 404 and unknown.json()["code"] == "plugin_not_found"
    for query in ("?pluginId=", "?limit=3", "?pluginId=beacon&pluginId=narrator"):
        bad = diagnostics(api, session.id, query)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_query", query
    missing = diagnostics(api, "nope")
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"


def test_a_recreated_session_does_not_see_the_old_calls(api):
    session = session_make(plugins=("narrator", "beacon"), session_id="reborn")
    rpc(api, session.id, {"kind": "action", "pluginId": "beacon", "action": "ping"})
    session.delete()
    again = session_make(plugins=("narrator", "beacon"), session_id="reborn")
    assert diagnostics(api, again.id).json()["calls"] == []


def _without_beacon(settings) -> None:
    """The default builtin plugins only: beacon's entry (lantern's, as builtin) would leave the same marker."""
    settings.COVEL_BUILTIN_PLUGINS_DIR = None
    registry_reset()


def test_a_community_plugin_awaiting_approval_shows_no_registrations_and_is_not_imported(api, settings):
    _without_beacon(settings)
    lantern_install()
    session = session_make(plugins=("narrator", "lantern"))
    body = diagnostics(api, session.id).json()
    item = _item(body, "lantern")
    assert item["source"] == "community" and item["hostState"] == "installed"
    assert item["sessionState"] == "approval-required" and item["approvalRequired"] is True
    assert item["serverCodeApproved"] is False and item["active"] is False
    assert item["registrations"] == {"tools": [], "hooks": [], "actions": [], "services": [], "extensions": []}
    assert item["commands"] == [{"name": "roll", "action": "ping", "registered": False}]
    assert marks_of("entry") == []


# --- reload -----------------------------------------------------------------------------------------


def _lantern_entry(root: Path, text: str) -> None:
    (root / "server" / "entry.py").write_text(text, encoding="utf-8")


def test_reload_is_off_unless_enabled_and_only_for_community_plugins(api, settings):
    lantern_install()
    settings.COVEL_PLUGIN_RELOAD_ENABLED = False
    off = api.post("/api/plugins/lantern/reload", content_type="application/json")
    assert off.status_code == 403 and off.json()["code"] == "plugin_reload_disabled"
    settings.COVEL_PLUGIN_RELOAD_ENABLED = True
    builtin = api.post("/api/plugins/beacon/reload", content_type="application/json")
    assert builtin.status_code == 403 and builtin.json()["code"] == "plugin_reload_disabled"
    unknown = api.post("/api/plugins/nope/reload", content_type="application/json")
    assert unknown.status_code == 404 and unknown.json()["code"] == "plugin_not_found"
    bad = api.post("/api/plugins/lantern/reload", data=json.dumps({"sessionId": 3}), content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request_body"
    settings.COVEL_INSTALL_API_ENABLED = False
    closed = api.post("/api/plugins/lantern/reload", content_type="application/json")
    assert closed.status_code == 403 and closed.json()["code"] == "install_api_disabled"


def test_reload_of_a_package_whose_code_never_ran_imports_nothing(api, settings):
    settings.COVEL_PLUGIN_RELOAD_ENABLED = True
    _without_beacon(settings)
    lantern_install()
    response = api.post("/api/plugins/lantern/reload", content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "pluginId": "lantern", "generation": "lantern@1"}
    assert marks_of("entry") == []


def test_reload_of_loaded_code_needs_the_sessions_grant_and_a_broken_package_keeps_the_old_generation(api, settings):
    settings.COVEL_PLUGIN_RELOAD_ENABLED = True
    root = lantern_install()
    session = session_make(plugins=("narrator", "lantern"))
    community_grants_allow(session, "lantern", actions=["ping"])
    first = rpc(api, session.id, {"kind": "action", "pluginId": "lantern", "action": "ping", "payload": 1})
    assert first.status_code == 200 and first.json()["result"]["pong"] == 1  # the entry is loaded now
    # when the entry changes and is reloaded
    _lantern_entry(root, ENTRY_PY.replace('return {"pong": payload,', 'return {"pong": payload, "version": 2,'))
    anonymous = api.post("/api/plugins/lantern/reload", content_type="application/json")
    assert anonymous.status_code == 403 and anonymous.json()["code"] == "server_code_not_approved"
    stranger = session_make(plugins=("narrator", "lantern"))  # no grants
    refused = api.post("/api/plugins/lantern/reload", data=json.dumps({"sessionId": stranger.id}), content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "server_code_not_approved"
    gone = api.post("/api/plugins/lantern/reload", data=json.dumps({"sessionId": "nope"}), content_type="application/json")
    assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    reloaded = api.post("/api/plugins/lantern/reload", data=json.dumps({"sessionId": session.id}), content_type="application/json")
    # then later calls run the new generation
    assert reloaded.status_code == 200 and reloaded.json()["generation"] == "lantern@1", reloaded.content
    assert rpc(api, session.id, {"kind": "action", "pluginId": "lantern", "action": "ping", "payload": 2}).json()["result"]["version"] == 2
    # when the package breaks, the reload fails and the loaded generation stays in effect
    _lantern_entry(root, "def register(api):\n    raise RuntimeError('broken')\n")
    broken = api.post("/api/plugins/lantern/reload", data=json.dumps({"sessionId": session.id}), content_type="application/json")
    assert broken.status_code == 409 and broken.json()["code"] == "plugin_reload_failed"
    assert rpc(api, session.id, {"kind": "action", "pluginId": "lantern", "action": "ping", "payload": 3}).json()["result"]["version"] == 2
