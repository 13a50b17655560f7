"""GET|PATCH /api/sessions/:id/orchestration (spec 004 §会话编排设置)."""
from __future__ import annotations

import json

import pytest

from sessions.models import Session
from tests.sessions.support import OPERATOR_TOKEN
from tests.sessions.ui_support import ui_plugins, ui_session_create  # noqa: F401

pytestmark = pytest.mark.django_db

DEFAULTS = {"maxActors": 4, "maxSubagentCalls": 16}
ENSEMBLE = {"pluginId": "ui-policy", "name": "ensemble"}
ENSEMBLE_ITEM = {**ENSEMBLE, "label": {"en": "Ensemble", "zh": "群像"}, "status": "available"}


def url(session_id: str) -> str:
    return f"/api/sessions/{session_id}/orchestration"


def patch(client, session_id: str, body, **headers):
    return client.patch(url(session_id), json.dumps(body), content_type="application/json", **headers)


def saved(session_id: str):
    return Session.objects.get(pk=session_id).metadata.get("orchestration")


def test_defaults_and_no_policy_is_missing(client, ui_plugins):
    created = ui_session_create(client, ["teller"])

    response = client.get(url(created["id"]))

    assert response.status_code == 200
    assert response.json() == {"settings": DEFAULTS, "policies": [], "status": "missing"}


def test_one_registered_policy_is_unique_and_reading_runs_no_service(client, ui_plugins):
    # ui-policy's service raises when called: a 200 proves the read never ran it.
    created = ui_session_create(client, ["teller", "ui-policy"])

    body = client.get(url(created["id"])).json()

    assert body == {"settings": DEFAULTS, "policies": [ENSEMBLE_ITEM], "status": "unique"}


def test_patch_merges_field_by_field_and_keeps_other_metadata(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])
    before = dict(Session.objects.get(pk=created["id"]).metadata)

    first = patch(client, created["id"], {"turnPolicy": ENSEMBLE, "maxActors": 2})
    second = patch(client, created["id"], {"maxSubagentCalls": 8})

    assert first.status_code == 200 and second.status_code == 200
    assert second.json() == {"settings": {"turnPolicy": ENSEMBLE, "maxActors": 2, "maxSubagentCalls": 8},
                             "policies": [ENSEMBLE_ITEM], "status": "selected"}
    assert saved(created["id"]) == {"turnPolicy": ENSEMBLE, "maxActors": 2, "maxSubagentCalls": 8}
    after = Session.objects.get(pk=created["id"]).metadata
    assert {k: v for k, v in after.items() if k != "orchestration"} == before
    assert client.get(url(created["id"])).json() == second.json()


def test_turn_policy_null_clears_the_choice(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])
    patch(client, created["id"], {"turnPolicy": ENSEMBLE, "maxActors": 3})

    response = patch(client, created["id"], {"turnPolicy": None})

    assert response.json()["settings"] == {"maxActors": 3, "maxSubagentCalls": 16}
    assert saved(created["id"]) == {"maxActors": 3}


@pytest.mark.parametrize("body, field", [
    ({"maxActors": 17}, "maxActors"),
    ({"maxActors": -1}, "maxActors"),
    ({"maxActors": 2.0}, "maxActors"),
    ({"maxActors": True}, "maxActors"),
    ({"maxActors": "2"}, "maxActors"),
    ({"maxSubagentCalls": 65}, "maxSubagentCalls"),
    ({"maxSubagentCalls": None}, "maxSubagentCalls"),
    ({"turnPolicy": {"pluginId": "ui-policy"}}, "turnPolicy"),
    ({"turnPolicy": {"pluginId": "ui-policy", "name": "ensemble", "x": 1}}, "turnPolicy"),
    ({"turnPolicy": "ui-policy:ensemble"}, "turnPolicy"),
    ({"turnPolicy": {"pluginId": "ui-policy", "name": "solo"}}, "turnPolicy"),
    ({"turnPolicy": {"pluginId": "teller", "name": "turn-policy"}}, "turnPolicy"),
])
def test_invalid_values_are_400_and_change_nothing(client, ui_plugins, body, field):
    created = ui_session_create(client, ["teller", "ui-policy"])
    patch(client, created["id"], {"maxActors": 5})

    response = patch(client, created["id"], {"maxActors": 1, **body} if field != "maxActors" else body)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_orchestration"
    assert response.json()["details"]["field"] == field
    assert saved(created["id"]) == {"maxActors": 5}


def test_unknown_fields_are_400_and_change_nothing(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])

    response = patch(client, created["id"], {"maxActors": 1, "autoAdvanceLimit": 2})

    assert response.status_code == 400
    assert response.json()["details"] == {"unknown": ["autoAdvanceLimit"]}
    assert saved(created["id"]) is None


def test_a_choice_that_became_unavailable_is_kept_and_listed_as_unavailable(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])
    patch(client, created["id"], {"turnPolicy": ENSEMBLE})
    assert client.delete(f"/api/sessions/{created['id']}/plugins/ui-policy").status_code == 200

    quotas_only = patch(client, created["id"], {"maxActors": 1})

    assert quotas_only.status_code == 200
    assert quotas_only.json() == {"settings": {"turnPolicy": ENSEMBLE, "maxActors": 1, "maxSubagentCalls": 16},
                                  "policies": [{**ENSEMBLE, "label": "ensemble", "status": "unavailable"}],
                                  "status": "missing"}
    again = patch(client, created["id"], {"turnPolicy": ENSEMBLE})
    assert again.status_code == 400 and saved(created["id"])["turnPolicy"] == ENSEMBLE


def test_a_paused_plugins_policy_is_paused(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])
    patch(client, created["id"], {"turnPolicy": ENSEMBLE})
    session = Session.objects.get(pk=created["id"])
    session.metadata = {**session.metadata, "pluginFaults": {"ui-policy": {"count": 3, "pausedAt": "2026-01-01T00:00:00Z"}}}
    session.save()

    body = client.get(url(created["id"])).json()

    assert body["policies"] == [{**ENSEMBLE_ITEM, "status": "paused"}] and body["status"] == "paused"


def test_selection_travels_with_a_snapshot_and_a_fork(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-policy"])
    patch(client, created["id"], {"turnPolicy": ENSEMBLE, "maxActors": 2})
    snapshot = client.post(f"/api/sessions/{created['id']}/snapshots", "{}", content_type="application/json").json()
    patch(client, created["id"], {"turnPolicy": None, "maxActors": 9})

    forked = client.post(f"/api/sessions/{created['id']}/fork", json.dumps({"fromSnapshotId": snapshot["id"]}),
                         content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}")
    restored = client.post(f"/api/sessions/{created['id']}/snapshots/{snapshot['id']}/restore")

    assert forked.status_code == 201 and restored.status_code == 200
    assert client.get(url(forked.json()["sessionId"])).json()["settings"] == {"turnPolicy": ENSEMBLE, "maxActors": 2,
                                                                           "maxSubagentCalls": 16}
    assert saved(created["id"]) == {"turnPolicy": ENSEMBLE, "maxActors": 2}


def test_failure_cases_of_the_session_scope(client, ui_plugins, settings):
    created = ui_session_create(client, ["teller"])
    assert client.get(url("nope")).status_code == 404
    assert patch(client, "nope", {"maxActors": 1}).json()["code"] == "session_not_found"
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN

    refused = patch(client, created["id"], {"maxActors": 1})
    allowed = patch(client, created["id"], {"maxActors": 1}, HTTP_X_SESSION_TOKEN=created["ownerToken"])

    assert refused.status_code == 401 and refused.json()["code"] == "session_owner_required"
    assert allowed.status_code == 200


def test_an_ended_session_refuses_edits(client, ui_plugins):
    created = ui_session_create(client, ["teller"])
    client.patch(f"/api/sessions/{created['id']}", json.dumps({"status": "ended"}), content_type="application/json")

    response = patch(client, created["id"], {"maxActors": 1})

    assert response.status_code == 409 and response.json()["code"] == "session_ended"


def test_a_busy_session_is_503_and_unchanged(client, ui_plugins, settings):
    from sessions.locks import session_lock

    created = ui_session_create(client, ["teller"])
    settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 0
    with session_lock(created["id"]):
        response = patch(client, created["id"], {"maxActors": 1})

    assert response.status_code == 503 and response.json()["code"] == "session_busy"
    assert saved(created["id"]) is None
