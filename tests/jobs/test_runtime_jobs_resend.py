"""Runtime jobs whose task never reached a worker (README "Faults"): the reaper's re-sender sends a
job idle in ``queued`` for COVEL_JOB_REQUEUE_AFTER_SECONDS once per idle window; the claim makes a
duplicate delivery a no-op (spec 004 §Staged Runtime 后台作业: 重启后继续认领合法的 queued 作业)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from covel import inprocess
from jobs.models import RuntimeJob
from jobs.tasks import reap_runtime_jobs, run_runtime_job
from tests.jobs.runtime_jobs_support import job_make, session_with_tally, tally_plugin_install

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def tally():
    tally_plugin_install()


def test_idle_queued_job_is_sent_once_per_window_and_claimed_once(settings):
    settings.COVEL_JOB_REQUEUE_AFTER_SECONDS = 120
    # given: a job queued 200 s ago whose message was lost, and one queued just now
    session = session_with_tally()
    lost = job_make(session)
    RuntimeJob.objects.filter(pk=lost.pk).update(updated_at=timezone.now() - timedelta(seconds=200))
    fresh = job_make(session_with_tally())
    # when: the reaper runs twice in a row
    reap_runtime_jobs()
    assert inprocess.wait_idle(30)
    reap_runtime_jobs()
    assert inprocess.wait_idle(30)
    # then: the lost job was sent and claimed exactly once; the fresh one was left alone
    lost.refresh_from_db()
    fresh.refresh_from_db()
    assert lost.attempts == 1 and lost.status != "queued"
    assert (fresh.status, fresh.attempts) == ("queued", 0)
    # and a late duplicate of its message claims nothing
    run_runtime_job.apply(args=(str(lost.pk),))
    assert RuntimeJob.objects.get(pk=lost.pk).attempts == 1
    connections.close_all()
