"""Package installs over HTTP (spec 004 插件与世界安装, 安装世界, 目标目录已存在)."""
from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from plugins_app.registry import registry_reset
from tests.shared_paths import FIXTURES_DIR

FIXTURES = FIXTURES_DIR / "upstream"
ST = FIXTURES_DIR / "sillytavern"

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(tmp_path, settings):
    settings.COVEL_HOME = tmp_path / "home"
    settings.COVEL_PACKAGE_ROOTS = [str(tmp_path / "packages")]
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


def zip_dir(root: Path, *, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, prefix + path.relative_to(root).as_posix())
    return buffer.getvalue()


def zip_files(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def post_zip(client, path: str, data: bytes, **extra):
    return client.post(path, data={"file": SimpleUploadedFile("package.zip", data, content_type="application/zip")}, **extra)


TINY_WORLD = {
    "world.yaml": "schemaVersion: '1.0'\nid: tiny-isle\nname: Tiny Isle\nsummary: A rock in the sea.\ndefaultLocale: en-US\n",
    "WORLD.md": "# Tiny Isle\n\nA rock.\n",
    "characters/characters.json": json.dumps([{"id": "gull", "name": "The Gull", "type": "npc"}]),
    "data/lorebook.yaml": "- id: rock\n  keys: [rock]\n  content: It is a rock.\n",
}


def test_world_zip_installs_and_is_listed_at_once(client, home):
    response = post_zip(client, "/api/install/world", zip_dir(FIXTURES / "worlds" / "emberback", prefix="emberback/"))
    assert response.status_code == 201, response.json()
    assert response.json() == {"ok": True, "kind": "world", "id": "emberback", "restartRequired": False}
    assert (home / "worlds" / "emberback" / "world.yaml").is_file()
    assert not [p for p in (home / "worlds").iterdir() if p.name.startswith(".staging")]
    listed = {w["id"]: w for w in client.get("/api/worlds").json()["items"]}
    assert listed["emberback"]["metadata"]["source"] == "generated-file"
    assert "zh-CN" in listed["emberback"]["metadata"]["supportedLocales"]
    detail = client.get("/api/worlds/emberback").json()
    assert detail["metadata"]["source"] == "generated-file" and len(detail["metadata"]["embeddedCharacters"]) > 0

    again = post_zip(client, "/api/install/world", zip_dir(FIXTURES / "worlds" / "emberback"))
    assert again.status_code == 409 and again.json()["code"] == "world_already_exists"
    assert again.json()["error"] == "target already exists: emberback"

    deleted = client.delete("/api/worlds/emberback")
    assert deleted.status_code == 200 and not (home / "worlds" / "emberback").exists()
    retry = post_zip(client, "/api/install/world", zip_dir(FIXTURES / "worlds" / "emberback"))
    assert retry.status_code == 201


def test_world_install_rejects_builtin_and_store_ids(client, home):
    builtin = dict(TINY_WORLD, **{"world.yaml": TINY_WORLD["world.yaml"].replace("tiny-isle", "yanhui-ferry")})
    response = post_zip(client, "/api/install/world", zip_files(builtin))
    assert response.status_code == 409 and response.json()["code"] == "world_already_exists"
    store = client.post("/api/worlds", data={"id": "tiny-isle", "name": "Store"}, content_type="application/json")
    assert store.status_code == 201
    response = post_zip(client, "/api/install/world", zip_files(TINY_WORLD))
    assert response.status_code == 409
    assert not (home / "worlds" / "tiny-isle").exists()


def test_world_with_error_diagnostics_is_400_and_leaves_nothing(client, home):
    broken = dict(TINY_WORLD)
    broken["data/world.data.yaml"] = "sources:\n  lore:\n    kind: yaml\n    path: data/missing.yaml\n    to: lorebook\n"
    broken["world.yaml"] += "worldData: data/world.data.yaml\n"
    response = post_zip(client, "/api/install/world", zip_files(broken))
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "package_invalid" and body["details"]["code"] == "source-missing"
    assert body["details"]["report"]["ok"] is False
    assert [p.name for p in (home / "worlds").iterdir()] == []
    fixed = post_zip(client, "/api/install/world", zip_files(TINY_WORLD))
    assert fixed.status_code == 201 and fixed.json()["id"] == "tiny-isle"


@pytest.mark.parametrize("path, text", [
    ("characters/characters.json", '[{"id": "gull", "name": "G\\u0000", "type": "npc"}]'),
    ("characters/characters.json", '[{"id": "gull", "name": "G\\ud800", "type": "npc"}]'),
    ("characters/characters.json", '[{"id": "gull", "name": "G", "type": "npc", "fields": {"x": NaN}}]'),
    ("characters/characters.json", '[{"id": "gull", "name": "G", "type": "npc", "fields": {"x": ' + "[" * 3000 + "]" * 3000 + "}}]"),
    ("data/lorebook.yaml", '- id: rock\n  keys: [rock]\n  content: "It\\0 is"\n'),
    ("data/lorebook.yaml", '- id: rock\n  keys: [rock]\n  content: "It\\ud800 is"\n'),
    ("data/lorebook.yaml", "- id: rock\n  keys: [rock]\n  content: x\n  order: .nan\n"),
    ("data/lorebook.yaml", "- id: rock\n  keys: [rock]\n  content: x\n  extra: " + "[" * 3000 + "]" * 3000 + "\n"),
    ("data/lorebook.yaml", "- id: rock\n  keys: !!set {a, b}\n  content: x\n"),
])
def test_world_with_content_no_session_could_store_is_400_and_leaves_nothing(client, home, path, text):
    files = {**TINY_WORLD, path: text}

    validated = post_zip(client, "/api/install/validate/world", zip_files(files))
    response = post_zip(client, "/api/install/world", zip_files(files))

    assert validated.status_code == 200 and validated.json()["ok"] is False
    assert any(i["code"] == "file-invalid" and i["file"] == path for i in validated.json()["issues"])
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "package_invalid" and response.json()["details"]["code"] == "file-invalid"
    assert [p.name for p in (home / "worlds").iterdir()] == []


@pytest.mark.parametrize("files,detail_code", [
    ({"../evil.txt": "x", **TINY_WORLD}, "zip-unsafe-path"),
    ({"notes.txt": "no manifest"}, "manifest-missing"),
    ({**TINY_WORLD, "world.yaml": TINY_WORLD["world.yaml"].replace("id: tiny-isle", "id: Tiny Isle")}, "identity-invalid"),
    ({k: v for k, v in TINY_WORLD.items() if k != "WORLD.md"}, "file-missing"),
])
def test_bad_world_archives(client, home, files, detail_code):
    response = post_zip(client, "/api/install/world", zip_files(files))
    assert response.status_code == 400 and response.json()["details"]["code"] == detail_code
    assert not (home / "worlds").exists() or [p.name for p in (home / "worlds").iterdir()] == []


def test_world_install_from_an_allowed_path(client, home, tmp_path):
    source = tmp_path / "packages" / "haruka"
    shutil.copytree(FIXTURES / "worlds" / "haruka-academy", source)
    response = client.post("/api/install/world", data={"source": {"kind": "path", "path": str(source)}}, content_type="application/json")
    assert response.status_code == 201 and response.json()["id"] == "haruka-academy"
    outside = client.post("/api/install/world", data={"source": {"kind": "path", "path": str(FIXTURES / "worlds" / "mistport")}},
                          content_type="application/json")
    assert outside.status_code == 403 and outside.json()["code"] == "path-outside-roots"
    linked = tmp_path / "packages" / "linked"
    shutil.copytree(FIXTURES / "worlds" / "mistport", linked)
    (linked / "data" / "link.yaml").symlink_to("/etc/hostname")
    response = client.post("/api/install/world", data={"source": {"kind": "path", "path": str(linked)}}, content_type="application/json")
    assert response.status_code == 400 and response.json()["details"]["code"] == "symlink-not-allowed"
    missing = client.post("/api/install/world", data={}, content_type="application/json")
    assert missing.status_code == 400 and missing.json()["code"] == "invalid_request"


PLUGIN_MD = ("---\nid: lantern-notes\nkind: plugin\ndescription: Keeps notes.\nruntime:\n  type: agent\n"
             "  schedule: {stage: post-turn, trigger: {type: auto}}\n---\nTake notes about lanterns.\n")


def test_plugin_zip_installs_with_restart_required(client, home):
    assert client.get("/api/plugins").status_code == 200  # the process registry exists before the install
    response = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD}))
    assert response.status_code == 201, response.json()
    assert response.json() == {"ok": True, "kind": "plugin", "id": "lantern-notes", "restartRequired": True, "hasServerCode": False}
    assert (home / "plugins" / "lantern-notes" / "PLUGIN.md").is_file()
    # every process's registry picks the install up at its next read (the generation marker), no restart
    assert client.get("/api/plugins/lantern-notes").json()["hostState"] == "loaded"
    listed = client.get("/api/install/plugins").json()["items"]
    assert [(i["id"], i["source"], i["integrity"], i["trustedSource"]) for i in listed] == [("lantern-notes", None, "no-receipt", False)]
    again = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD}))
    assert again.status_code == 409 and again.json()["error"] == "target already exists: lantern-notes"


def test_plugin_ids_from_folder_and_package_json(client, home):
    no_id = PLUGIN_MD.replace("id: lantern-notes\n", "")
    with_code = no_id.replace("kind: plugin\n", "kind: plugin\nentry: ./server/entry.py\n")
    foldered = post_zip(client, "/api/install/plugin", zip_files({
        "lamp-post/PLUGIN.md": with_code, "lamp-post/package.json": '{"name": "@acme/plugin-other-name"}',
        "lamp-post/server/entry.py": "def register(api):\n    pass\n"}))
    assert foldered.status_code == 201, foldered.json()
    assert foldered.json()["id"] == "lamp-post" and foldered.json()["hasServerCode"] is True  # folder beats package.json
    declared = post_zip(client, "/api/install/plugin", zip_files({"some-folder/PLUGIN.md": PLUGIN_MD.replace(
        "id: lantern-notes", "id: lantern-declared")}))
    assert declared.status_code == 201 and declared.json()["id"] == "lantern-declared"  # PLUGIN.md id beats the folder
    packaged = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": no_id, "package.json": '{"name": "@acme/plugin-lamp-log"}'}))
    assert packaged.status_code == 201 and packaged.json()["id"] == "lamp-log"
    reserved = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": no_id, "package.json": '{"name": "@covel/plugin-narrator"}'}))
    assert reserved.status_code == 409 and reserved.json()["code"] == "plugin_reserved_id"
    anonymous = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": no_id}))
    assert anonymous.status_code == 400 and anonymous.json()["details"]["code"] == "identity-invalid"


def test_plugin_with_manifest_errors_is_400(client, home):
    bad = PLUGIN_MD.replace("  type: agent\n", "  type: agent\n  agent:\n    tools:\n      local: [x]\n")
    response = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": bad}))
    assert response.status_code == 400 and response.json()["code"] == "package_invalid"
    assert response.json()["details"]["report"]["ok"] is False
    assert not (home / "plugins" / "lantern-notes").exists()
    slip = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD, "/abs/evil": "x"}))
    assert slip.status_code == 400 and slip.json()["details"]["code"] == "zip-unsafe-path"
    folded = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD, "a.md": "1", "A.md": "2"}))
    assert folded.status_code == 400 and folded.json()["details"]["code"] == "zip-unsafe-path"
    forged = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD, ".covel-install.json":
                                                                 '{"source": "acme/lantern", "files": {}}'}))
    assert forged.status_code == 400 and forged.json()["details"]["code"] == "receipt-not-allowed"
    assert not (home / "plugins" / "lantern-notes").exists()


@pytest.mark.parametrize("extra", ["x: " + "[" * 3000 + "]" * 3000, 'x: "a\\0b"', 'x: "\\ud800"', "x: .nan"])
def test_plugin_manifest_no_store_could_hold_is_400_and_leaves_nothing(client, home, extra):
    manifest = PLUGIN_MD.replace("description: Keeps notes.\n", f"description: Keeps notes.\n{extra}\n")

    response = post_zip(client, "/api/install/plugin", zip_files({"PLUGIN.md": manifest}))

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "package_invalid"
    assert not (home / "plugins").exists() or [p.name for p in (home / "plugins").iterdir()] == []


def test_hosted_tiers_require_the_operator_token(client, home, settings):
    settings.DEPLOYMENT_TIER = "commercial"
    settings.COVEL_OPERATOR_TOKEN = "operator-secret"
    world_zip = zip_files(TINY_WORLD)
    for path, data in (("/api/install/world", world_zip), ("/api/install/plugin", zip_files({"PLUGIN.md": PLUGIN_MD}))):
        denied = post_zip(client, path, data)
        assert denied.status_code == 401 and denied.json()["code"] == "operator_token_required"
    card = SimpleUploadedFile("w.json", (ST / "worldinfo" / "tavernkit_world_one.json").read_bytes())
    denied = client.post("/api/install/st-import", data={"file": [card]})
    assert denied.status_code == 401
    allowed = post_zip(client, "/api/install/world", world_zip, HTTP_AUTHORIZATION="Bearer operator-secret")
    assert allowed.status_code == 201
    assert not (home / "plugins").exists() or not (home / "plugins" / "lantern-notes").exists()


def test_install_api_can_be_disabled(client, home, settings):
    settings.COVEL_INSTALL_API_ENABLED = False
    response = post_zip(client, "/api/install/world", zip_files(TINY_WORLD))
    assert response.status_code == 403 and response.json()["code"] == "install_api_disabled"
