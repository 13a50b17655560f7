"""Session endpoints refuse out-of-range input with a 400 before anything reaches the database
(column widths and 32-bit integers are the same limits on SQLite and PostgreSQL; spec 004
§响应格式约定: never a 500 for bad input, nothing half-written)."""
from __future__ import annotations

import pytest

from sessions.models import Character, ChatMessage, LorebookEntry, Session, World

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("field, value", [
    ("priority", 2**31), ("priority", -(2**31) - 1), ("insertionOrder", 2**70),
    ("title", "t" * 257), ("position", "p" * 33),
])
def test_lorebook_out_of_range_fields_are_400_and_not_written(client, session, field, value):
    url = f"/api/sessions/{session['id']}/lorebook"
    created = client.post(url, {"content": "c", field: value}, content_type="application/json")
    assert created.status_code == 400 and created.json()["code"] == "invalid_lorebook_entry"
    replaced = client.put(f"{url}/e1", {"content": "c", field: value}, content_type="application/json")
    assert replaced.status_code == 400 and replaced.json()["code"] == "invalid_lorebook_entry"
    assert not LorebookEntry.objects.filter(session_id=session["id"], owner=LorebookEntry.OWNER_PLAYER).exists()


def test_lorebook_accepts_the_limits_themselves(client, session):
    url = f"/api/sessions/{session['id']}/lorebook"
    body = {"id": "edge", "content": "c", "priority": 2**31 - 1, "insertionOrder": -(2**31), "title": "t" * 256, "position": "p" * 32}
    assert client.post(url, body, content_type="application/json").status_code == 201
    entry = LorebookEntry.objects.get(session_id=session["id"], entry_id="edge")
    assert (entry.priority, entry.insertion_order, len(entry.title), len(entry.position)) == (2**31 - 1, -(2**31), 256, 32)


def test_message_sync_with_an_over_long_turn_id_is_400_and_appends_nothing(client, session):
    url = f"/api/sessions/{session['id']}/messages/sync"
    messages = [{"id": "m1", "role": "user", "content": "fine"}, {"id": "m2", "role": "user", "content": "x", "turnId": "t" * 65}]
    response = client.post(url, {"messages": messages}, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_message"
    assert ChatMessage.objects.filter(session_id=session["id"]).count() == 0
    ok = client.post(url, {"messages": [dict(messages[1], turnId="t" * 64)]}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["appended"] == 1


def test_character_version_beyond_32_bits_is_400(client, session):
    url = f"/api/sessions/{session['id']}/characters"
    response = client.post(url, {"id": "big", "name": "Big", "version": 2**31}, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "character_rejected"
    assert not Character.objects.filter(session_id=session["id"], character_id="big").exists()


def test_lore_override_over_500000_characters_is_400(client, catalog):
    response = client.post("/api/sessions", {"worldId": "tide-test", "loreOverride": "x" * 500_001}, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_lore_override"
    assert Session.objects.count() == 0


@pytest.mark.parametrize("world_id", ["x" * 5000, "..", "%2e%2e", "a.b"])
def test_world_ids_that_cannot_name_a_package_are_world_not_found(client, catalog, world_id):
    response = client.get(f"/api/worlds/{world_id}")
    assert response.status_code == 404
    assert response.json()["code"] == "world_not_found"


def test_world_name_over_256_characters_is_400(client, catalog):
    created = client.post("/api/worlds", {"name": "n" * 257}, content_type="application/json")
    assert created.status_code == 400 and created.json()["code"] == "invalid_request"
    patched = client.patch("/api/worlds/tide-test", {"name": "n" * 257}, content_type="application/json")
    assert patched.status_code == 400 and patched.json()["code"] == "invalid_request"
    assert World.objects.count() == 0
