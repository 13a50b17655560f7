"""GET /api/ui-specs (spec 004 GET /api/ui-specs): the plugins' checked UI declarations by slot, the
diagnostics of the ones left out, and the session filter."""
from __future__ import annotations

import pytest

from tests.sessions.support import OPERATOR_TOKEN
from tests.sessions.ui_support import ui_plugins, ui_session_create  # noqa: F401

pytestmark = pytest.mark.django_db

SLOTS = ("right", "message", "view", "segment", "left")


def specs_of(body, slot, plugin_id="ui-panel"):
    return next((group["specs"] for group in body[slot] if group["pluginId"] == plugin_id), [])


def diagnostic(body, declared_path):
    (found,) = [d for d in body["diagnostics"] if d["declaredPath"] == declared_path]
    return found


def test_lists_every_plugins_specs_by_slot_with_the_version_filled_in(client, ui_plugins):
    response = client.get("/api/ui-specs")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {*SLOTS, "diagnostics"}
    (codex,) = specs_of(body, "right")
    assert codex == {"specVersion": 1, "id": "codex", "group": "codex", "label": {"zh": "知识图鉴", "en": "Codex"},
                     "icon": "book-open", "dataSource": {"namespace": "entries"},
                     "view": {"component": "Stack", "children": [{"component": "Text", "props": {"text": "Entries"}}]}}
    assert [s["id"] for s in specs_of(body, "message")] == ["panel-block"]
    assert [s["id"] for s in specs_of(body, "segment")] == ["speech"]
    assert body["left"] == []
    assert [g["pluginId"] for g in body["right"]] == ["ui-panel"]


def test_webviews_are_served_inline_or_as_a_content_addressed_url_without_author_fields(client, ui_plugins):
    body = client.get("/api/ui-specs").json()

    views = {s["id"]: s for s in specs_of(body, "view")}
    assert list(views) == ["map", "notes"]
    assert views["notes"]["webview"] == {"html": "<!doctype html><html><body><p>Notes</p></body></html>\n"}
    map_webview = views["map"]["webview"]
    assert set(map_webview) == {"url", "height"} and map_webview["height"] == 480
    prefix, digest, entry = map_webview["url"].rsplit("/", 2)
    assert prefix == "/plugin-assets/ui-panel" and len(digest) == 32 and entry == "index.html"


def test_each_refused_spec_is_left_out_and_explained_once(client, ui_plugins):
    body = client.get("/api/ui-specs").json()

    def issues(path):
        return [(i["path"], i["code"]) for i in diagnostic(body, path)["issues"]]

    assert issues("./ui/missing.json") == [("", "invalid")]
    assert issues("./ui/broken.json") == [("", "invalid")]
    assert issues("../outside.json") == [("", "invalid")]
    assert issues("./ui/future.json") == [("specVersion", "unsupported-spec-version")]
    assert issues("./ui/rooted.json") == [("webview.root", "field-not-allowed")]
    assert issues("./ui/foreign-data.json") == [("dataSource.pluginId", "field-not-allowed")]
    assert issues("./ui/map-again.json") == [("id", "duplicate-id")]
    assert issues("./ui/bad-segment.json") == [("match", "missing-field"), ("dataSource", "field-not-allowed")]
    future = diagnostic(body, "./ui/future.json")
    assert future == {"pluginId": "ui-panel", "runtimeId": None, "slot": "right", "specIndex": 3,
                      "declaredPath": "./ui/future.json", "specId": "future", "issues": future["issues"]}
    assert diagnostic(body, "./ui/map-again.json")["slot"] == "view"
    assert [s["id"] for s in specs_of(body, "right")] == ["codex"]
    assert len(body["diagnostics"]) == 8


def test_a_schema_violation_names_the_field(client, ui_plugins):
    (ui_plugins / "ui-panel" / "ui" / "block.json").write_text('{"id": "panel block", "view": {"children": []}}')

    body = client.get("/api/ui-specs").json()

    assert specs_of(body, "message") == []
    assert [(i["path"], i["code"]) for i in diagnostic(body, "./ui/block.json")["issues"]] == [
        ("id", "invalid-field"), ("view.component", "missing-field")]


def test_with_a_session_only_its_active_plugins_and_their_diagnostics(client, ui_plugins):
    without_panel = ui_session_create(client, ["teller"])
    with_panel = ui_session_create(client, ["teller", "ui-panel"])

    narrowed = client.get(f"/api/ui-specs?sessionId={without_panel['id']}").json()
    full = client.get(f"/api/ui-specs?sessionId={with_panel['id']}").json()

    assert narrowed == {**{slot: [] for slot in SLOTS}, "diagnostics": []}
    assert [s["id"] for s in specs_of(full, "right")] == ["codex"]
    assert len(full["diagnostics"]) == 8


def test_an_unknown_session_is_404_session_not_found(client, ui_plugins):
    response = client.get("/api/ui-specs?sessionId=nope")

    assert response.status_code == 404
    assert response.json() == {"error": "Session not found: nope", "code": "session_not_found"}


def test_hosted_tiers_check_the_owner_token_of_the_named_session(client, ui_plugins, settings):
    created = ui_session_create(client, ["teller", "ui-panel"])
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN

    refused = client.get(f"/api/ui-specs?sessionId={created['id']}")
    allowed = client.get(f"/api/ui-specs?sessionId={created['id']}", HTTP_X_SESSION_TOKEN=created["ownerToken"])
    public = client.get("/api/ui-specs")

    assert refused.status_code == 401 and refused.json()["code"] == "session_owner_required"
    assert allowed.status_code == 200 and [s["id"] for s in specs_of(allowed.json(), "right")] == ["codex"]
    assert public.status_code == 200


def test_reads_the_files_once_per_registry(client, ui_plugins):
    first = client.get("/api/ui-specs").json()
    (ui_plugins / "ui-panel" / "ui" / "codex.json").write_text('{"id": "changed", "view": {"component": "X"}}')

    again = client.get("/api/ui-specs").json()

    assert again == first
