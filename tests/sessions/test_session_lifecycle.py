"""POST/GET/PATCH/DELETE /api/sessions (spec 004 §会话管理)."""
from __future__ import annotations

import hashlib

import pytest

from sessions.models import Character, CharacterSchema, DimensionValue, LorebookEntry, Session
from tests.sessions.support import OPERATOR_TOKEN, session_create

pytestmark = pytest.mark.django_db(transaction=False)


def test_create_imports_world_content_and_returns_owner_token_once(client, catalog):
    # given / when
    body = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller", "dims"])

    # then: id, clock, seats, plugins
    assert body["id"].startswith("tide-test-") and len(body["id"]) == len("tide-test-") + 8
    assert body["worldId"] == "tide-test" and body["locale"] == "en-US" and body["status"] == "active"
    assert body["seats"] == [{"id": "main", "controller": "human", "role": "player", "characters": "auto"}]
    assert body["activePlugins"] == ["teller", "dims", "opener"]
    assert body["phase"] == "setup"
    assert body["setupRuntimes"] == {"opener": {"state": "pending", "generation": 1, "attempts": 0, "pluginVersion": "1.0.0"}}
    assert body["completedPlayerTurns"] == 0
    assert "requestedLocale" not in body and "ignoredDimensions" not in body
    # the owner token is stored only as its SHA-256; private fields never leave the server
    row = Session.objects.get()
    assert row.owner_token_hash == hashlib.sha256(body["ownerToken"].encode()).hexdigest()
    assert body["incarnation"] and body["incarnation"] != row.incarnation
    assert row.event_epoch and row.event_seq == 0
    for private in ("ownerTokenHash", "owner_token_hash", "deletionState", "eventEpoch"):
        assert private not in body
    # world content imported
    assert sorted(Character.objects.values_list("character_id", "type")) == [("hero", "player"), ("npc-bell", "npc")]
    assert Character.objects.get(character_id="npc-bell").aliases == ["Tam"]
    lore = LorebookEntry.objects.order_by("insertion_order")
    assert [(e.entry_id, e.owner, e.strategy) for e in lore] == [("harbour", "world", "selective"), ("bell", "world", "selective")]
    assert CharacterSchema.objects.get().schema["attributes"][0]["id"] == "mood"
    dim = DimensionValue.objects.get()
    assert (dim.dimension_id, dim.value, dim.version) == ("tide", {"level": 3}, 1)
    # GET never repeats the owner token
    fetched = client.get(f"/api/sessions/{body['id']}").json()
    assert "ownerToken" not in fetched and fetched["incarnation"] == body["incarnation"]


def test_create_without_dimension_provider_ignores_dimensions(client, catalog):
    body = session_create(client, worldId="tide-test", plugins=["teller"], locale="en-US")

    assert body["ignoredDimensions"] == ["tide"]
    assert body["worldDataNotices"][0]["code"] == "dimension-provider-missing"
    assert DimensionValue.objects.count() == 0


def test_create_resolves_locale_against_world_versions(client, catalog):
    zh = session_create(client, worldId="tide-test", locale="zh-CN", plugins=[])
    assert zh["locale"] == "zh-CN" and "requestedLocale" not in zh
    assert zh["title"] == "潮汐测试"
    fr = session_create(client, worldId="tide-test", locale="fr-FR", plugins=[])
    assert fr["locale"] == "en-US" and fr["requestedLocale"] == "fr-FR"
    # same language but another script (Hant) does not borrow the Hans version
    tw = session_create(client, worldId="tide-test", locale="zh-TW", plugins=[])
    assert tw["locale"] == "en-US" and tw["requestedLocale"] == "zh-TW"


def test_create_without_setup_runtimes_starts_playing(client, catalog, tmp_path):
    # given a host whose only plugin has no setup runtime
    from plugins_app.registry import registry_reset

    catalog.COVEL_BUILTIN_PLUGINS_DIR = str(tmp_path)
    registry_reset()
    # when
    bare = session_create(client, locale="en-US")
    # then
    assert bare["id"].startswith("session-") and bare["worldId"] is None
    assert bare["phase"] == "playing" and bare["setupRuntimes"] == {} and bare["activePlugins"] == []


def test_create_defaults_plugins_from_world_policy_and_autoadds_required_providers(client, catalog):
    body = session_create(client, worldId="tide-test")
    assert body["activePlugins"] == ["teller", "opener"]
    needy = session_create(client, worldId="needy-test")
    assert "clock" in needy["activePlugins"]
    assert needy["metadata"]["pluginSelection"]["autoAdded"] == ["clock"]
    assert needy["unmetRequirements"] == [{"contract": "calendar@1", "code": "missing-provider"}]


def test_create_autoadds_the_sole_provider_of_a_plugin_requirement(client, catalog):
    body = session_create(client, plugins=["needs-clock"], locale="en-US")
    assert body["activePlugins"] == ["needs-clock", "opener", "clock"]
    assert body["metadata"]["pluginSelection"]["autoAdded"] == ["clock"]


def test_plugin_with_unmet_requirement_stays_saved_but_unavailable(client, catalog):
    body = session_create(client, plugins=["needs-clock"], locale="en-US")
    client.delete(f"/api/sessions/{body['id']}/plugins/clock")
    listed = client.get(f"/api/sessions/{body['id']}/plugins").json()
    assert [u["pluginId"] for u in listed["unavailable"]] == ["needs-clock"]
    assert listed["unavailable"][0]["code"] == "missing-provider"
    assert "needs-clock" in Session.objects.get().active_plugins


def test_create_errors(client, catalog):
    def post(**body):
        return client.post("/api/sessions", body, content_type="application/json")

    missing = post(worldId="no-such-world")
    assert missing.status_code == 404 and missing.json()["code"] == "world_not_found"
    bad = post(worldId="bad world!")
    assert bad.status_code == 400
    conflict = post(plugins=["teller", "rival-teller"])
    assert conflict.status_code == 400 and conflict.json()["code"] == "plugin_rejected"
    assert conflict.json()["details"]["pluginId"] == "rival-teller"
    dims = post(plugins=["dims", "dims-two"])
    assert dims.status_code == 409 and dims.json()["code"] == "dimension_provider_conflict"
    assert dims.json()["details"] == {"candidates": ["dims", "dims-two"]}
    assert post(seatRole="king").status_code == 400
    assert post(autoAdvanceLimit=11).status_code == 400
    assert post(autoAdvanceLimit=None).status_code == 400
    assert Session.objects.count() == 0
    first = post(id="fixed-id", plugins=[])
    assert first.status_code == 201
    again = post(id="fixed-id", plugins=[])
    assert again.status_code == 409
    assert again.json() == {"error": "Session already exists: fixed-id", "code": "session_already_exists"}


def test_create_in_deleting_world_is_refused(client, catalog):
    from sessions.models import World

    World.objects.create(id="tide-test", name="Tide Test", state=World.STATE_DELETING)
    response = client.post("/api/sessions", {"worldId": "tide-test"}, content_type="application/json")
    assert response.status_code == 409 and response.json()["code"] == "world_deleting"
    assert Session.objects.count() == 0


def test_host_seat_role_starts_without_character_binding(client, catalog):
    body = session_create(client, worldId="tide-test", plugins=[], seatRole="host", autoAdvanceLimit=0)
    assert body["seats"] == [{"id": "main", "controller": "human", "role": "host", "characters": []}]
    assert body["autoAdvanceLimit"] == 0


def test_list_filters_by_world(client, session):
    other = session_create(client, plugins=[], locale="en-US")
    items = client.get("/api/sessions").json()["items"]
    assert {i["id"] for i in items} == {session["id"], other["id"]}
    only = client.get("/api/sessions?worldId=tide-test").json()["items"]
    assert [i["id"] for i in only] == [session["id"]]
    assert set(only[0]) >= {"id", "worldId", "status", "phase", "completedPlayerTurns", "setupRuntimes", "locale",
                            "activePlugins", "createdAt", "updatedAt", "incarnation"}


def test_get_missing_session_is_404(client, db):
    response = client.get("/api/sessions/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "Session not found: nope", "code": "session_not_found"}


def test_patch_status_overrides_and_ended_is_terminal(client, session):
    url = f"/api/sessions/{session['id']}"
    response = client.patch(url, {"status": "paused", "runtimeModelOverrides": {
        "teller": "story", "npc-graph/extractor": "fast", "Bad Key": "x", "": "y", "ok-one": 3}}, content_type="application/json")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "paused"
    assert body["runtimeModelOverrides"] == {"teller": "story", "npc-graph/extractor": "fast"}
    assert {"phase", "completedPlayerTurns", "setupRuntimes"} <= set(body)
    # absent field leaves overrides; {} clears
    assert client.patch(url, {"status": "active"}, content_type="application/json").json()["runtimeModelOverrides"] == {
        "teller": "story", "npc-graph/extractor": "fast"}
    assert client.patch(url, {"runtimeModelOverrides": {}}, content_type="application/json").json()["runtimeModelOverrides"] == {}
    assert client.patch(url, {"status": "gone"}, content_type="application/json").status_code == 400
    assert client.patch(url, {"runtimeModelOverrides": []}, content_type="application/json").status_code == 400
    assert client.patch(url, {"autoAdvanceLimit": 2.5}, content_type="application/json").status_code == 400
    assert client.patch(url, {"status": "ended"}, content_type="application/json").status_code == 200
    ended = client.patch(url, {"status": "active"}, content_type="application/json")
    assert ended.status_code == 409 and ended.json()["code"] == "session_ended"
    assert Session.objects.get().status == "ended"


def test_patch_caps_overrides_at_64(client, session):
    overrides = {f"plugin-{i:03d}": "fast" for i in range(70)}
    body = client.patch(f"/api/sessions/{session['id']}", {"runtimeModelOverrides": overrides},
                        content_type="application/json").json()
    assert len(body["runtimeModelOverrides"]) == 64


def test_delete_removes_everything_and_id_can_be_reused(client, session):
    url = f"/api/sessions/{session['id']}"
    assert client.delete(url).json() == {"ok": True}
    assert Session.objects.count() == 0 and Character.objects.count() == 0 and LorebookEntry.objects.count() == 0
    assert client.delete(url).status_code == 404
    again = session_create(client, id=session["id"], worldId="tide-test", plugins=[])
    assert again["incarnation"] != session["incarnation"]


def test_writes_during_delete_get_session_deleting(client, session):
    Session.objects.filter(pk=session["id"]).update(deletion_state="deleting", deletion_started_at="2999-01-01T00:00:00Z")
    url = f"/api/sessions/{session['id']}"
    patched = client.patch(url, {"status": "paused"}, content_type="application/json")
    assert patched.status_code == 409 and patched.json()["code"] == "session_deleting"
    deleting = client.delete(url)
    assert deleting.status_code == 409 and deleting.json()["code"] == "session_deleting"
    reuse = client.post("/api/sessions", {"id": session["id"]}, content_type="application/json")
    assert reuse.status_code == 409 and reuse.json()["code"] == "session_already_exists"


def test_delete_with_expired_lease_takes_over(client, session):
    Session.objects.filter(pk=session["id"]).update(deletion_state="deleting", deletion_started_at="2001-01-01T00:00:00Z")
    assert client.delete(f"/api/sessions/{session['id']}").status_code == 200
    assert Session.objects.count() == 0


def test_delete_removes_unfinished_runtime_jobs(client, session):
    from jobs.models import RuntimeJob

    RuntimeJob.objects.create(session_id=session["id"], plugin_id="teller", runtime_id="teller", status="running")
    assert client.delete(f"/api/sessions/{session['id']}").status_code == 200
    assert RuntimeJob.objects.count() == 0


def test_operator_header_is_not_required_in_self_tier(client, catalog):
    response = client.post("/api/sessions", {"plugins": []}, content_type="application/json")
    assert response.status_code == 201
    assert OPERATOR_TOKEN  # the helper's token is ignored in tier self
