"""World data after creation (issue 21; spec 004 世界管理): the provenance ledger, preflight,
sync-data (dry run by default, conflicts left alone, only importer-managed rows change),
sync-dimensions, restore-package, and package-world edits reaching new sessions while active
sessions are told (updateAvailable, world.dimensions.changed)."""
from __future__ import annotations

import shutil
import textwrap

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import DimensionValue, Session, WorldDataLedgerRow
from tests.sessions.support import PLUGINS_DIR
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db

KEEPER = """---
id: tale-keeper
kind: plugin
version: 1.0.0
displayName: Tale keeper
description: Keeps the world's folk tales.
contributes:
  data:
    tales:
      version: 1
      description: Folk tales of the world.
      accepts:
        - folklore.tales@1
---
Test receiver.
"""


def _write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


DIMENSIONS = """
tide:
  name: Tide
  schema: {type: integer, minimum: 0, maximum: 10}
  initialValue: 3
bell:
  name: Bell
  schema: {type: string}
  initialValue: silent
"""


@pytest.fixture
def world(tmp_path, settings):
    """A user world `harbor` (2 dimensions, two folk-tale sources for folklore.tales@1) and a
    builtin plugin dir with dims (world.dimensions@1), teller and tale-keeper."""
    plugins = tmp_path / "plugins"
    for name in ("dims", "teller"):
        shutil.copytree(PLUGINS_DIR / name, plugins / name)
    _write(plugins, {"tale-keeper/PLUGIN.md": KEEPER})
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(plugins)
    settings.COVEL_BUILTIN_WORLDS_DIR = str(tmp_path / "no-builtin")
    (tmp_path / "no-builtin").mkdir()
    settings.COVEL_HOME = tmp_path / "home"
    root = settings.COVEL_HOME / "worlds" / "harbor"
    _write(root, {
        "world.yaml": """
            schemaVersion: "1.0"
            id: harbor
            name: Harbor
            summary: A harbour with a bell.
            defaultLocale: en-US
            supportedLocales: [en-US]
            pluginPolicy:
              requested: [teller, dims, tale-keeper]
            worldData: data/world.data.yaml
        """,
        "WORLD.md": "# Harbor\n\nA harbour where a bell rings at high tide.\n",
        "data/dimensions.yaml": DIMENSIONS,
        "data/bell-tale.yaml": "id: bell-tale\ntitle: The drowned bell\n",
        "data/fog-tale.yaml": "id: fog-tale\ntitle: The fog walker\n",
        "data/world.data.yaml": """
            schemaVersion: 1
            sources:
              dimensions: {kind: yaml, path: data/dimensions.yaml, schema: "covel://world/dimensions", to: "world:metadata.dimensions"}
              bellTale: {kind: yaml, path: data/bell-tale.yaml, to: "contract:folklore.tales@1", key: id}
              fogTale: {kind: yaml, path: data/fog-tale.yaml, to: "contract:folklore.tales@1", key: id}
        """,
    })
    registry_reset()
    yield root
    registry_reset()


def _session(client, **extra) -> dict:
    response = client.post("/api/sessions", {"worldId": "harbor", "locale": "en-US", **extra}, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def _post(client, path, body):
    return client.post(path, body, content_type="application/json")


def _tales(session_id):
    return {r.key: r.value for r in PluginData.objects.filter(session_id=session_id, plugin_id="tale-keeper")}


def test_creation_fills_the_ledger_and_preflight_plans_without_writing(client, world):
    created = _session(client)
    assert set(_tales(created["id"])) == {"bell-tale", "fog-tale"}
    ledger = {(r.kind, r.key) for r in WorldDataLedgerRow.objects.filter(session_id=created["id"], managed=True)}
    assert ledger == {("dimension", "tide"), ("dimension", "bell"), ("plugin-data", "bell-tale"), ("plugin-data", "fog-tale")}
    plan = _post(client, "/api/worlds/harbor/world-data/preflight", {"plugins": ["teller", "tale-keeper"]}).json()
    assert plan["planned"] == 2 and plan["imported"] is True
    assert {t["key"] for t in plan["targets"]} == {"bell-tale", "fog-tale"}
    assert plan["targets"][0]["target"] == "contract:folklore.tales@1" and plan["targets"][0]["pluginId"] == "tale-keeper"
    assert [d["code"] for d in plan["diagnostics"]] == ["dimension-provider-missing"]
    by_session = _post(client, "/api/worlds/harbor/world-data/preflight", {"sessionId": created["id"], "plugins": []}).json()
    assert by_session["planned"] == 4
    assert _post(client, "/api/worlds/harbor/world-data/preflight", {}).status_code == 400
    # two dimension providers are refused whatever the world declares
    shutil.copytree(PLUGINS_DIR / "dims-two", world.parent.parent.parent / "plugins" / "dims-two")
    registry_reset()
    conflict = _post(client, "/api/worlds/harbor/world-data/preflight", {"plugins": ["dims", "dims-two"]})
    assert conflict.status_code == 409 and conflict.json()["code"] == "dimension_provider_conflict"
    assert set(conflict.json()["details"]["candidates"]) == {"dims", "dims-two"}


def test_edit_then_sync_dry_run_and_apply_leaves_the_conflicting_row_alone(client, world):
    created = _session(client)
    sid = created["id"]
    # the game changes one tale and one dimension value
    PluginData.objects.filter(session_id=sid, key="fog-tale").update(value={"id": "fog-tale", "title": "Changed in play"})
    DimensionValue.objects.filter(session_id=sid, dimension_id="tide").update(value=7, version=2)
    # the author edits the package files (tales) and the world record (PATCH dimensions)
    (world / "data" / "bell-tale.yaml").write_text("id: bell-tale\ntitle: The drowned bell, retold\n", encoding="utf-8")
    (world / "data" / "fog-tale.yaml").write_text("id: fog-tale\ntitle: The fog walker, retold\n", encoding="utf-8")
    patched = client.patch("/api/worlds/harbor", {"dimensions": {
        "tide": {"name": "Tide", "schema": {"type": "integer", "minimum": 0, "maximum": 12}, "initialValue": 4},
        "bell": {"name": "Bell", "schema": {"type": "string"}, "initialValue": "ringing"},
        "gulls": {"name": "Gulls", "schema": {"type": "integer"}, "initialValue": 2}}}, content_type="application/json")
    assert patched.status_code == 200, patched.content
    assert patched.json()["metadata"]["packageModified"] is True
    # the active session was told
    told = list(SessionEvent.objects.filter(session_id=sid, type="world.dimensions.changed").values_list("payload", flat=True))
    assert told == [{"worldId": "harbor", "reason": "world-edited", "updateAvailable": True}]

    dry = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid}).json()
    assert dry["dryRun"] is True
    assert (dry["upserted"], dry["deleted"]) == (3, 0)  # bell-tale, bell (at baseline), gulls (new)
    reasons = {(c["key"], c["reason"]) for c in dry["conflicts"]}
    assert reasons == {("fog-tale", "modified"), ("tide", "modified")}
    assert _tales(sid)["bell-tale"]["title"] == "The drowned bell"  # nothing written by the dry run

    applied = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False}).json()
    assert applied["dryRun"] is False and applied["upserted"] == 3
    tales = _tales(sid)
    assert tales["bell-tale"]["title"] == "The drowned bell, retold"
    assert tales["fog-tale"]["title"] == "Changed in play"  # the conflicting row left alone
    dims = {d.dimension_id: d for d in DimensionValue.objects.filter(session_id=sid)}
    assert dims["tide"].value == 7 and dims["tide"].definition["schema"]["maximum"] == 10  # evolved: kept
    assert dims["bell"].value == "ringing" and dims["gulls"].value == 2
    again = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False}).json()
    assert again["upserted"] == 0 and {c["key"] for c in again["conflicts"]} == {"fog-tale", "tide"}
    # force overrides the ordinary row, never the dimension protection
    forced = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False, "force": True}).json()
    assert forced["upserted"] == 1 and [c["key"] for c in forced["conflicts"]] == ["tide"]
    assert _tales(sid)["fog-tale"]["title"] == "The fog walker, retold"

    # a new session gets the edited record's dimensions, not the package files'
    fresh = _session(client)
    assert {d.dimension_id: d.value for d in DimensionValue.objects.filter(session_id=fresh["id"])} == {
        "tide": 4, "bell": "ringing", "gulls": 2}


def test_only_importer_managed_rows_are_removed(client, world):
    created = _session(client)
    sid = created["id"]
    PluginData.objects.create(session_id=sid, plugin_id="tale-keeper", namespace="tales", key="players-tale", value={"by": "player"})
    (world / "data" / "fog-tale.yaml").unlink()
    text = (world / "data" / "world.data.yaml").read_text(encoding="utf-8")
    (world / "data" / "world.data.yaml").write_text("\n".join(l for l in text.splitlines() if "fogTale" not in l) + "\n", encoding="utf-8")
    result = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False}).json()
    assert result["deleted"] == 1 and result["conflicts"] == []
    assert set(_tales(sid)) == {"bell-tale", "players-tale"}


def test_sync_dimensions_touches_only_dimensions(client, world):
    created = _session(client)
    sid = created["id"]
    (world / "data" / "bell-tale.yaml").write_text("id: bell-tale\ntitle: Not synced here\n", encoding="utf-8")
    assert client.post("/api/worlds/harbor/dimensions/import", {"dimensions": {
        "tide": {"name": "Tide", "schema": {"type": "integer"}, "initialValue": 5}}}, content_type="application/json").status_code == 200
    result = _post(client, "/api/worlds/harbor/sync-dimensions", {"sessionId": sid}).json()
    assert result["dryRun"] is False and result["upserted"] == 1 and result["deleted"] == 1  # tide changed, bell removed
    assert {d.dimension_id: d.value for d in DimensionValue.objects.filter(session_id=sid)} == {"tide": 5}
    assert _tales(sid)["bell-tale"]["title"] == "The drowned bell"
    other = _session(client, id="harbor-other")
    Session.objects.filter(pk=other["id"]).update(world_id="elsewhere")
    assert _post(client, "/api/worlds/harbor/sync-dimensions", {"sessionId": other["id"]}).status_code == 400
    assert _post(client, "/api/worlds/harbor/sync-dimensions", {}).status_code == 400
    assert _post(client, "/api/worlds/harbor/sync-dimensions", {"sessionId": "nope"}).status_code == 404


def test_update_available_and_restore_package(client, world):
    assert client.get("/api/worlds/harbor").json()["updateAvailable"] is False
    client.patch("/api/worlds/harbor", {"description": "Edited in the app"}, content_type="application/json")
    edited = client.get("/api/worlds/harbor").json()
    assert edited["description"] == "Edited in the app" and edited["updateAvailable"] is False
    (world / "WORLD.md").write_text("# Harbor\n\nThe package moved on.\n", encoding="utf-8")
    listed = {w["id"]: w for w in client.get("/api/worlds").json()["items"]}
    assert listed["harbor"]["updateAvailable"] is True
    restored = _post(client, "/api/worlds/harbor/restore-package", {})
    assert restored.status_code == 200, restored.content
    body = restored.json()
    assert body["description"] == "A harbour with a bell." and "packageModified" not in body["metadata"]
    assert body["updateAvailable"] is False and body["metadata"]["source"] == "user-file"
    assert client.get("/api/worlds/harbor").json()["description"] == "A harbour with a bell."
    # a package that went missing
    client.patch("/api/worlds/harbor", {"description": "Edited again"}, content_type="application/json")
    shutil.move(str(world), str(world.parent.parent / "away"))
    missing = _post(client, "/api/worlds/harbor/restore-package", {})
    assert missing.status_code == 409 and missing.json()["code"] == "world_package_missing"
    store = client.post("/api/worlds", {"id": "plain", "name": "Plain"}, content_type="application/json")
    assert store.status_code == 201
    assert _post(client, "/api/worlds/plain/restore-package", {}).json()["code"] == "world_not_from_package"
    assert _post(client, "/api/worlds/none-such/restore-package", {}).status_code == 404


def test_a_plan_made_stale_while_preparing_is_409_and_writes_nothing(client, world, monkeypatch):
    from sessions import world_data_sync

    created = _session(client)
    sid = created["id"]
    (world / "data" / "bell-tale.yaml").write_text("id: bell-tale\ntitle: Retold\n", encoding="utf-8")
    real = world_data_sync.plan_build

    def plan_then_change(*args, **kwargs):
        plan = real(*args, **kwargs)
        # meanwhile the session's plugins change (another request disables tale-keeper)
        Session.objects.filter(pk=sid).update(active_plugins=["teller", "dims"])
        return plan

    monkeypatch.setattr(world_data_sync, "plan_build", plan_then_change)
    stale = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False})
    assert stale.status_code == 409 and stale.json()["code"] == "world_data_sync_plan_stale"
    assert _tales(sid)["bell-tale"]["title"] == "The drowned bell"


def test_writing_needs_an_active_session_and_dimension_changes_on_restore_are_told(client, world):
    created = _session(client)
    sid = created["id"]
    Session.objects.filter(pk=sid).update(status="paused")
    paused = _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": False})
    assert paused.status_code == 409 and paused.json()["code"] == "session_not_active"
    assert _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid}).status_code == 200  # a dry run reads only
    assert _post(client, "/api/worlds/harbor/sync-data", {"sessionId": sid, "dryRun": "no"}).status_code == 400
    Session.objects.filter(pk=sid).update(status="active")
    client.post("/api/worlds/harbor/dimensions/import", {"dimensions": {
        "tide": {"name": "Tide", "schema": {"type": "integer"}, "initialValue": 1}}}, content_type="application/json")
    assert _post(client, "/api/worlds/harbor/restore-package", {}).status_code == 200
    reasons = [p["reason"] for p in SessionEvent.objects.filter(session_id=sid, type="world.dimensions.changed")
               .order_by("seq").values_list("payload", flat=True)]
    assert reasons == ["world-edited", "package-restored"]
    assert {d.dimension_id: d.value for d in DimensionValue.objects.filter(session_id=sid)} == {"tide": 3, "bell": "silent"}
