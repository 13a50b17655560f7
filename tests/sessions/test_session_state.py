"""Characters, lorebook, seats, action kinds, session plugins, view and state (spec 004)."""
from __future__ import annotations

import pytest

from sessions.models import Character, ChatMessage, LorebookEntry, Session
from tests.sessions.support import session_create
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db


# --- characters ----------------------------------------------------------------------------------


def test_character_upsert_creates_then_updates_with_event(client, session):
    url = f"/api/sessions/{session['id']}/characters"
    created = client.post(url, {"id": "char-001", "name": "Elvin", "type": "player", "fields": {"level": 3},
                                "aliases": ["El"]}, content_type="application/json")
    assert created.status_code == 200
    body = created.json()
    assert (body["id"], body["name"], body["version"], body["aliases"], body["sessionId"]) == (
        "char-001", "Elvin", 1, ["El"], session["id"])
    updated = client.post(url, {"id": "char-001", "name": "Elvin the Bold"}, content_type="application/json").json()
    assert updated["version"] == 2 and updated["type"] == "npc" and updated["aliases"] == ["El"]
    listed = client.get(url).json()["items"]
    assert [c["id"] for c in listed] == ["hero", "npc-bell", "char-001"]
    events = SessionEvent.objects.filter(session_id=session["id"], type="character.upserted").order_by("seq")
    assert [e.payload["character"]["version"] for e in events] == [1, 2]
    assert events[0].topic == "character"


def test_character_upsert_rejections(client, session):
    url = f"/api/sessions/{session['id']}/characters"
    clash = client.post(url, {"id": "c2", "name": "New", "aliases": ["tam"]}, content_type="application/json")
    assert clash.status_code == 400 and "npc-bell" in clash.json()["error"]
    assert client.post(url, {"name": "No id"}, content_type="application/json").status_code == 400
    assert client.post(url, {"id": "x" * 161, "name": "Long"}, content_type="application/json").status_code == 400
    assert client.post(url, {"id": "c3", "name": "A", "aliases": ["a"] * 33}, content_type="application/json").status_code == 400
    assert Character.objects.filter(session_id=session["id"]).count() == 2
    Session.objects.filter(pk=session["id"]).update(status="ended")
    ended = client.post(url, {"id": "c4", "name": "Late"}, content_type="application/json")
    assert ended.status_code == 409 and ended.json()["code"] == "session_not_active"


# --- lorebook ------------------------------------------------------------------------------------


def test_lorebook_routes_and_owner_rules(client, session):
    url = f"/api/sessions/{session['id']}/lorebook"
    listed = client.get(url).json()["items"]
    assert [(e["id"], e["owner"]) for e in listed] == [("harbour", {"kind": "world"}), ("bell", {"kind": "world"})]
    # the player may reuse a world entry id without touching the world's entry
    created = client.post(url, {"id": "bell", "content": "My note on the bell.", "keys": ["bell"]}, content_type="application/json")
    assert created.status_code == 201 and created.json()["owner"] == {"kind": "player"}
    again = client.post(url, {"id": "bell", "content": "dup"}, content_type="application/json")
    assert again.status_code == 409
    replaced = client.put(f"{url}/bell", {"content": "Rewritten.", "title": "Bell"}, content_type="application/json")
    assert replaced.status_code == 200 and replaced.json()["content"] == "Rewritten."
    new_by_put = client.put(f"{url}/gulls", {"content": "Gulls everywhere."}, content_type="application/json")
    assert new_by_put.status_code == 200 and new_by_put.json()["strategy"] == "constant"
    world_bell = LorebookEntry.objects.get(entry_id="bell", owner="world")
    assert world_bell.content.startswith("The tide bell")
    # toggling enabled keeps the entry listed and its ownership
    toggled = client.patch(f"{url}/harbour", {"enabled": False}, content_type="application/json")
    assert toggled.json() == {"ok": True, "entryId": "harbour", "enabled": False}
    harbour = next(e for e in client.get(url).json()["items"] if e["id"] == "harbour")
    assert harbour["enabled"] is False and harbour["owner"] == {"kind": "world"}
    assert client.patch(f"{url}/harbour", {"enabled": "no"}, content_type="application/json").status_code == 400
    # deleting only touches the player's entries
    assert client.delete(f"{url}/harbour").status_code == 404
    assert client.delete(f"{url}/bell").json() == {"ok": True}
    assert LorebookEntry.objects.filter(entry_id="bell").get().owner == "world"
    assert client.patch(f"{url}/missing", {"enabled": True}, content_type="application/json").status_code == 404
    assert client.post(url, {"keys": ["x"]}, content_type="application/json").status_code == 400
    ordered = [e["insertionOrder"] for e in client.get(url).json()["items"]]
    assert ordered == sorted(ordered)


# --- seats and action kinds -----------------------------------------------------------------------


def test_seat_switches_current_character(client, session):
    url = f"/api/sessions/{session['id']}/seats/main"
    ok = client.patch(url, {"currentCharacterId": "hero"}, content_type="application/json")
    assert ok.status_code == 200
    assert ok.json()["seats"] == [{"id": "main", "controller": "human", "role": "player", "characters": "auto",
                                   "currentCharacterId": "hero"}]
    unbound = client.patch(url, {"currentCharacterId": "npc-bell"}, content_type="application/json")
    assert unbound.status_code == 409 and unbound.json()["code"] == "seat_character_unbound"
    extra = client.patch(url, {"currentCharacterId": "hero", "role": "host"}, content_type="application/json")
    assert extra.status_code == 400 and extra.json()["code"] == "invalid_body"
    missing = client.patch(f"/api/sessions/{session['id']}/seats/nope", {"currentCharacterId": "hero"}, content_type="application/json")
    assert missing.status_code == 404 and missing.json()["code"] == "seat_not_found"
    Session.objects.filter(pk=session["id"]).update(seats=[{"id": "main", "controller": "ai", "role": "player", "characters": "auto"}])
    not_human = client.patch(url, {"currentCharacterId": "hero"}, content_type="application/json")
    assert not_human.status_code == 409 and not_human.json()["code"] == "seat_not_human"
    assert SessionEvent.objects.filter(session_id=session["id"]).count() == 0


def test_action_kinds_lists_base_then_plugin_kinds(client, session):
    body = client.get(f"/api/sessions/{session['id']}/action-kinds").json()
    kinds = [k["kind"] for k in body["kinds"]]
    assert kinds == ["say", "act", "narrate", "direct", "advance", "command", "whisper-pack/whisper"]
    whisper = body["kinds"][-1]
    assert whisper["source"] == "plugin" and whisper["pluginId"] == "whisper-pack" and whisper["fieldsSchema"]["required"] == ["target"]
    assert body["seats"] == [{"seatId": "main", "role": "player", "controller": "human",
                              "allowed": ["say", "act", "command", "whisper-pack/whisper"]}]


# --- session plugins --------------------------------------------------------------------------------


def test_session_plugins_enable_disable(client, session):
    url = f"/api/sessions/{session['id']}/plugins"
    listed = client.get(url).json()
    active = {i["id"] for i in listed["items"] if i["active"]}
    assert active == {"teller", "dims", "whisper-pack", "opener"}
    assert {c["id"] for c in listed["commands"]} >= {"framework:plugins", "framework:debug"}
    enabled = client.put(f"{url}/needs-clock", content_type="application/json").json()
    assert enabled["ok"] is True and {"needs-clock", "clock"} <= set(enabled["activePluginIds"])
    disabled = client.delete(f"{url}/whisper-pack").json()
    assert "whisper-pack" not in disabled["activePluginIds"]
    stored = Session.objects.get()
    assert "whisper-pack" in stored.metadata["pluginSelection"]["excluded"]
    # the bound dimension provider must stay enabled
    refused = client.delete(f"{url}/dims")
    assert refused.status_code == 409 and refused.json()["code"] == "dimension_provider_required"
    conflict = client.put(f"{url}/dims-two")
    assert conflict.status_code == 409 and conflict.json()["code"] == "dimension_provider_conflict"
    assert client.put(f"{url}/ghost").status_code == 404
    Session.objects.filter(pk=session["id"]).update(status="paused")
    assert client.put(f"{url}/clock").json()["code"] == "session_not_active"


# --- view and state ---------------------------------------------------------------------------------


def test_view_has_window_cursor_clock_and_dimensions(client, session):
    for i in range(90):
        ChatMessage.objects.create(session_id=session["id"], message_id=f"m{i:03d}", role="user", content=str(i))
    client.put(f"/api/sessions/{session['id']}/plugin-data/teller/notes/a", {"value": 1}, content_type="application/json")
    view = client.get(f"/api/sessions/{session['id']}/view").json()
    assert len(view["messages"]) == 80 and view["messages"][-1]["id"] == "m089"
    older = client.get(f"/api/sessions/{session['id']}/messages/page?cursor={view['messagesCursor']}").json()
    assert [m["id"] for m in older["items"]] == [f"m{i:03d}" for i in range(10)]
    assert view["session"]["phase"] == "setup" and "setupRuntimes" in view["session"]
    epoch = Session.objects.get().event_epoch
    assert view["eventCursor"] == f"{epoch}:1"
    assert view["dimensions"] == {"tide": {"name": "Tide", "description": "Height of the water.",
                                           "schema": view["dimensions"]["tide"]["schema"], "value": {"level": 3}, "version": 1}}
    assert [c["id"] for c in view["characters"]] == ["hero", "npc-bell"]
    assert view["pluginData"][0]["pluginId"] == "teller"


def test_state_tables(client, session):
    client.put(f"/api/sessions/{session['id']}/plugin-data/teller/notes/chapter", {"value": {"title": "Arrival"}},
               content_type="application/json")
    tables = client.get(f"/api/sessions/{session['id']}/state").json()["tables"]
    assert tables["session"]["data"]["id"] == session["id"]
    assert {"name": "phase", "type": "string"} in tables["session"]["schema"]["fields"]
    assert set(tables["characters"]["data"]) == {"hero", "npc-bell"}
    assert tables["plugin_data/teller:notes"] == {"schema": {"name": "plugin_data/teller:notes",
                                                             "fields": [{"name": "chapter", "type": "object"}]},
                                                  "data": {"chapter": {"title": "Arrival"}}}
    assert "ownerTokenHash" not in str(tables)


def test_state_without_characters_has_no_characters_table(client, catalog):
    bare = session_create(client, plugins=[])
    tables = client.get(f"/api/sessions/{bare['id']}/state").json()["tables"]
    assert set(tables) == {"session"}
