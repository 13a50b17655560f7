"""GET /api/sessions/:id/runtime-jobs, POST .../:jobId/cancel, POST .../:jobId/retry (spec 004
§Staged Runtime 后台作业): the public job object, status codes and error envelopes."""
from __future__ import annotations

import threading
import uuid

import pytest

from jobs.models import RuntimeJob
from sessions.auth import token_hash
from sessions.models import Session
from tests.jobs.runtime_jobs_support import job_events, job_make, session_with_tally
from sessions.locks import session_lock

pytestmark = pytest.mark.django_db


def _url(session_id, job_id=None, action=None):
    base = f"/api/sessions/{session_id}/runtime-jobs"
    return f"{base}/{job_id}/{action}" if job_id else base


def _error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and isinstance(body["error"], str) and body["error"]
    return body


def test_lists_the_sessions_jobs_in_enqueue_order_without_payload(api):
    # given two jobs of the session and one of another session
    session = session_with_tally()
    first = job_make(session)
    second = job_make(session, status="failed", error={"reason": "runtime-reported-failure", "message": "boom at line 3"},
                      result={"turnId": "t-bg", "executionId": "x-bg", "runtimeId": "tally", "durationMs": 4})
    job_make(session_with_tally())

    # when
    response = api.get(_url(session.id))

    # then
    assert response.status_code == 200
    items = response.json()["items"]
    assert [i["jobId"] for i in items] == [str(first.id), str(second.id)]
    queued, failed = items
    assert set(queued) == {"schemaVersion", "jobId", "pluginId", "runtimeId", "status", "origin", "enqueuedAt",
                           "updatedAt", "attempt"}
    assert queued["schemaVersion"] == 1 and queued["status"] == "queued" and queued["attempt"] == 0
    assert queued["origin"] == first.payload["origin"]
    assert queued["enqueuedAt"].endswith("Z")
    assert failed["status"] == "failed" and failed["reason"] == "runtime-reported-failure"
    assert failed["error"] == "The runtime reported a failure."  # fixed text, not the raw message
    assert failed["turnId"] == "t-bg" and failed["executionId"] == "x-bg" and failed["finishedAt"]
    raw = response.content.decode()
    assert "frozen-input" not in raw and "never-shown" not in raw and "incarnation" not in raw


def test_list_of_an_unknown_session_is_session_not_found(api):
    body = _error(api.get(_url("no-such-session")), 404, "session_not_found")
    assert body["error"] == "Session not found: no-such-session"


def test_owner_token_is_required_in_hosted_tiers(api, settings):
    settings.DEPLOYMENT_TIER = "demo"
    session = session_with_tally()
    Session.objects.filter(pk=session.pk).update(owner_token_hash=token_hash("owner-secret"))
    job = job_make(session)
    _error(api.get(_url(session.id)), 401, "session_owner_required")
    _error(api.post(_url(session.id, job.id, "cancel")), 401, "session_owner_required")
    _error(api.post(_url(session.id, job.id, "retry")), 401, "session_owner_required")
    assert api.get(_url(session.id), HTTP_AUTHORIZATION="Bearer owner-secret").status_code == 200


@pytest.mark.parametrize("status", ["queued", "claimed", "running"])
def test_cancel_returns_the_cancelled_job_and_emits_its_status(api, status):
    session = session_with_tally()
    job = job_make(session, status=status)
    response = api.post(_url(session.id, job.id, "cancel"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["jobId"] == str(job.id) and body["status"] == "cancelled" and body["reason"] == "cancelled-by-request"
    assert RuntimeJob.objects.get(pk=job.pk).status == "cancelled"
    assert job_events(session.id) == [body]


@pytest.mark.parametrize("status", ["committing", "succeeded", "failed", "cancelled", "orphaned"])
def test_cancel_refuses_committing_or_finished_jobs(api, status):
    session = session_with_tally()
    job = job_make(session, status=status)
    _error(api.post(_url(session.id, job.id, "cancel")), 409, "runtime_job_not_cancellable")
    assert RuntimeJob.objects.get(pk=job.pk).status == status
    assert job_events(session.id) == []


@pytest.mark.parametrize("job_id", ["3a043124-c163-4218-bcd8-57d7efe1ba4d", "not-a-uuid"])
def test_cancel_of_an_unknown_job_is_not_cancellable(api, job_id):
    session = session_with_tally()
    _error(api.post(_url(session.id, job_id, "cancel")), 409, "runtime_job_not_cancellable")


def test_cancel_of_another_sessions_job_is_not_cancellable(api):
    session, other = session_with_tally(), session_with_tally()
    job = job_make(other)
    _error(api.post(_url(session.id, job.id, "cancel")), 409, "runtime_job_not_cancellable")
    assert RuntimeJob.objects.get(pk=job.pk).status == "queued"


def test_cancel_waits_for_the_session_lock_and_answers_session_busy(api, settings):
    settings.COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 0
    session = session_with_tally()
    job = job_make(session)
    held, release = threading.Event(), threading.Event()

    def hold():
        with session_lock(session.id):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        body = _error(api.post(_url(session.id, job.id, "cancel")), 503, "session_busy")
        assert body["error"] == "Session is busy, please retry"
    finally:
        release.set()
        holder.join(10)
    assert RuntimeJob.objects.get(pk=job.pk).status == "queued"


@pytest.mark.parametrize("status", ["failed", "timed_out", "cancelled", "stale", "orphaned"])
def test_retry_creates_a_new_queued_job_and_keeps_the_original(api, status, django_capture_on_commit_callbacks):
    # given a finished job of the session, whose identity has since been rotated
    session = session_with_tally()
    job = job_make(session, status=status, attempts=1, fencing_token=1, error={"reason": "lease-expired"})
    Session.objects.filter(pk=session.pk).update(incarnation="current-incarnation")

    # when
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api.post(_url(session.id, job.id, "retry"))

    # then 202 with the new job; the worker task is sent after commit
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["jobId"] != str(job.id) and body["status"] == "queued" and body["attempt"] == 0
    assert body["runtimeId"] == "tally" and body["origin"] == job.payload["origin"]
    new = RuntimeJob.objects.get(pk=body["jobId"])
    assert new.payload["inputs"] == {"secret": "frozen-input"}
    assert new.payload["incarnation"] == "current-incarnation" and new.payload["retryOf"] == str(job.id)
    assert RuntimeJob.objects.get(pk=job.pk).status == status
    assert [c.args for c in callbacks if getattr(c, "func", None) is not None] == [(body["jobId"],)]
    assert job_events(session.id) == [body]


@pytest.mark.parametrize("status", ["queued", "claimed", "running", "committing", "succeeded"])
def test_retry_refuses_jobs_that_did_not_fail(api, status):
    session = session_with_tally()
    job = job_make(session, status=status)
    _error(api.post(_url(session.id, job.id, "retry")), 409, "runtime_job_not_retryable")
    assert RuntimeJob.objects.filter(session=session).count() == 1


def test_retry_of_an_unknown_job_is_not_retryable(api):
    session = session_with_tally()
    _error(api.post(_url(session.id, uuid.uuid4(), "retry")), 409, "runtime_job_not_retryable")


def test_retry_needs_an_active_session(api):
    session = session_with_tally()
    job = job_make(session, status="failed")
    Session.objects.filter(pk=session.pk).update(status="paused")
    _error(api.post(_url(session.id, job.id, "retry")), 409, "session_not_active")
    assert RuntimeJob.objects.filter(session=session).count() == 1


def test_retry_refuses_when_the_background_queue_is_full(api):
    session = session_with_tally()
    job = job_make(session, status="failed")
    RuntimeJob.objects.bulk_create([
        RuntimeJob(session=session, plugin_id="tally", runtime_id="tally", payload={}) for _ in range(256)
    ])
    _error(api.post(_url(session.id, job.id, "retry")), 429, "background_queue_full")
    assert RuntimeJob.objects.filter(session=session).count() == 257
