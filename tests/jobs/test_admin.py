"""The operator console (Django admin as a staff user): runtime jobs are read-only records with Retry
and Cancel actions that go through the REST endpoints' services (new job, job-status events), an
overview page, and sessions linking to their turns, executions and jobs."""
from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import RuntimeJob
from sessions.models import Session
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:jobs_runtimejob_changelist"


def _job(session_id: str, status: str) -> RuntimeJob:
    return RuntimeJob.objects.create(session_id=session_id, plugin_id="teller", runtime_id="teller", status=status,
                                     payload={"inputs": {}}, error={"reason": "runtime-reported-failure"})


def _act(admin_client, action: str, jobs: list[RuntimeJob]):
    return admin_client.post(reverse(CHANGELIST), {"action": action, "_selected_action": [str(j.id) for j in jobs]},
                             follow=True)


def test_retry_action_requeues_like_the_rest_endpoint(admin_client, session):
    failed = _job(session["id"], "failed")
    finished = _job(session["id"], "succeeded")
    events_before = SessionEvent.objects.filter(session_id=session["id"], type="job-status.updated").count()
    response = _act(admin_client, "retry_jobs", [failed, finished])
    assert response.status_code == 200
    text = response.content.decode()
    assert "1 job(s) re-queued as new jobs." in text and "A succeeded runtime job cannot be retried" in text
    retried = RuntimeJob.objects.get(payload__retryOf=str(failed.id))
    assert retried.status == "queued" and RuntimeJob.objects.get(pk=failed.pk).status == "failed"
    assert SessionEvent.objects.filter(session_id=session["id"], type="job-status.updated").count() == events_before + 1


def test_cancel_action_cancels_queued_jobs_only(admin_client, session):
    queued = _job(session["id"], "queued")
    done = _job(session["id"], "succeeded")
    response = _act(admin_client, "cancel_jobs", [queued, done])
    assert "1 job(s) cancelled." in response.content.decode()
    assert RuntimeJob.objects.get(pk=queued.pk).status == "cancelled"
    assert RuntimeJob.objects.get(pk=done.pk).status == "succeeded"


def test_jobs_cannot_be_added_or_edited(admin_client, session):
    job = _job(session["id"], "failed")
    assert admin_client.get(reverse("admin:jobs_runtimejob_add")).status_code == 403
    change = admin_client.post(reverse("admin:jobs_runtimejob_change", args=[job.pk]), {"status": "queued"})
    assert change.status_code == 403 and RuntimeJob.objects.get(pk=job.pk).status == "failed"
    view = admin_client.get(reverse("admin:jobs_runtimejob_change", args=[job.pk]))
    assert view.status_code == 200 and "runtime-reported-failure" in view.content.decode()
    assert admin_client.get(reverse("admin:covel_sessions_session_add")).status_code == 403


def test_overview_counts_by_status_and_queue_age(admin_client, session):
    _job(session["id"], "queued")
    _job(session["id"], "failed")
    _job(session["id"], "failed")
    page = admin_client.get(reverse("admin:jobs_runtimejob_overview"))
    text = page.content.decode()
    assert page.status_code == 200
    assert "?status__exact=failed\">failed</a></td><td>2<" in text and "Oldest queued job:" in text
    assert "none queued" not in text.split("Oldest queued execution")[0]


def test_a_session_links_to_its_records(admin_client, session):
    _job(session["id"], "failed")
    page = admin_client.get(reverse("admin:covel_sessions_session_change", args=[session["id"]])).content.decode()
    jobs_link = f"{reverse(CHANGELIST)}?session={session['id']}"
    assert jobs_link in page and "executions" in page and "runtime outputs" in page
    listing = admin_client.get(jobs_link)
    assert listing.status_code == 200 and str(RuntimeJob.objects.get(session_id=session["id"]).id) in listing.content.decode()
    assert Session.objects.filter(pk=session["id"]).exists()
