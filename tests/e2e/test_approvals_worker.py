"""Approvals are shared by every process (hosted shape: PostgreSQL + Redis, REAL Celery workers).

Decisions and revokes go through the web API in this process; the turn and the runtime job run in
``celery worker`` subprocesses (the private-queue fixture of tests/e2e/test_runtime_jobs_worker.py).
In tests/e2e (real processes): ``make e2e`` runs it in the hosted shape.
The community plugin's marker files name the process that imported each module.
"""
from __future__ import annotations

import json
import os

import pytest

from jobs.models import RuntimeJob
from plugins_app.models import PluginData
from tests.e2e.test_runtime_jobs_worker import _wait_for, workers  # noqa: F401 (fixture)
from tests.sessions.lantern_support import lantern_install, lantern_uninstall, marks_clear, pid_marks
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.hosted_only, pytest.mark.e2e]


@pytest.fixture(autouse=True)
def _lantern():
    marks_clear()
    lantern_install(runtimes=("watch", "later"))
    yield
    lantern_uninstall()
    marks_clear()


def _rpc(api, session_id: str, body: dict):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json")


def _allow(api, response, action: str) -> None:
    assert response.status_code == 202, response.content
    assert response.json()["pending"]["action"] == action
    decided = api.post(f"/api/approvals/{response.json()['approvalId']}/decision",
                       data=json.dumps({"decision": "allow", "scope": "session"}), content_type="application/json")
    assert decided.status_code == 200, decided.content


def test_a_worker_process_honours_the_web_decisions_and_their_revoke(workers, api):  # noqa: F811
    session = session_make(plugins=("narrator", "lantern"), characters=[("hero", "Hero", "player")])
    later = {"kind": "runtime", "pluginId": "lantern", "runtimeId": "lantern/later", "payload": {"n": 1}}

    # given grants decided through the web, and a background job queued while no worker runs
    _allow(api, _rpc(api, session.id, later), "covel:plugin-server-code")
    _allow(api, _rpc(api, session.id, later), "runtime:lantern/later")
    queued = _rpc(api, session.id, later)
    assert queued.status_code == 202 and queued.json()["status"] == "accepted"
    # when the grants are revoked through the web before a worker takes the job
    assert api.delete(f"/api/sessions/{session.id}/approvals").json() == {"ok": True, "cleared": 2}
    workers.start()
    # then the worker process refuses it: stale, and it never imported the runtime's module
    job = _wait_for(lambda: RuntimeJob.objects.filter(pk=queued.json()["jobId"], status="stale").first(), "the job to go stale")
    assert job.error["reason"] == "pre-execution-rejected"
    assert not PluginData.objects.filter(session_id=session.id, plugin_id="lantern", namespace="later").exists()
    assert pid_marks("later") <= {os.getpid()}  # only this (web) process loaded it, at the decision

    # given the turn's grants decided through the web again
    body = action_body(session.id, request_id="req-worker")
    _allow(api, post_action(api, body), "covel:plugin-server-code")
    _allow(api, post_action(api, body), "runtime:lantern/watch")
    # when the same request is sent once more
    frames = stream_read(post_action(api, body))
    # then a worker process ran the community runtime under the stored grant
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    pid = PluginData.objects.get(session_id=session.id, plugin_id="lantern", namespace="stats", key="pid").value
    assert pid != os.getpid() and pid in pid_marks("watch")
