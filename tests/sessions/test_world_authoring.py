"""World packages as authors write them (issue 21): the real upstream packages copied unchanged
into COVEL_HOME/worlds, locale-map annotations in dimension schemas, packages that fail to load
(listed with diagnostics, logged), world data no installed plugin receives, per-locale aliases."""
from __future__ import annotations

import logging
import shutil

import pytest
import yaml

from plugins_app.registry import registry_reset
from tests.shared_paths import FIXTURES_DIR

FIXTURE_WORLDS = FIXTURES_DIR / "upstream" / "worlds"
UPSTREAM = ("emberback", "haruka-academy", "mistport")

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(tmp_path, settings):
    """COVEL_HOME with the three upstream worlds copied unchanged; no builtin worlds; the real
    builtin plugins."""
    settings.COVEL_HOME = tmp_path / "home"
    settings.COVEL_BUILTIN_WORLDS_DIR = tmp_path / "no-builtin-worlds"
    settings.COVEL_BUILTIN_WORLDS_DIR.mkdir()
    for world_id in UPSTREAM:
        shutil.copytree(FIXTURE_WORLDS / world_id, settings.COVEL_HOME / "worlds" / world_id)
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


def test_upstream_packages_copied_unchanged_all_load(client, home):
    items = {w["id"]: w for w in client.get("/api/worlds").json()["items"]}
    assert set(items) == set(UPSTREAM)
    for world_id in UPSTREAM:
        assert "status" not in items[world_id]
        assert items[world_id]["updateAvailable"] is False
        record = client.get(f"/api/worlds/{world_id}")
        assert record.status_code == 200, record.content
        assert record.json()["metadata"]["dimensions"], world_id


def test_locale_map_titles_and_descriptions_in_dimension_schemas_load(client, home):
    path = home / "worlds" / "mistport" / "data" / "dimensions.yaml"
    dims = {}
    dims["notes"] = {"name": {"zh-CN": "记录", "en-US": "Notes"}, "description": {"zh-CN": "笔记", "en-US": "Notes kept"},
                     "schema": {"type": "object", "title": {"zh-CN": "记录", "en-US": "Notes"},
                                "description": {"zh-CN": "玩家的笔记", "en-US": "The player's notes"},
                                "properties": {"text": {"type": "string", "title": {"zh-CN": "正文", "en-US": "Text"}}}},
                     "initialValue": {"text": ""}}
    path.write_text(path.read_text(encoding="utf-8") + "\n" + yaml.safe_dump(dims, allow_unicode=True), encoding="utf-8")
    response = client.get("/api/worlds/mistport")
    assert response.status_code == 200, response.content
    assert response.json()["metadata"]["dimensions"]["notes"]["schema"]["title"]["en-US"] == "Notes"
    report = client.post("/api/install/validate/world", {"path": str(home / "worlds" / "mistport")},
                         content_type="application/json")
    if report.status_code == 200:  # the app validator agrees (same loader)
        assert not [i for i in report.json().get("issues", []) if i.get("severity") == "error"], report.json()


def test_a_package_that_fails_to_load_is_listed_with_diagnostics_and_logged(client, home, caplog):
    path = home / "worlds" / "emberback" / "data" / "dimensions.yaml"
    first = "brokenGauge"
    path.write_text(path.read_text(encoding="utf-8") + f"\n{first}:\n  name: Gauge\n  schema:\n    type: integer\n"
                    "    minimum: zero\n  initialValue: 1\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="covel.worlds"):
        items = {w["id"]: w for w in client.get("/api/worlds").json()["items"]}
    broken = items["emberback"]
    assert broken["status"] == "error"
    assert broken["diagnostics"] and all(d["severity"] == "error" for d in broken["diagnostics"])
    assert any(d["field"].startswith(f"dimensions.{first}") or first in (d.get("field") or "") for d in broken["diagnostics"])
    assert str(home) not in str(broken)  # package-relative paths only
    assert any("emberback" in r.getMessage() and "does not load" in r.getMessage() for r in caplog.records)
    detail = client.get("/api/worlds/emberback")
    assert detail.status_code == 422 and detail.json()["code"] == "world_package_invalid"
    assert detail.json()["details"]["diagnostics"] == broken["diagnostics"]
    assert "status" not in items["mistport"]


def test_world_data_no_installed_plugin_accepts_is_reported(client, home):
    # emberback's quests, items, story events ... plus one contract no plugin can ever accept
    descriptor = home / "worlds" / "emberback" / "data" / "world.data.yaml"
    descriptor.write_text(descriptor.read_text(encoding="utf-8") + "  folklore:\n    kind: yaml\n    path: data/items.yaml\n"
                          "    to: contract:folklore.tales@1\n    key: id\n", encoding="utf-8")
    plan = client.get("/api/worlds/emberback/plugin-plan").json()
    unmet = {u["sourceId"]: u for u in plan["unmetRequirements"]}
    assert unmet["folklore"]["contract"] == "folklore.tales@1", plan
    for item in unmet.values():
        assert item["code"] == "receiver-missing" and item["contract"]
    assert {d["sourceId"] for d in plan["diagnostics"]} >= set(unmet)
    created = client.post("/api/sessions", {"worldId": "emberback", "locale": "en-US"}, content_type="application/json")
    assert created.status_code == 201, created.content
    notices = created.json().get("worldDataNotices") or []
    assert {n["sourceId"] for n in notices if n.get("code") == "receiver-missing"} >= set(unmet)


def test_characters_take_the_session_locales_aliases(client, home):
    for locale, expected in (("en-US", "Apprentice Lin"), ("zh-CN", "林学徒")):
        created = client.post("/api/sessions", {"worldId": "mistport", "locale": locale}, content_type="application/json")
        assert created.status_code == 201, created.content
        body = created.json()
        chars = client.get(f"/api/sessions/{body['id']}/characters", HTTP_AUTHORIZATION=f"Bearer {body['ownerToken']}").json()
        items = chars["items"] if isinstance(chars, dict) else chars
        lin = next(c for c in items if c["id"] == "npc-lin-yuanzhou")
        assert expected in lin["aliases"], lin
