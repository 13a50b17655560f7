"""Plugin data routes (spec 004 §插件数据): visibility, reserved namespaces, limits, events."""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from sessions.models import Session
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db


def _url(session_id: str, *parts: str) -> str:
    return "/".join([f"/api/sessions/{session_id}/plugin-data", *parts])


def test_put_get_list_index_delete_with_events(client, session):
    sid = session["id"]
    put = client.put(_url(sid, "teller", "schema", "attributes"), {"value": {"dims": ["strength"]}}, content_type="application/json")
    assert put.status_code == 200 and put.json() == {"ok": True, "namespace": "schema", "key": "attributes"}
    client.put(_url(sid, "teller", "schema", "attributes"), {"value": {"dims": ["wit"]}}, content_type="application/json")
    client.put(_url(sid, "teller", "entries", "codex-1"), {"value": "text"}, content_type="application/json")

    one = client.get(_url(sid, "teller", "schema", "attributes")).json()
    assert one["value"] == {"dims": ["wit"]} and one["namespace"] == "schema" and one["updatedAt"]
    assert PluginData.objects.get(key="attributes").version == 2
    ns = client.get(_url(sid, "teller", "schema")).json()["items"]
    assert [(i["namespace"], i["key"]) for i in ns] == [("schema", "attributes")]
    by_plugin = client.get(_url(sid, "teller")).json()["items"]
    assert [(i["namespace"], i["key"]) for i in by_plugin] == [("entries", "codex-1"), ("schema", "attributes")]
    everything = client.get(_url(sid)).json()["items"]
    assert {i["pluginId"] for i in everything} == {"teller"}
    index = client.get(_url(sid, "teller", "_index")).json()
    assert index["sessionId"] == sid and index["pluginId"] == "teller"
    assert [(n["namespace"], n["count"], [k["valueType"] for k in n["keys"]]) for n in index["namespaces"]] == [
        ("entries", 1, ["string"]), ("schema", 1, ["object"])]
    assert "value" not in index["namespaces"][0]["keys"][0]

    assert client.delete(_url(sid, "teller", "entries", "codex-1")).json() == {"ok": True}
    assert client.get(_url(sid, "teller", "entries", "codex-1")).status_code == 404
    events = list(SessionEvent.objects.filter(session_id=sid).order_by("seq").values_list("type", "payload"))
    assert [(t, p["key"], p["op"]) for t, p in events] == [
        ("plugin-data.changed", "attributes", "put"), ("plugin-data.changed", "attributes", "put"),
        ("plugin-data.changed", "codex-1", "put"), ("plugin-data.changed", "codex-1", "delete")]


def test_reserved_namespaces_cannot_be_written_and_hidden_is_invisible(client, session):
    sid = session["id"]
    for namespace in ("_dimensions", "_hidden.secrets", "_runtime_jobs"):
        response = client.put(_url(sid, "teller", namespace, "k"), {"value": 1}, content_type="application/json")
        assert response.status_code == 403
        assert client.delete(_url(sid, "teller", namespace, "k")).status_code == 403
    PluginData.objects.create(session_id=sid, plugin_id="teller", namespace="_hidden.secrets", key="culprit", value="Tam")
    assert client.get(_url(sid, "teller", "_hidden.secrets", "culprit")).status_code == 404
    assert client.get(_url(sid, "teller", "_hidden.secrets")).json()["items"] == []
    assert client.get(_url(sid, "teller")).json()["items"] == []
    assert client.get(_url(sid)).json()["items"] == []
    assert client.get(_url(sid, "teller", "_index")).json()["namespaces"] == []
    state = client.get(f"/api/sessions/{sid}/state").json()["tables"]
    assert not any(name.startswith("plugin_data/") for name in state)
    assert SessionEvent.objects.filter(session_id=sid).count() == 0


def test_value_over_256_kib_is_413_and_not_written(client, session):
    sid = session["id"]
    big = "x" * (256 * 1024)  # + JSON quotes → 2 bytes over
    response = client.put(_url(sid, "teller", "notes", "big"), {"value": big}, content_type="application/json")
    assert response.status_code == 413
    assert PluginData.objects.count() == 0 and SessionEvent.objects.count() == 0
    exact = "x" * (256 * 1024 - 2)
    assert client.put(_url(sid, "teller", "notes", "fits"), {"value": exact}, content_type="application/json").status_code == 200


def test_write_errors(client, session):
    sid = session["id"]
    missing_value = client.put(_url(sid, "teller", "notes", "k"), {"other": 1}, content_type="application/json")
    assert missing_value.status_code == 400
    unknown = client.put(_url(sid, "ghost", "notes", "k"), {"value": 1}, content_type="application/json")
    assert unknown.status_code == 404 and "Unknown plugin: ghost" in unknown.json()["error"]
    not_enabled = client.put(_url(sid, "clock", "notes", "k"), {"value": 1}, content_type="application/json")
    assert not_enabled.status_code == 403
    assert client.get(_url(sid, "ghost")).status_code == 404
    Session.objects.filter(pk=sid).update(status="paused")
    paused = client.put(_url(sid, "teller", "notes", "k"), {"value": 1}, content_type="application/json")
    assert paused.status_code == 409 and paused.json()["code"] == "session_not_active"
    assert PluginData.objects.count() == 0


def test_missing_session_is_404(client, catalog):
    response = client.get("/api/sessions/nope/plugin-data")
    assert response.status_code == 404 and response.json()["code"] == "session_not_found"
