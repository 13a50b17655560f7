"""DELETE /api/sessions/:id waits for the session's running runtime jobs before its SessionEnd hooks
and its rows go (spec 004 删除按这个顺序进行: mark → drain → SessionEnd → delete under the lock).
``sloth/nap`` is a background job that waits for COVEL_HOME/sloth-wake; sloth's SessionEnd hook
appends to COVEL_HOME/sloth-ended-<id> (tests/turns/platform_support.py)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from jobs.models import RuntimeJob
from plugins_app.registry import registry_reset
from sessions.models import Session
from tests.turns.platform_support import builtin_dir_with_platform
from tests.turns.test_actions_helpers import session_make

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def home(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_platform(tmp_path / "builtin"))
    settings.COVEL_SESSION_DELETE_DRAIN_SECONDS = 1
    home = Path(settings.COVEL_HOME)
    for name in ("sloth-napping", "sloth-wake"):
        (home / name).unlink(missing_ok=True)
    registry_reset()
    yield home
    (home / "sloth-wake").write_text("1", encoding="utf-8")  # let a job still napping finish
    registry_reset()


def _napping_job(api, home: Path, session) -> str:
    response = api.post(f"/api/sessions/{session.id}/plugin-rpc", data=json.dumps(
        {"kind": "runtime", "pluginId": "sloth", "runtimeId": "sloth/nap"}), content_type="application/json")
    assert response.status_code == 202, response.content
    deadline = time.monotonic() + 15
    while not (home / "sloth-napping").exists():
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    return response.json()["jobId"]


def _ended(home: Path, session_id: str) -> list[str]:
    path = home / f"sloth-ended-{session_id}"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_a_delete_waits_for_a_running_job_and_a_queued_one_goes_stale(api, home):
    # given a session with one job running and one still queued behind it (same runtime, one at a time)
    session = session_make(plugins=("narrator", "sloth"))
    running = _napping_job(api, home, session)
    queued = api.post(f"/api/sessions/{session.id}/plugin-rpc", data=json.dumps(
        {"kind": "runtime", "pluginId": "sloth", "runtimeId": "sloth/nap"}), content_type="application/json").json()["jobId"]
    # when the delete starts and the job wakes half a second later
    threading.Timer(0.5, lambda: (home / "sloth-wake").write_text("1", encoding="utf-8")).start()
    started = time.monotonic()
    response = api.delete(f"/api/sessions/{session.id}")
    # then the delete waited for it, ran SessionEnd once and removed the session
    assert response.status_code == 200, response.content
    assert time.monotonic() - started >= 0.45
    assert not Session.objects.filter(pk=session.id).exists()
    assert _ended(home, session.id) == ["deleted"]
    assert not RuntimeJob.objects.filter(pk__in=[running, queued]).exists()


def test_a_drain_that_times_out_fails_retryably_and_the_retry_finishes_the_delete(api, home):
    # given a job that keeps running past the drain bound (1 s)
    session = session_make(plugins=("narrator", "sloth"))
    _napping_job(api, home, session)
    # when the session is deleted
    response = api.delete(f"/api/sessions/{session.id}")
    # then the delete fails retryably: marked, paused, not yet ended, writes refused
    assert response.status_code == 503 and response.json()["code"] == "session_busy", response.content
    row = Session.objects.get(pk=session.id)
    assert row.deletion_state == "deleting" and row.status == "paused"
    assert _ended(home, session.id) == []
    refused = api.patch(f"/api/sessions/{session.id}", {"autoAdvanceLimit": 2}, content_type="application/json")
    assert refused.status_code == 409 and refused.json()["code"] == "session_deleting"
    # when the job ends and the delete is repeated at once (the retry mark lets it take over)
    (home / "sloth-wake").write_text("1", encoding="utf-8")
    retried = api.delete(f"/api/sessions/{session.id}")
    # then the delete completes and SessionEnd ran exactly once
    assert retried.status_code == 200, retried.content
    assert not Session.objects.filter(pk=session.id).exists()
    assert _ended(home, session.id) == ["deleted"]
