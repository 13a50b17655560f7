"""DELETE /api/worlds/:id exactly as spec 004 删除世界 documents it (issue 21): the deletion mark
and its 409s, each session through the full session delete, the package moved out of the load
directory, a retryable mark after a partial failure, and the 10-minute lease takeover."""
from __future__ import annotations

import time

import pytest

from covel.errors import SessionBusy
from sessions import services as session_services
from sessions.models import Session, World
from tests.sessions.test_world_data_sync import _session, world  # noqa: F401  (the harbor world fixture)

pytestmark = pytest.mark.django_db


def _mark(world_id="harbor", **fields):
    row, _ = World.objects.get_or_create(pk=world_id, defaults={"name": world_id, "metadata": {"source": "user-file"}})
    row.state = World.STATE_DELETING
    row.metadata = {**row.metadata, "worldDeletion": {"state": "deleting", "startedAt": time.time(), **fields}}
    row.save()


def test_delete_removes_sessions_then_the_package(client, world):
    first, second = _session(client), _session(client)
    response = client.delete("/api/worlds/harbor")
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "id": "harbor", "deletedSessions": 2}
    assert not Session.objects.filter(pk__in=[first["id"], second["id"]]).exists()
    assert not world.exists() and not list(world.parent.glob(".deleting-*"))
    assert client.get("/api/worlds/harbor").status_code == 404
    assert not World.objects.filter(pk="harbor").exists()


def test_while_deleting_reads_work_and_writes_are_409(client, world):
    _mark(leaseUntil=time.time() + 600)
    record = client.get("/api/worlds/harbor")
    assert record.status_code == 200 and record.json()["metadata"]["worldDeletion"]["state"] == "deleting"
    for response in (client.delete("/api/worlds/harbor"),
                     client.patch("/api/worlds/harbor", {"description": "x"}, content_type="application/json"),
                     client.post("/api/sessions", {"worldId": "harbor"}, content_type="application/json"),
                     client.post("/api/worlds/harbor/restore-package", {}, content_type="application/json")):
        assert response.status_code == 409 and response.json()["code"] == "world_deleting", response.content
    # a client cannot clear the server-managed mark
    client.patch("/api/worlds/harbor", {"metadata": {"worldDeletion": None}}, content_type="application/json")
    assert World.objects.get(pk="harbor").state == World.STATE_DELETING


def test_a_lease_left_by_a_dead_process_is_taken_over_after_ten_minutes(client, world):
    _session(client)
    _mark(startedAt=time.time() - 700, leaseUntil=time.time() - 100)
    response = client.delete("/api/worlds/harbor")
    assert response.status_code == 200 and response.json()["deletedSessions"] == 1


def test_a_partial_failure_leaves_a_retryable_mark_and_a_retry_continues(client, world, monkeypatch):
    first, second = _session(client), _session(client)
    real = session_services.session_delete
    calls = []

    def flaky(session_id):
        calls.append(session_id)
        if len(calls) == 2:
            raise SessionBusy()
        real(session_id)

    monkeypatch.setattr(session_services, "session_delete", flaky)
    failed = client.delete("/api/worlds/harbor")
    assert failed.status_code == 503, failed.content
    assert not Session.objects.filter(pk=first["id"]).exists()  # not restored
    assert Session.objects.filter(pk=second["id"]).exists() and world.exists()
    mark = client.get("/api/worlds/harbor").json()["metadata"]["worldDeletion"]
    assert mark["state"] == "failed" and mark["retryable"] is True
    assert client.post("/api/sessions", {"worldId": "harbor"}, content_type="application/json").json()["code"] == "world_deleting"
    monkeypatch.setattr(session_services, "session_delete", real)
    retried = client.delete("/api/worlds/harbor")  # the retryable mark is taken over at once
    assert retried.status_code == 200 and retried.json()["deletedSessions"] == 1
    assert not world.exists() and not Session.objects.filter(world_id="harbor").exists()
