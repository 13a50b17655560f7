"""Plugin, framework and package-validation endpoints over HTTP (spec 004 插件管理)."""
from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest

from plugins_app.registry import registry_reset
from tests.shared_paths import FIXTURES_DIR

FIXTURES = FIXTURES_DIR / "upstream"

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(tmp_path, settings):
    """COVEL_HOME with three upstream plugins installed as community plugins and a tiny builtin dir."""
    settings.COVEL_HOME = tmp_path / "home"
    for plugin_id in ("narrator", "dice-check", "living-world-rules"):
        shutil.copytree(FIXTURES / "plugins" / plugin_id, settings.COVEL_HOME / "plugins" / plugin_id)
    builtin = tmp_path / "builtin" / "notes"
    builtin.mkdir(parents=True)
    (builtin / "PLUGIN.md").write_text(
        "---\nid: notes\nkind: plugin\ndescription: Notes.\nprovides: [notes@1]\ncontributes:\n  data:\n    notes:\n"
        "      schema: ./n.json\n      authoring: {title: Notes, hint: Write notes., source: {kind: yaml, path: data/notes.yaml, key: id}}\n"
        "runtime:\n  type: agent\n  schedule: {stage: post-turn, trigger: {type: auto}}\n---\nTake notes.\n")
    settings.COVEL_BUILTIN_PLUGINS_DIR = tmp_path / "builtin"
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


def test_list_plugins_reports_host_state(client, home):
    response = client.get("/api/plugins")
    assert response.status_code == 200
    items = {p["id"]: p for p in response.json()["items"]}
    assert set(items) == {"notes", "narrator", "dice-check", "living-world-rules"}
    assert items["notes"]["hostState"] == "loaded" and items["notes"]["source"] == "builtin"
    narrator = items["narrator"]
    assert narrator["hostState"] == "error" and narrator["source"] == "community"
    assert narrator["error"].startswith("<plugin>/PLUGIN.md: entry ./server/index.js")
    assert str(home) not in narrator["error"]
    assert narrator["runtimes"][0]["id"] == "narrator" and narrator["runtimes"][0]["outputKind"] == "story"
    assert items["living-world-rules"]["hostState"] != "error"


def test_plugin_detail_and_404(client, home):
    detail = client.get("/api/plugins/dice-check").json()
    assert [r["id"] for r in detail["runtimes"]] == ["dice-check/recorder", "dice-check/roller"]
    assert detail["runtimes"][0]["trigger"] == {"type": "event", "topic": "check.resolved"}
    assert detail["commands"][0]["name"] == "roll" and detail["eventTopics"] == ["check.resolved"]
    missing = client.get("/api/plugins/nope")
    assert missing.status_code == 404 and missing.json()["code"] == "plugin_not_found"


def test_capabilities_and_authoring(client, home):
    caps = client.get("/api/framework/capabilities").json()
    assert caps["framework"]["pluginManifest"]["triggerTypes"] == ["auto", "manual", "event"]
    assert caps["framework"]["pluginManifest"]["turnCompletionModes"] == ["await", "detached"]
    authoring = client.get("/api/framework/authoring").json()
    assert [c["pluginId"] for c in authoring["contracts"]] == ["notes"]
    assert authoring["contracts"][0]["source"]["entry"]["path"] == "data/notes.yaml"
    assert {p["id"] for p in authoring["plugins"]} == {"notes", "living-world-rules"}
    assert [p["id"] for p in authoring["packs"]][:1] == ["traditional-story"]
    assert authoring["files"][0]["path"] == "world.yaml"


def test_plugin_flows_groups_runtimes_by_stage(client, home):
    flows = client.get("/api/plugin-flows").json()
    assert {p["id"] for p in flows["plugins"]} == {"notes", "narrator", "dice-check", "living-world-rules"}
    assert all("pluginType" not in p for p in flows["plugins"])
    stages = {s["stage"]: [r["id"] for r in s["runtimes"]] for s in flows["steps"]}
    assert "notes" in stages["post-turn"]
    assert all(r["kind"] in ("core", "plugin") for s in flows["steps"] for r in s["runtimes"])
    assert "narrator" not in [r for ids in stages.values() for r in ids]  # error plugins contribute no steps


def zip_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def upload(client, kind: str, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return client.post(f"/api/install/validate/{kind}", {"file": SimpleUploadedFile("pkg.zip", data, "application/zip")})


def test_validate_plugin_upload_with_errors_returns_200_report(client, home):
    data = zip_of({"demo/PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\nfuture: 1\nruntime:\n  type: agent\n  agent: {tools: {local: [x]}}\n---\n"})
    response = upload(client, "plugin", data)
    assert response.status_code == 200
    report = response.json()
    assert report["kind"] == "plugin" and report["id"] == "demo" and report["ok"] is False
    codes = {(i["code"], i.get("field")) for i in report["issues"]}
    assert ("tools-local", "runtime.agent.tools.local") in codes and ("unknown-field", "future") in codes
    assert report["counts"]["errors"] >= 1 and report["counts"]["warnings"] == 1


def test_validate_zip_slip_upload(client, home):
    response = upload(client, "world", zip_of({"world.yaml": "id: x\n", "../../escape.txt": "x"}))
    assert response.status_code == 200
    report = response.json()
    assert report["ok"] is False and "id" not in report
    assert report["issues"] == [{"severity": "error", "code": "zip-unsafe-path", "field": "../../escape.txt", "message": "path escapes the package (..)"}]


def test_validate_world_upload_ok(client, home):
    files = {f"emberback/{p.relative_to(FIXTURES / 'worlds' / 'emberback')}": p.read_text()
             for p in (FIXTURES / "worlds" / "emberback").rglob("*") if p.is_file()}
    report = upload(client, "world", zip_of(files)).json()
    assert report["ok"] is True and report["id"] == "emberback"
    assert report["counts"]["characters"] == 3 and report["counts"]["loreEntries"] == 16 and report["counts"]["locales"] == 2


def test_validate_installed_sources(client, home):
    report = client.post("/api/install/validate/plugin", {"source": {"kind": "installed", "id": "narrator"}}, content_type="application/json").json()
    assert report["id"] == "narrator" and report["ok"] is False
    assert [i["code"] for i in report["issues"] if i["severity"] == "error"] == ["entry-not-loadable"]
    missing = client.post("/api/install/validate/world", {"source": {"kind": "installed", "id": "nope"}}, content_type="application/json")
    assert missing.status_code == 404
    outside = client.post("/api/install/validate/plugin", {"source": {"kind": "path", "path": "/etc"}}, content_type="application/json")
    assert outside.status_code == 403 and outside.json()["code"] == "path-outside-roots"
    bad = client.post("/api/install/validate/plugin", {"nothing": 1}, content_type="application/json")
    assert bad.status_code == 400
