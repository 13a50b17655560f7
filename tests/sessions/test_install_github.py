"""World installs from GitHub, multi-package previews, batches with rollback, collections and the
installed package listings, over HTTP against a fake GitHub on loopback (spec 004 插件与世界安装)."""
from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from plugins_app.registry import registry_reset
from tests.github_fake import files_of
from tests.shared_paths import FIXTURES_DIR

pytestmark = pytest.mark.django_db

UPSTREAM = FIXTURES_DIR / "upstream"
REPO = "acme/ember-pack"
LAMP_LOG = ("---\nid: lamp-log\nkind: plugin\nversion: 0.1.0\ndescription: Logs lamps.\nruntime:\n  type: agent\n"
            "  schedule: {stage: post-turn, trigger: {type: auto}}\n---\nNote every lamp that is lit.\n")
COLLECTION = ("schemaVersion: 1\nid: ember-set\nname: {en-US: Ember set}\nversion: 1.0.0\n"
              "plugins:\n  - path: plugins/lamp-log\nworlds:\n  - path: worlds/tiny-isle\n")


@pytest.fixture
def home(tmp_path, settings):
    settings.COVEL_HOME = tmp_path / "home"
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


TINY = {"world.yaml": "schemaVersion: '1.0'\nid: tiny-isle\nname: Tiny Isle\nversion: 1.0.0\nsummary: A rock in the sea.\n"
                      "defaultLocale: en-US\n", "WORLD.md": "# Tiny Isle\n\nA rock.\n"}


def pack(*, world: str = "tiny-isle", **changes):
    if world == "emberback":
        files = files_of(UPSTREAM / "worlds" / "emberback", "worlds/emberback/")
    else:
        files = {f"worlds/tiny-isle/{k}": v for k, v in TINY.items()}
    files["plugins/lamp-log/PLUGIN.md"] = LAMP_LOG
    files.update(changes)
    return files


def post(client, path, body):
    return client.post(path, data=body, content_type="application/json")


def zipped(files):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return SimpleUploadedFile("collection.zip", buffer.getvalue(), content_type="application/zip")


def test_world_preview_install_update_and_listing(client, home, github):
    # given a world on the default branch
    first = github.commit(REPO, pack())
    preview = post(client, "/api/install/world/github/preview", {"url": f"https://github.com/{REPO}/tree/main/worlds/tiny-isle"})
    assert preview.status_code == 200, preview.json()
    body = preview.json()
    assert (body["kind"], body["id"], body["version"], body["source"]["commit"]) == ("world", "tiny-isle", "1.0.0", first)
    assert body["trustedSource"] is False and body["alreadyInstalled"] is False
    assert client.get("/api/worlds/tiny-isle").status_code == 404

    # when installed: listed by GET /api/worlds at once, with its source in the install listing
    installed = post(client, "/api/install/world/github", {"token": body["token"], "acceptRisk": True})
    assert installed.status_code == 201, installed.json()
    assert installed.json() == {"ok": True, "kind": "world", "id": "tiny-isle", "restartRequired": False}
    assert client.get("/api/worlds/tiny-isle").status_code == 200
    listed = client.get("/api/install/worlds").json()["items"]
    assert [(i["id"], i["source"], i["integrity"], i["commit"], i["status"]) for i in listed] == [
        ("tiny-isle", REPO, "verified", first, "ok")]

    # when the world changes upstream, the update applies at once (no restart)
    text = TINY["WORLD.md"] + "\nA new coda.\n"
    second = github.commit(REPO, pack(**{"worlds/tiny-isle/WORLD.md": text}))
    update = post(client, "/api/install/world/github/update/preview", {"id": "tiny-isle"})
    assert update.status_code == 200 and update.json()["status"] == "available", update.json()
    assert update.json()["preview"]["changes"] == {"added": [], "modified": ["WORLD.md"], "removed": []}
    applied = post(client, "/api/install/world/github/update", {"token": update.json()["preview"]["token"], "acceptRisk": True})
    assert applied.status_code == 201 and applied.json()["restartRequired"] is False
    assert (home / "worlds" / "tiny-isle" / "WORLD.md").read_text(encoding="utf-8").endswith("A new coda.\n")
    after = client.get("/api/install/worlds").json()["items"][0]
    assert after["commit"] == second and after["integrity"] == "verified"
    assert post(client, "/api/install/world/github/update/preview", {"id": "tiny-isle"}).json() == {"status": "current"}
    assert client.delete("/api/install/world/github/update/tiny-isle").status_code == 404

    # a local edit shows as modified, and blocks the next update
    (home / "worlds" / "tiny-isle" / "WORLD.md").write_text("mine\n", encoding="utf-8")
    assert client.get("/api/install/worlds").json()["items"][0]["integrity"] == "modified"


def test_a_broken_world_package_is_listed_with_its_errors(client, home):
    broken = home / "worlds" / "cracked"
    broken.mkdir(parents=True)
    (broken / "world.yaml").write_text("id: cracked\nname: [not, text\n", encoding="utf-8")
    items = client.get("/api/install/worlds").json()["items"]
    assert [(i["id"], i["status"], i["source"], i["integrity"]) for i in items] == [("cracked", "error", None, "no-receipt")]
    assert items[0]["diagnostics"]


def test_batch_installs_plugins_then_worlds_and_rolls_back_when_the_second_fails(client, home, github):
    sha = github.commit(REPO, pack())
    listed = post(client, "/api/install/github/preview", {"url": f"https://github.com/{REPO}"})
    assert listed.status_code == 200, listed.json()
    items = {i["id"]: i for i in listed.json()["items"]}
    assert set(items) == {"lamp-log", "tiny-isle"} and listed.json()["collection"] is None
    tokens = [items["tiny-isle"]["token"], items["lamp-log"]["token"]]

    # when the world's content moves between the preview and the batch
    repo = github.repos[REPO]
    repo.commits[sha] = {**repo.commits[sha], "worlds/tiny-isle/EXTRA.md": b"late\n"}
    failed = post(client, "/api/install/github/batch", {"tokens": tokens, "acceptRisk": True})

    # then the plugin (installed first) is rolled back and nothing stays
    assert failed.status_code == 409 and failed.json()["code"] == "preview_changed", failed.json()
    details = failed.json()["details"]
    assert details["rolledBack"] == [{"kind": "plugin", "id": "lamp-log"}] and details["retained"] == []
    assert details["failed"] == {"kind": "world", "id": "tiny-isle"}
    assert not (home / "plugins" / "lamp-log").exists() and not (home / "worlds" / "tiny-isle").exists()
    assert client.get("/api/plugins/lamp-log").status_code == 404

    # when the content is back, the whole batch installs
    repo.commits[sha].pop("worlds/tiny-isle/EXTRA.md")
    done = post(client, "/api/install/github/batch", {"tokens": tokens, "acceptRisk": True})
    assert done.status_code == 201, done.json()
    assert done.json() == {"ok": True, "installed": [{"kind": "plugin", "id": "lamp-log"}, {"kind": "world", "id": "tiny-isle"}],
                           "restartRequired": True}
    assert client.get("/api/plugins/lamp-log").json()["hostState"] == "loaded"

    # a batch whose target exists writes nothing
    again = post(client, "/api/install/github/batch", {"tokens": tokens, "acceptRisk": True})
    assert again.status_code == 409 and again.json()["error"] == "target already exists: lamp-log"
    assert post(client, "/api/install/github/batch", {"tokens": [], "acceptRisk": True}).status_code == 400
    assert post(client, "/api/install/github/batch", {"tokens": tokens}).json()["code"] == "risk_not_accepted"


def test_a_collection_lists_exactly_its_members_including_a_pinned_one(client, home, github):
    other = github.commit("someone/extra", {"plugins/weather/PLUGIN.md": LAMP_LOG.replace("lamp-log", "weather")})
    files = pack(**{"covel-collection.yaml": COLLECTION.replace(
        "plugins:\n  - path: plugins/lamp-log\n",
        f"plugins:\n  - path: plugins/lamp-log\n  - repository: someone/extra\n    commit: {other}\n    path: plugins/weather\n"),
        "plugins/unlisted/PLUGIN.md": LAMP_LOG.replace("lamp-log", "unlisted")})
    github.commit(REPO, files)
    listed = post(client, "/api/install/github/preview", {"url": f"https://github.com/{REPO}"})
    assert listed.status_code == 200, listed.json()
    assert listed.json()["collection"] == {"id": "ember-set", "name": {"en-US": "Ember set"}, "version": "1.0.0"}
    items = {i["id"]: i for i in listed.json()["items"]}
    assert set(items) == {"lamp-log", "weather", "tiny-isle"}  # "unlisted" is not a member
    assert items["weather"]["source"] == {**items["weather"]["source"], "repository": "someone/extra", "commit": other,
                                          "tracking": {"kind": "pinned", "ref": other}}
    done = post(client, "/api/install/github/batch", {"tokens": [i["token"] for i in items.values()], "acceptRisk": True})
    assert done.status_code == 201 and len(done.json()["installed"]) == 3


def test_collection_zip_installs_as_one_whole(client, home):
    files = {"covel-collection.yaml": COLLECTION, "plugins/lamp-log/PLUGIN.md": LAMP_LOG,
             **{f"worlds/tiny-isle/{k}": v for k, v in TINY.items()}}
    broken = {**files, "worlds/tiny-isle/world.yaml": "id: tiny-isle\nname: [broken\n"}
    refused = client.post("/api/install/collection", data={"file": zipped(broken)})
    assert refused.status_code == 400, refused.json()
    assert not (home / "plugins" / "lamp-log").exists() and not (home / "worlds" / "tiny-isle").exists()

    response = client.post("/api/install/collection", data={"file": zipped(files)})
    assert response.status_code == 201, response.json()
    assert response.json() == {"ok": True, "installed": [{"kind": "plugin", "id": "lamp-log"}, {"kind": "world", "id": "tiny-isle"}],
                               "restartRequired": True}
    assert client.get("/api/worlds/tiny-isle").status_code == 200
    assert [i["id"] for i in client.get("/api/install/plugins").json()["items"]] == ["lamp-log"]
    assert client.get("/api/install/plugins").json()["items"][0]["source"] is None  # a zip records no source

    slip = client.post("/api/install/collection", data={"file": zipped({**files, "../evil": "x"})})
    assert slip.status_code == 400 and slip.json()["details"]["code"] == "zip-unsafe-path"
    outside = {"covel-collection.yaml": COLLECTION + "  - repository: a/b\n    commit: " + "0" * 40 + "\n"}
    assert client.post("/api/install/collection", data={"file": zipped(outside)}).json()["code"] == "collection_invalid"
