"""The per-process world package cache (sessions.world_packages, issue 18): a package is parsed and
hashed once while its files are unchanged, every read gets a private copy, and an edit made outside
the app — the same length, in place — is seen at the next read without a restart."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.conf import settings

from sessions import world_packages as wp

pytestmark = pytest.mark.django_db


def _write(root: Path, name: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "world.yaml").write_text(
        f'schemaVersion: "1.0"\nid: {root.name}\nname: {name}\nsummary: A probe.\ndefaultLocale: en-US\n',
        encoding="utf-8")
    (root / "WORLD.md").write_text("# Probe\n\nLore.\n", encoding="utf-8")


def _settled() -> None:
    """Past the racy window: files written just now are not cached (their stamp could repeat)."""
    time.sleep(wp.RACY_SECONDS + 0.05)


def _listed_name(api, world_id: str) -> str:
    response = api.get("/api/worlds")
    assert response.status_code == 200
    return {w["id"]: w for w in response.json()["items"]}[world_id]["name"]


def test_an_in_place_edit_of_the_same_length_is_listed_at_the_next_read(api):
    # given a user world that was listed once (and so cached)
    root = Path(settings.COVEL_HOME) / "worlds" / "cache-edit"
    _write(root, "Alpha")
    _settled()
    assert _listed_name(api, "cache-edit") == "Alpha"
    assert _listed_name(api, "cache-edit") == "Alpha"
    # when world.yaml is rewritten in place outside the app, same size
    _write(root, "Gamma")
    # then the next read lists the new name, and so do the detail and the digest
    assert _listed_name(api, "cache-edit") == "Gamma"
    assert api.get("/api/worlds/cache-edit").json()["name"] == "Gamma"


def test_a_removed_package_is_no_longer_listed_and_a_new_one_is(api):
    root = Path(settings.COVEL_HOME) / "worlds" / "cache-gone"
    _write(root, "Gone")
    _settled()
    assert _listed_name(api, "cache-gone") == "Gone"
    (root / "world.yaml").unlink()
    (root / "WORLD.md").unlink()
    root.rmdir()
    listed = {w["id"] for w in api.get("/api/worlds").json()["items"]}
    assert "cache-gone" not in listed
    _write(root, "Back")
    assert _listed_name(api, "cache-gone") == "Back"


def test_every_read_is_a_private_copy_and_a_warm_read_skips_the_parse(monkeypatch):
    root = Path(settings.COVEL_HOME) / "worlds" / "cache-copy"
    _write(root, "Copy")
    _settled()
    first = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id="cache-copy")
    assert first.ok and first.name == "Copy"
    first.name = "changed by a caller"
    first.issues.append("not an issue")
    first.locales[first.default_locale].characters.append({"id": "intruder"})

    reads: list[Path] = []
    real_read = wp._world_package_read
    monkeypatch.setattr(wp, "_world_package_read", lambda r, **kw: reads.append(r) or real_read(r, **kw))
    again = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id="cache-copy")
    assert again.name == "Copy" and again.issues == [] and again.digest == first.digest
    assert {"id": "intruder"} not in again.locales[again.default_locale].characters
    assert reads == []  # served from the cache
    wp.world_packages_forget(root)  # what an install, update or delete does
    wp.world_package_load(root, source=wp.SOURCE_USER, expected_id="cache-copy")
    assert reads == [root.resolve()]


def test_a_world_installed_and_deleted_through_the_api_is_listed_at_once(api):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("world.yaml", 'schemaVersion: "1.0"\nid: cache-install\nname: Installed\n'
                                       "summary: A probe.\ndefaultLocale: en-US\n")
        archive.writestr("WORLD.md", "# Installed\n\nLore.\n")
    from django.core.files.uploadedfile import SimpleUploadedFile

    listed = {w["id"] for w in api.get("/api/worlds").json()["items"]}
    assert "cache-install" not in listed
    response = api.post("/api/install/world", {"file": SimpleUploadedFile("w.zip", buffer.getvalue(),
                                                                          content_type="application/zip")})
    assert response.status_code == 201, response.json()
    assert _listed_name(api, "cache-install") == "Installed"
    assert api.delete("/api/worlds/cache-install").status_code == 200
    assert "cache-install" not in {w["id"] for w in api.get("/api/worlds").json()["items"]}


def test_a_listing_never_changes_the_cached_packages(api):
    # given a user world reusing a builtin id (an id-conflict error on the listed copy)
    root = Path(settings.COVEL_HOME) / "worlds" / "yanhui-ferry"
    _write(root, "Impostor")
    _settled()
    try:
        for _ in range(2):
            listed = [w for w in api.get("/api/worlds").json()["items"] if w["id"] == "yanhui-ferry"]
            assert len(listed) == 1 and listed[0]["metadata"]["source"] == "file"
        # then the cached user package carries no issue from the listing
        cached = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id="yanhui-ferry", shared=True)
        assert not [i for i in cached.issues if i.code == "id-conflict"]
        # and a summary changed by its caller does not change the next listing
        from sessions.world_selectors import world_list

        first = {w["id"]: w for w in world_list()}
        first["hollow-reach-light"]["metadata"]["supportedLocales"].append("xx-XX")
        first["hollow-reach-light"]["name"] = "changed"
        again = {w["id"]: w for w in world_list()}["hollow-reach-light"]
        assert again["name"] != "changed" and "xx-XX" not in again["metadata"]["supportedLocales"]
    finally:
        import shutil

        shutil.rmtree(root)
