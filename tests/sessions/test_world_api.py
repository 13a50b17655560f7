"""World endpoints over HTTP (spec 004 世界管理)."""
from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from plugins_app.registry import registry_reset
from sessions.models import Session, World
from tests.shared_paths import FIXTURES_DIR

FIXTURE_WORLDS = FIXTURES_DIR / "upstream" / "worlds"

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(tmp_path, settings):
    """A fresh COVEL_HOME with the upstream emberback world installed as a user world, and the
    upstream haruka world as the only builtin world (so tests do not depend on our content)."""
    settings.COVEL_HOME = tmp_path / "home"
    builtin = tmp_path / "builtin"
    shutil.copytree(FIXTURE_WORLDS / "haruka-academy", builtin / "haruka-academy")
    settings.COVEL_BUILTIN_WORLDS_DIR = builtin
    shutil.copytree(FIXTURE_WORLDS / "emberback", settings.COVEL_HOME / "worlds" / "emberback")
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


def png_bytes(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_list_worlds_returns_summaries_without_lore_or_dimensions(client, home):
    response = client.get("/api/worlds")
    assert response.status_code == 200
    items = {w["id"]: w for w in response.json()["items"]}
    assert set(items) == {"haruka-academy", "emberback"}
    ember = items["emberback"]
    assert ember["name"] == "Emberback Relay" and ember["locale"] == "en-US"
    assert ember["metadata"]["source"] == "user-file"
    assert items["haruka-academy"]["metadata"]["source"] == "file"
    assert ember["metadata"]["supportedLocales"] == ["en-US", "zh-CN"]
    assert ember["metadata"]["localizedText"] == {"name": {"zh-CN": "余烬背中继站"}, "description": {"zh-CN": ember["metadata"]["localizedText"]["description"]["zh-CN"]}}
    for key in ("dimensions", "characterSchema", "pluginPolicy", "embeddedCharacters", "worldData"):
        assert key not in ember["metadata"]
    assert "lore" not in ember


def test_get_world_full_record_and_404(client, home):
    response = client.get("/api/worlds/emberback")
    assert response.status_code == 200
    body = response.json()
    assert body["lore"].startswith("# Emberback Relay")
    assert list(body["metadata"]["dimensions"])[:2] == ["crownfire", "relayGrid"]
    assert len(body["metadata"]["embeddedCharacters"]) == 3
    missing = client.get("/api/worlds/nope")
    assert missing.status_code == 404 and missing.json() == {"error": "World not found: nope", "code": "world_not_found"}


def test_create_world_and_conflict(client, home):
    response = client.post("/api/worlds", {"id": "my-world", "name": "Mine", "description": "d", "locale": "zh-CN"},
                           content_type="application/json")
    assert response.status_code == 201
    assert response.json()["metadata"]["source"] == "store"
    row = World.objects.get()
    assert row.id == "my-world" and row.metadata["defaultLocale"] == "zh-CN"
    again = client.post("/api/worlds", {"id": "my-world", "name": "Again"}, content_type="application/json")
    assert again.status_code == 409 and again.json()["code"] == "world_already_exists"
    package_clash = client.post("/api/worlds", {"id": "emberback", "name": "X"}, content_type="application/json")
    assert package_clash.status_code == 409
    generated = client.post("/api/worlds", {"name": "No id"}, content_type="application/json").json()
    assert generated["id"].startswith("world-") and len(generated["id"]) == len("world-") + 8
    listed = {w["id"] for w in client.get("/api/worlds").json()["items"]}
    assert {"my-world", generated["id"]} <= listed


def test_patch_merges_metadata_and_validates_dimensions(client, home):
    client.post("/api/worlds", {"id": "w1", "name": "W", "metadata": {"tags": ["a"], "keep": 1}}, content_type="application/json")
    response = client.patch("/api/worlds/w1", {"description": "new", "metadata": {"tags": ["b"]},
                            "dimensions": {"wall": {"name": "Wall", "schema": {"type": "number", "minimum": 0, "maximum": 100}, "initialValue": 100}}},
                            content_type="application/json")
    assert response.status_code == 200
    meta = World.objects.get(pk="w1").metadata
    assert meta["keep"] == 1 and meta["tags"] == ["b"] and meta["dimensions"]["wall"]["initialValue"] == 100
    bad = client.patch("/api/worlds/w1", {"dimensions": {"wall": {"name": "Wall", "schema": {"type": "number"}, "initialValue": "100"}}},
                       content_type="application/json")
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_dimensions"
    assert bad.json()["details"]["issues"][0]["code"] == "initial-value-invalid"
    assert World.objects.get(pk="w1").metadata["dimensions"]["wall"]["initialValue"] == 100


def test_patch_package_world_marks_it_modified(client, home):
    response = client.patch("/api/worlds/haruka-academy", {"description": "edited"}, content_type="application/json")
    assert response.status_code == 200
    assert response.json()["metadata"]["packageModified"] is True
    assert client.get("/api/worlds/haruka-academy").json()["description"] == "edited"


def test_dimensions_import_and_export(client, home):
    dims = {"reputation": {"name": "声望", "schema": {"type": "integer", "minimum": 0, "maximum": 100}, "initialValue": 0}}
    response = client.post("/api/worlds/emberback/dimensions/import", {"dimensions": dims}, content_type="application/json")
    assert response.status_code == 200
    assert response.json()["metadata"]["dimensions"] == dims and response.json()["metadata"]["packageModified"] is True
    exported = client.get("/api/worlds/emberback/dimensions/export?format=json")
    assert exported.status_code == 200 and exported["Content-Disposition"].startswith("attachment")
    assert exported.json() == dims
    assert client.get("/api/worlds/emberback/dimensions/export?format=xml").status_code == 400
    assert client.get("/api/worlds/nope/dimensions/export").status_code == 404
    yaml_export = client.get("/api/worlds/haruka-academy/dimensions/export")
    assert yaml_export.status_code == 200 and b"geography:" in yaml_export.content


@pytest.mark.parametrize("body,status,code", [
    ({"nope": 1}, 400, "invalid_request"),
    ({"dimensions": {"x": {"name": "X", "schema": {"type": "string", "pattern": "^a"}, "initialValue": "a"}}}, 422, "invalid_dimensions"),
    ({"dimensions": {"x": {"name": "X", "schema": {"type": "integer"}, "initialValue": 1.5}}}, 422, "invalid_dimensions"),
])
def test_dimensions_import_rejects(client, home, body, status, code):
    response = client.post("/api/worlds/emberback/dimensions/import", body, content_type="application/json")
    assert response.status_code == status and response.json()["code"] == code
    assert not World.objects.filter(pk="emberback").exists()


def test_delete_builtin_world_is_forbidden(client, home):
    response = client.delete("/api/worlds/haruka-academy")
    assert response.status_code == 403


def test_delete_user_world_cascades_sessions_and_package(client, home):
    Session.objects.create(id="emberback-aaaa1111", world_id="emberback", incarnation="i", event_epoch="e")
    Session.objects.create(id="other-bbbb2222", world_id="haruka-academy", incarnation="i", event_epoch="e")
    response = client.delete("/api/worlds/emberback")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "id": "emberback", "deletedSessions": 1}
    assert list(Session.objects.values_list("id", flat=True)) == ["other-bbbb2222"]
    assert not (home / "worlds" / "emberback").exists()
    assert client.get("/api/worlds/emberback").status_code == 404


def test_deleting_world_refuses_writes(client, home):
    client.post("/api/worlds", {"id": "w2", "name": "W"}, content_type="application/json")
    World.objects.filter(pk="w2").update(state=World.STATE_DELETING)
    response = client.patch("/api/worlds/w2", {"description": "x"}, content_type="application/json")
    assert response.status_code == 409 and response.json()["code"] == "world_deleting"
    assert client.get("/api/worlds/w2").status_code == 200


def test_plugin_plan_uses_world_packs(client, home):
    response = client.get("/api/worlds/emberback/plugin-plan")
    assert response.status_code == 200
    plan = response.json()
    assert plan["selectedPackId"] == "emberback-rescue"
    assert plan["packs"][0]["id"] == "emberback-rescue" and plan["packs"][0]["source"] == "world"
    installed = {p["id"] for p in client.get("/api/plugins").json()["items"] if p["hostState"] != "error"}
    assert set(plan["defaultPluginIds"]) <= installed
    assert {m["pluginId"] for m in plan["missing"]} >= {"dice-check"} - installed
    assert client.get("/api/worlds/nope/plugin-plan").status_code == 404


def test_gallery_lists_only_real_images_and_serves_them_safely(client, home):
    media = home / "worlds" / "emberback" / "media" / "gallery"
    media.mkdir(parents=True)
    (media / "mile-seventeen.webp").write_bytes(b"not an image")  # unreadable size → not listed
    (media / "mile-seventeen.png").write_bytes(png_bytes(3, 2))
    (media / "secret.png").write_bytes(png_bytes(1, 1))
    gallery_json = home / "worlds" / "emberback" / "media" / "gallery.json"
    import json
    manifest = json.loads(gallery_json.read_text())
    manifest["images"][0]["webFilename"] = "gallery/mile-seventeen.png"
    gallery_json.write_text(json.dumps(manifest))
    response = client.get("/api/worlds/emberback/gallery")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [(i["id"], i["source"], i["width"], i["height"]) for i in items] == [("mile-seventeen", "gallery", 3, 2)]
    assert items[0]["name"]["en-US"] == "Mile Seventeen" and "zh-CN" in items[0]["name"]
    url = items[0]["url"]
    image = client.get(url)
    assert image.status_code == 200 and b"".join(image.streaming_content).startswith(b"\x89PNG")
    assert image["Cache-Control"] == "public, max-age=31536000, immutable"
    assert client.get(url, HTTP_IF_NONE_MATCH=image["ETag"]).status_code == 304
    assert client.get("/api/worlds/emberback/gallery/gallery/secret.png").status_code == 404
    assert client.get("/api/worlds/emberback/gallery/gallery/..%2F..%2Fworld.yaml").status_code == 404
    assert client.get("/api/worlds/emberback/gallery/..%2Fdata/world.data.yaml").status_code == 404
    assert client.get("/api/worlds/haruka-academy/gallery").json() == {"items": []}
