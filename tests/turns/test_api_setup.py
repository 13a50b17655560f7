import pytest

from sessions.models import Session
from tests.turns.engine.support import session_create

pytestmark = pytest.mark.django_db

BLOCKED = {"state": "blocked", "generation": 1, "attempts": 3, "reason": "max-trigger-count", "blockedAt": "2025-01-01T00:00:00Z",
           "lastError": "boom"}


def url(session_id, runtime_id, action):
    return f"/api/sessions/{session_id}/setup/{runtime_id.replace('/', '%2F')}/{action}"


def test_retry_resets_blocked_runtime_to_a_new_pending_generation(api):
    session = session_create(plugins=["x"], phase="setup", setup_runtimes={"char-creator/player-init": BLOCKED})
    response = api.post(url(session.id, "char-creator/player-init", "retry"), content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "runtimeId": "char-creator/player-init",
                               "state": {"state": "pending", "generation": 2, "attempts": 0}}
    assert Session.objects.get(pk=session.pk).setup_runtimes["char-creator/player-init"]["generation"] == 2
    again = api.post(url(session.id, "char-creator/player-init", "retry"), content_type="application/json")
    assert again.status_code == 200 and again.json()["state"]["generation"] == 2


def test_waive_marks_blocked_runtime_done_waived_and_needs_confirm(api):
    session = session_create(plugins=["x"], phase="setup", setup_runtimes={"pregame": BLOCKED})
    missing = api.post(url(session.id, "pregame", "waive"), {}, content_type="application/json")
    assert missing.status_code == 400 and missing.json()["code"] == "confirm_required"
    response = api.post(url(session.id, "pregame", "waive"), {"confirm": True}, content_type="application/json")
    assert response.status_code == 200
    state = response.json()["state"]
    assert (state["state"], state["resolution"], state["generation"]) == ("done", "waived", 1) and state["warning"]
    assert Session.objects.get(pk=session.pk).phase == "setup"
    again = api.post(url(session.id, "pregame", "waive"), {"confirm": True}, content_type="application/json")
    assert again.status_code == 200 and again.json()["state"]["resolution"] == "waived"


def test_retry_of_a_runtime_that_is_not_blocked_is_409(api):
    session = session_create(plugins=["x"], phase="setup", setup_runtimes={"pregame": {"state": "done", "resolution": "completed",
                                                                                       "generation": 1, "attempts": 1}})
    response = api.post(url(session.id, "pregame", "retry"), content_type="application/json")
    assert response.status_code == 409 and "only a blocked runtime" in response.json()["error"]


def test_setup_endpoints_on_unknown_session_are_404(api):
    response = api.post(url("nope", "pregame", "retry"), content_type="application/json")
    assert response.status_code == 404 and response.json()["code"] == "session_not_found"
