"""Plugin installs, updates and uninstalls from GitHub over HTTP, against a fake GitHub on loopback
(spec 004 插件与世界安装, 全局插件 DELETE /api/plugins/:id, 安装后的重启和刷新)."""
from __future__ import annotations

import io
import os
import stat
import time
import zipfile

import pytest

from plugins_app.registry import registry_reset
from tests.sessions.lantern_support import lantern_files

pytestmark = pytest.mark.django_db

REPO = "acme/lantern-pack"


@pytest.fixture
def home(tmp_path, settings):
    settings.COVEL_HOME = tmp_path / "home"
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


LAMP_LOG = ("---\nkind: plugin\nversion: 0.1.0\ndescription: Logs lamps.\nruntime:\n  type: agent\n"
            "  schedule: {stage: post-turn, trigger: {type: auto}}\n---\nNote every lamp that is lit.\n")


def pack_files(**changes: str) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {f"plugins/lantern/{k}": v for k, v in lantern_files("lantern").items()}
    files["examples/lamp-log/PLUGIN.md"] = LAMP_LOG
    files["examples/lamp-log/package.json"] = '{"name": "@acme/plugin-lamp-log", "version": "0.1.0"}'
    files["README.md"] = "# A pack\n"
    files.update(changes)
    return files


def post(client, path, body, **extra):
    return client.post(path, data=body, content_type="application/json", **extra)


def test_preview_install_update_and_uninstall_a_plugin(client, home, github, settings):
    # given a repository with two plugins, acme a trusted source
    settings.COVEL_TRUSTED_SOURCES = "acme"
    first = github.commit(REPO, pack_files())
    assert client.get("/api/plugins").status_code == 200  # this process has built its registry

    # when the plugin folder is previewed
    preview = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/lantern"})

    # then it is pinned to the commit, with its digest, capabilities and trust, and nothing is written
    assert preview.status_code == 200, preview.json()
    body = preview.json()
    assert body["id"] == "lantern" and body["kind"] == "plugin" and body["version"] == "1.0.0"
    assert body["source"]["repository"] == REPO and body["source"]["commit"] == first
    assert body["source"]["path"] == "plugins/lantern" and body["source"]["tracking"] == {"kind": "branch", "ref": "main"}
    assert body["source"]["digest"].startswith("sha256:") and body["trustedSource"] is True
    assert body["hasServerCode"] is True and body["capabilities"]["code"]["entry"] == "./server/entry.py"
    assert set(body["capabilities"]["actions"]) >= {"ping", "stash"}
    assert not (home / "plugins" / "lantern").exists()

    # when it is installed without accepting the risk, then with
    refused = post(client, "/api/install/plugin/github", {"token": body["token"]})
    assert refused.status_code == 400 and refused.json()["code"] == "risk_not_accepted"
    installed = post(client, "/api/install/plugin/github", {"token": body["token"], "acceptRisk": True})

    # then it is on disk with a receipt, and this process lists it at once — auto-approved by its source
    assert installed.status_code == 201, installed.json()
    assert installed.json() == {"ok": True, "kind": "plugin", "id": "lantern", "restartRequired": True}
    assert (home / "plugins" / "lantern" / ".covel-install.json").is_file()
    detail = client.get("/api/plugins/lantern").json()
    assert detail["trust"] == {"source": REPO, "trustedSource": True, "integrity": "verified", "autoApproved": True}
    listed = client.get("/api/install/plugins").json()["items"]
    assert [(i["id"], i["source"], i["integrity"], i["trustedSource"], i["commit"]) for i in listed] == [
        ("lantern", REPO, "verified", True, first)]
    assert listed[0]["pendingUpdate"] is None and listed[0]["hostState"] in ("installed", "loaded")
    again = post(client, "/api/install/plugin/github", {"token": body["token"], "acceptRisk": True})
    assert again.status_code == 409 and again.json()["error"] == "target already exists: lantern"

    # when nothing changed in the plugin's folder (only elsewhere in the repository)
    github.commit(REPO, pack_files(**{"README.md": "# A pack, edited\n"}))
    current = post(client, "/api/install/plugin/github/update/preview", {"id": "lantern"})
    assert current.status_code == 200 and current.json() == {"status": "current"}

    # when the plugin changes upstream
    changed = lantern_files("lantern")["PLUGIN.md"].replace("version: 1.0.0", "version: 1.1.0")
    second = github.commit(REPO, pack_files(**{"plugins/lantern/PLUGIN.md": changed, "plugins/lantern/NOTES.md": "new\n"}))
    update = post(client, "/api/install/plugin/github/update/preview", {"id": "lantern"})
    assert update.status_code == 200 and update.json()["status"] == "available"
    up = update.json()["preview"]
    assert up["version"] == "1.1.0" and up["source"]["commit"] == second and up["previous"]["version"] == "1.0.0"
    assert up["changes"] == {"added": ["NOTES.md"], "modified": ["PLUGIN.md"], "removed": []}
    assert up["capabilities"]["code"]["hasServerCode"] is True and up["trustedSource"] is True
    install_token_refused = post(client, "/api/install/plugin/github/update", {"token": body["token"], "acceptRisk": True})
    assert install_token_refused.status_code == 400 and install_token_refused.json()["code"] == "invalid_preview_token"

    # then applying stages it for the next start; a second apply is refused; cancel removes it
    staged = post(client, "/api/install/plugin/github/update", {"token": up["token"], "acceptRisk": True})
    assert staged.status_code == 201 and staged.json() == {"ok": True, "kind": "plugin", "id": "lantern", "restartRequired": True}
    pending = client.get("/api/install/plugins").json()["items"][0]
    assert pending["version"] == "1.0.0" and pending["pendingUpdate"] == {"version": "1.1.0", "source": REPO, "error": None}
    twice = post(client, "/api/install/plugin/github/update", {"token": up["token"], "acceptRisk": True})
    assert twice.status_code == 409 and twice.json()["code"] == "update_pending"
    cancelled = client.delete("/api/install/plugin/github/update/lantern")
    assert cancelled.status_code == 200 and cancelled.json() == {"ok": True}
    assert client.get("/api/install/plugins").json()["items"][0]["pendingUpdate"] is None
    assert client.delete("/api/install/plugin/github/update/lantern").status_code == 404

    # when staged again and the server starts
    assert post(client, "/api/install/plugin/github/update", {"token": up["token"], "acceptRisk": True}).status_code == 201
    registry_reset()  # what a restart does
    promoted = client.get("/api/install/plugins").json()["items"][0]
    assert promoted["version"] == "1.1.0" and promoted["commit"] == second and promoted["integrity"] == "verified"
    assert promoted["pendingUpdate"] is None and (home / "plugins" / "lantern" / "NOTES.md").is_file()

    # when it is uninstalled
    removed = client.delete("/api/plugins/lantern")

    # then its files are gone and this process's registry no longer has it, without a restart
    assert removed.status_code == 200 and removed.json() == {"ok": True, "id": "lantern", "restartRequired": True}
    assert not (home / "plugins" / "lantern").exists()
    assert [p.name for p in (home / "plugins").iterdir() if not p.name.startswith(".")] == []
    assert client.get("/api/plugins/lantern").status_code == 404
    assert client.get("/api/install/plugins").json()["items"] == []
    assert client.delete("/api/plugins/lantern").status_code == 404


def test_the_listing_shows_packages_that_do_not_load(client, home):
    broken = home / "plugins" / "bent-lamp"
    broken.mkdir(parents=True)
    (broken / "PLUGIN.md").write_text("---\nid: other-id\nkind: plugin\n---\nx\n", encoding="utf-8")
    (home / "plugins" / "no-manifest").mkdir()
    items = {i["id"]: i for i in client.get("/api/install/plugins").json()["items"]}
    assert items["bent-lamp"]["hostState"] == "error" and items["bent-lamp"]["error"]
    assert items["no-manifest"]["hostState"] == "not-loaded" and items["no-manifest"]["error"] == "PLUGIN.md is missing"
    assert client.delete("/api/plugins/bent-lamp").status_code == 200 and not broken.exists()


def test_uninstall_refuses_builtin_and_malformed_ids(client, home):
    builtin = client.delete("/api/plugins/narrator")
    assert builtin.status_code == 409 and builtin.json()["code"] == "plugin_builtin"
    assert client.get("/api/plugins/narrator").status_code == 200
    bad = client.delete("/api/plugins/Not_An_Id")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_plugin_id"
    assert client.delete("/api/plugins/nothing-here").json()["code"] == "plugin_not_installed"


def test_a_repository_link_tracks_the_default_branch_and_a_tag_stays_pinned(client, home, github):
    sha = github.commit(REPO, pack_files(), tag="v1")
    repo_link = post(client, "/api/install/github/preview", {"url": f"https://github.com/{REPO}"})
    assert repo_link.status_code == 200, repo_link.json()
    items = {i["id"]: i for i in repo_link.json()["items"]}
    assert set(items) == {"lantern", "lamp-log"} and repo_link.json()["collection"] is None
    assert repo_link.json()["problems"] == []
    assert items["lamp-log"]["source"]["tracking"] == {"kind": "default-branch"}
    assert items["lamp-log"]["source"]["path"] == "examples/lamp-log" and items["lamp-log"]["hasServerCode"] is False
    tag = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/v1/examples/lamp-log"})
    assert tag.json()["source"]["tracking"] == {"kind": "pinned", "ref": "v1"} and tag.json()["source"]["commit"] == sha
    assert post(client, "/api/install/plugin/github", {"token": tag.json()["token"], "acceptRisk": True}).status_code == 201
    assert client.get("/api/plugins/lamp-log").json()["hostState"] == "loaded"  # no restart needed to list it
    assert post(client, "/api/install/plugin/github/update/preview", {"id": "lamp-log"}).json() == {"status": "pinned"}
    other = post(client, "/api/install/plugin/github/update/preview",
                 {"id": "lamp-log", "url": "https://github.com/acme/other/tree/main/examples/lamp-log"})
    assert other.status_code == 400 and other.json()["code"] == "update_source_mismatch"


def test_content_that_moved_since_the_preview_is_refused(client, home, github):
    github.commit(REPO, pack_files())
    preview = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/lantern"}).json()
    # the same commit sha answers with other bytes (a force-push of the archive)
    repo = github.repos[REPO]
    sha = preview["source"]["commit"]
    repo.commits[sha] = {**repo.commits[sha], "plugins/lantern/EXTRA.md": b"surprise\n"}
    moved = post(client, "/api/install/plugin/github", {"token": preview["token"], "acceptRisk": True})
    assert moved.status_code == 409 and moved.json()["code"] == "preview_changed"
    assert not (home / "plugins" / "lantern").exists()
    forged = post(client, "/api/install/plugin/github", {"token": preview["token"][:-3] + "abc", "acceptRisk": True})
    assert forged.status_code == 400 and forged.json()["code"] == "invalid_preview_token"


def test_reserved_ids_and_bad_links(client, home, github):
    github.commit(REPO, {"plugins/narrator/PLUGIN.md": "---\nkind: plugin\ndescription: x\n---\nx\n"})
    reserved = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/narrator"})
    assert reserved.status_code == 409 and reserved.json()["code"] == "plugin_reserved_id"
    for url in ("https://gitlab.com/acme/x", "http://github.com/acme/x", "https://github.com/acme", 42,
                "https://github.com/acme/x/blob/main/a", "https://github.com/acme/x/tree/main/../etc",
                "https://github.com:bad/acme/x", "https://user@github.com/acme/x"):
        response = post(client, "/api/install/plugin/github/preview", {"url": url})
        assert response.status_code == 400 and response.json()["code"] == "invalid_github_url", url
    missing = post(client, "/api/install/plugin/github/preview", {"url": "https://github.com/acme/nothing"})
    assert missing.status_code == 404 and missing.json()["code"] == "github_not_found"
    no_folder = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/gone"})
    assert no_folder.status_code == 404 and no_folder.json()["code"] == "github_not_found"


@pytest.mark.parametrize(("fault", "status", "code"), [
    ("rate-limit", 429, "github_rate_limited"), ("429", 429, "github_rate_limited"), ("500", 502, "github_upstream_error"),
    ("stall", 502, "github_unreachable")])
def test_github_failures_end_in_the_spec_error_never_a_hang(client, home, github, settings, fault, status, code):
    settings.COVEL_GITHUB_TIMEOUT_SECONDS = 1
    github.commit(REPO, pack_files())
    for target in ("/api/repos/", "/archive/"):
        github.clear_faults()
        github.fault(target, fault)
        started = time.monotonic()
        response = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/lantern"})
        assert response.status_code == status and response.json()["code"] == code, (target, response.json())
        assert time.monotonic() - started < 5  # the 1 s timeout, not the stall's 30 s
    assert not (home / "plugins").exists() or [p.name for p in (home / "plugins").iterdir() if not p.name.startswith(".")] == []


def test_an_unreachable_github_is_502(client, home, settings):
    settings.COVEL_GITHUB_API_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    settings.COVEL_GITHUB_TIMEOUT_SECONDS = 1
    response = post(client, "/api/install/plugin/github/preview", {"url": "https://github.com/acme/x"})
    assert response.status_code == 502 and response.json()["code"] == "github_unreachable"


def test_operations_need_the_install_permission(client, home, github, settings):
    settings.DEPLOYMENT_TIER = "commercial"
    settings.COVEL_OPERATOR_TOKEN = "operator-secret"
    for method, path in (("post", "/api/install/plugin/github/preview"), ("get", "/api/install/plugins"),
                         ("delete", "/api/plugins/x"), ("post", "/api/install/github/batch")):
        response = getattr(client, method)(path, data={"url": "https://github.com/acme/x"}, content_type="application/json")
        assert response.status_code == 401, (path, response.json())
    assert github.requests == []


def _hostile(sha: str, members: list[tuple[zipfile.ZipInfo | str, bytes | int]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            if isinstance(data, int):  # that many zero bytes, written in chunks (memory stays flat)
                with archive.open(name, "w", force_zip64=True) as sink:
                    for _ in range(data // (1 << 20)):
                        sink.write(bytes(1 << 20))
            else:
                archive.writestr(name, data)
    return buffer.getvalue()


def _symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(("members", "status", "detail"), [
    ([("lantern-pack-SHA/plugins/lantern/PLUGIN.md", b"x"), ("lantern-pack-SHA/../../evil", b"x")], 400, "zip-unsafe-path"),
    ([("lantern-pack-SHA/plugins/lantern/PLUGIN.md", b"x"), (_symlink("lantern-pack-SHA/plugins/lantern/link"), b"/etc/passwd")],
     400, "zip-unsafe-path"),
    ([("lantern-pack-SHA/plugins/lantern/PLUGIN.md", b"x"), ("lantern-pack-SHA/plugins/lantern/a.md", b"1"),
      ("lantern-pack-SHA/plugins/lantern/A.md", b"2")], 400, "zip-unsafe-path"),
    ([("lantern-pack-SHA/plugins/lantern/PLUGIN.md", b"x"), ("lantern-pack-SHA/bomb.bin", 210 * 1024 * 1024)], 413, None),
])
def test_hostile_github_archives_are_refused_and_leave_nothing(client, home, github, members, status, detail):
    sha = github.commit(REPO, pack_files())
    github.repos[REPO].raw_archives[sha] = _hostile(sha, [(m.replace("SHA", sha) if isinstance(m, str) else m, d)
                                                          for m, d in members])
    response = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/plugins/lantern"})
    assert response.status_code == status, response.json()
    if detail:
        assert response.json()["details"]["code"] == detail
    leftovers = [p for p in (home / "plugins").rglob("*")] if (home / "plugins").exists() else []
    assert [p for p in leftovers if ".locks" not in p.parts] == []
    assert not (home.parent / "evil").exists()


def test_operations_on_one_package_exclude_each_other(client, home, github):
    github.commit(REPO, pack_files())
    preview = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/examples/lamp-log"}).json()
    assert post(client, "/api/install/plugin/github", {"token": preview["token"], "acceptRisk": True}).status_code == 201
    # another process is in the middle of an operation on lamp-log (its lock folder exists)
    lock = home / "plugins" / ".locks" / "lamp-log"
    lock.mkdir(parents=True)
    busy = client.delete("/api/plugins/lamp-log")
    assert busy.status_code == 409 and busy.json()["code"] == "package_busy"
    assert (home / "plugins" / "lamp-log" / "PLUGIN.md").is_file()
    # a holder that crashed 11 minutes ago does not block for ever
    old = time.time() - 660
    os.utime(lock, (old, old))
    assert client.delete("/api/plugins/lamp-log").status_code == 200
    assert not lock.exists()


def test_local_changes_block_an_update_and_a_start_finishes_what_an_uninstall_left(client, home, github):
    github.commit(REPO, pack_files())
    preview = post(client, "/api/install/plugin/github/preview", {"url": f"https://github.com/{REPO}/tree/main/examples/lamp-log"}).json()
    assert post(client, "/api/install/plugin/github", {"token": preview["token"], "acceptRisk": True}).status_code == 201
    github.commit(REPO, pack_files(**{"examples/lamp-log/NOTES.md": "new\n"}))
    update = post(client, "/api/install/plugin/github/update/preview", {"id": "lamp-log"}).json()
    assert update["status"] == "available"
    # the operator edited the installed package by hand
    (home / "plugins" / "lamp-log" / "PLUGIN.md").write_text(LAMP_LOG + "\nmine\n", encoding="utf-8")
    assert client.get("/api/install/plugins").json()["items"][0]["integrity"] == "modified"
    blocked = post(client, "/api/install/plugin/github/update", {"token": update["preview"]["token"], "acceptRisk": True})
    assert blocked.status_code == 409 and blocked.json()["code"] == "local_changes"
    assert not (home / "plugins" / ".covel-updates" / "lamp-log").exists()
    # a package an uninstall moved out but could not remove is removed at the next start
    leftover = home / "plugins" / ".trash-old-thing-0123456789ab"
    (leftover / "server").mkdir(parents=True)
    registry_reset()
    assert client.get("/api/plugins/lamp-log").status_code == 200
    assert not leftover.exists()
