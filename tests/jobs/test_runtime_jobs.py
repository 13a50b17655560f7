"""Detached runtimes become runtime jobs that a worker claims, runs and commits (spec 004 §Turn
执行 schedule.detached, §Staged Runtime 后台作业). Real turns over POST /api/actions with the
embedded in-process worker; the job's claim, lease, fencing and reaping through jobs.services."""
from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connections

from covel import inprocess
from jobs import leases, services
from jobs.models import RuntimeJob
from sessions.models import Session
from sessions.grants import code_grant_checker
from tests.jobs.runtime_jobs_support import job_events, job_make, session_with_tally, tally_count, tally_plugin_install
from tests.turns.test_actions_helpers import action_body, post_action, stream_read
from turns.engine.run import runtime_job_execute
from turns.models import SessionEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def tally():
    tally_plugin_install()


def _play(api, session, text="Look around"):
    frames = stream_read(post_action(api, action_body(session.id, actions=[{"kind": "say", "text": text}])))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return frames


def test_detached_runtime_becomes_a_job_that_runs_and_commits(api):
    # given a session whose tally runtime is declared detached
    session = session_with_tally()

    # when the player plays a turn and the in-process worker drains
    frames = _play(api, session, "Count me")
    assert inprocess.wait_idle(30)

    # then the turn committed without running tally and announced the job on its stream
    deferred = [f["payload"] for f in frames if f["type"] == "runtime.deferred"]
    job = RuntimeJob.objects.get(session=session)
    source_turn = frames[-1]["payload"]["turnId"]
    assert deferred == [{"runtimeId": "tally", "pluginId": "tally", "jobId": str(job.id), "sourceTurnId": source_turn}]
    assert not [f for f in frames if f["type"] == "runtime.started" and f["payload"]["runtimeId"] == "tally"]
    summary = TurnResult.objects.get(session=session, turn_id=source_turn).summary
    tally_result = next(r for r in summary["runtimeResults"] if r["runtimeId"] == "tally")
    assert tally_result["status"] == "deferred" and tally_result["jobId"] == str(job.id)
    # and the worker ran it in its own background turn and committed its write
    assert job.status == "succeeded" and job.attempts == 1 and job.fencing_token == 1
    assert job.lease_owner == "" and job.lease_expires_at is None
    assert tally_count(session.id) == 1
    assert job.result["output"] == {"count": 1, "heard": "Count me", "pid": os.getpid()}
    background = TurnResult.objects.get(session=session, turn_id=job.result["turnId"])
    assert background.origin == "detached" and background.committed is True
    assert job.payload["origin"] == {"activation": "stage", "sourceTurnId": source_turn,
                                     "sourceExecutionId": job.payload["origin"]["sourceExecutionId"], "sourceRuntimeId": "tally"}
    assert [e["status"] for e in job_events(session.id)] == ["queued", "claimed", "running", "committing", "succeeded"]
    session.refresh_from_db()
    assert session.completed_player_turns == 1


def test_jobs_of_later_turns_see_earlier_commits(api):
    session = session_with_tally()
    _play(api, session, "One")
    assert inprocess.wait_idle(30)
    _play(api, session, "Two")
    assert inprocess.wait_idle(30)
    jobs = list(RuntimeJob.objects.filter(session=session).order_by("created_at"))
    assert [j.status for j in jobs] == ["succeeded", "succeeded"]
    assert [j.result["output"]["count"] for j in jobs] == [1, 2]
    assert tally_count(session.id) == 2


def test_runtime_failure_fails_the_job_and_writes_nothing_of_its_own(api):
    session = session_with_tally(explode=True)
    _play(api, session)
    assert inprocess.wait_idle(30)
    job = RuntimeJob.objects.get(session=session)
    assert job.status == "failed"
    assert job.error["reason"] == "runtime-reported-failure" and "tally exploded" in job.error["message"]
    assert job.result["runtimeResults"][0]["status"] == "failed"
    assert tally_count(session.id) is None
    assert TurnResult.objects.get(session=session, turn_id=job.result["turnId"]).committed is True


def test_two_claimers_one_wins():
    # given a queued job
    session = session_with_tally()
    job = job_make(session)
    barrier = threading.Barrier(4)
    claims = []

    def claim():
        try:
            barrier.wait()
            claims.append(services.job_claim(str(job.id), worker_id=threading.current_thread().name))
        finally:
            connections.close_all()

    # when four workers claim it at once
    threads = [threading.Thread(target=claim, name=f"w{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    # then exactly one holds it, with the first fencing token
    won = [c for c in claims if c is not None]
    assert len(claims) == 4 and len(won) == 1
    job.refresh_from_db()
    assert job.status == "claimed" and job.fencing_token == 1 and job.attempts == 1
    assert job.lease_owner == f"{won[0].lease.owner}@{won[0].worker_id}"
    won[0].lease.release()


def test_database_cas_refuses_a_second_claim_even_when_the_lease_is_free():
    session = session_with_tally()
    job = job_make(session)
    first = services.job_claim(str(job.id))
    first.lease.release()  # e.g. the lease store lost the key
    assert services.job_claim(str(job.id)) is None
    job.refresh_from_db()
    assert job.fencing_token == 1 and job.attempts == 1
    assert leases.lease_holder(f"runtime-job:{session.id}:tally") is None


def test_jobs_of_one_runtime_run_one_at_a_time():
    session = session_with_tally()
    first, second = job_make(session), job_make(session)
    claim = services.job_claim(str(first.id))
    assert services.job_claim(str(second.id)) is None
    assert RuntimeJob.objects.get(pk=second.pk).status == "queued"
    claim.lease.release()


def test_expired_lease_orphans_the_job_and_its_late_commit_is_discarded():
    # given a job whose worker claimed and ran it, then stalled past its lease
    session = session_with_tally()
    job = job_make(session)
    claim = services.job_claim(str(job.id), lease_seconds=0.2)
    assert services.job_start(claim)
    run = runtime_job_execute(job, code_grants=code_grant_checker(job.session_id))
    time.sleep(0.4)

    # when the reaper runs
    assert services.jobs_reap() == 1

    # then the job is orphaned, not replayed, and the stalled worker's commit changes nothing
    job.refresh_from_db()
    assert job.status == "orphaned" and job.error == {"reason": "lease-expired"}
    assert job_events(session.id)[-1]["status"] == "orphaned"
    assert job_events(session.id)[-1]["reason"] == "lease-expired"
    assert services.job_commit(claim, run) is None
    assert tally_count(session.id) is None
    assert not TurnResult.objects.filter(session=session, turn_id=run.turn.turn_id).exists()
    assert RuntimeJob.objects.get(pk=job.pk).status == "orphaned"
    assert services.jobs_reap() == 0


def test_reaper_leaves_a_renewed_lease_alone():
    session = session_with_tally()
    job = job_make(session)
    claim = services.job_claim(str(job.id), lease_seconds=5)
    RuntimeJob.objects.filter(pk=job.pk).update(lease_expires_at=job.created_at)  # the DB write lags
    assert services.jobs_reap() == 0
    assert RuntimeJob.objects.get(pk=job.pk).status == "claimed"
    claim.lease.release()


def test_commit_with_a_stale_fencing_token_is_discarded():
    # given worker A ran the job, then the job went back to the queue and worker B claimed it
    session = session_with_tally()
    job = job_make(session)
    claim_a = services.job_claim(str(job.id))
    assert services.job_start(claim_a)
    run_a = runtime_job_execute(job, code_grants=code_grant_checker(job.session_id))
    assert services.job_requeue(claim_a)
    claim_b = services.job_claim(str(job.id))
    assert claim_b.fencing_token == 2 and services.job_start(claim_b)
    run_b = runtime_job_execute(job, code_grants=code_grant_checker(job.session_id))

    # when A commits late, then B commits
    assert services.job_commit(claim_a, run_a) is None
    assert services.job_commit(claim_b, run_b) == "succeeded"
    claim_b.lease.release()

    # then only B's writes exist
    job.refresh_from_db()
    assert job.status == "succeeded" and job.fencing_token == 2 and job.attempts == 2
    assert job.result["turnId"] == run_b.turn.turn_id
    assert tally_count(session.id) == 1
    assert not TurnResult.objects.filter(session=session, turn_id=run_a.turn.turn_id).exists()


def test_warm_shutdown_puts_an_uncommitted_job_back_for_the_next_worker():
    # given a worker that began a warm shutdown while it ran the job
    session = session_with_tally()
    job = job_make(session)
    leases.worker_shutdown_mark("celery@stopping")
    try:
        # when it finishes running the runtime
        status = services.job_run(str(job.id), hostname="celery@stopping")
    finally:
        leases.worker_shutdown_clear("celery@stopping")

    # then nothing was committed, the job is queued again under the same id and sent again:
    # the next worker (here the in-process one) runs and commits it
    assert status == "queued"
    assert inprocess.wait_idle(30)
    job.refresh_from_db()
    assert [e["status"] for e in job_events(session.id)][:4] == ["claimed", "running", "queued", "claimed"]
    assert job.status == "succeeded" and job.attempts == 2 and job.fencing_token == 2
    assert tally_count(session.id) == 1


def test_session_paused_before_the_job_ran_makes_it_stale():
    session = session_with_tally()
    job = job_make(session)
    Session.objects.filter(pk=session.pk).update(status="paused")
    assert services.job_run(str(job.id)) == "stale"
    job.refresh_from_db()
    assert job.status == "stale" and job.error == {"reason": "pre-execution-rejected"}
    assert tally_count(session.id) is None


def test_session_identity_changed_before_the_commit_makes_it_stale():
    session = session_with_tally()
    job = job_make(session)
    claim = services.job_claim(str(job.id))
    assert services.job_start(claim)
    run = runtime_job_execute(job, code_grants=code_grant_checker(job.session_id))
    Session.objects.filter(pk=session.pk).update(incarnation="rotated")
    assert services.job_commit(claim, run) == "stale"
    claim.lease.release()
    job.refresh_from_db()
    assert job.status == "stale" and job.error == {"reason": "commit-barrier-rejected"}
    assert tally_count(session.id) is None


def test_cancelled_while_running_never_commits():
    session = session_with_tally()
    job = job_make(session)
    claim = services.job_claim(str(job.id))
    assert services.job_start(claim)
    run = runtime_job_execute(job, code_grants=code_grant_checker(job.session_id))
    services.runtime_job_cancel(session_id=session.id, job_id=str(job.id))
    assert services.job_commit(claim, run) is None
    claim.lease.release()
    assert RuntimeJob.objects.get(pk=job.pk).status == "cancelled"
    assert tally_count(session.id) is None


def test_queued_job_past_its_queue_limit_times_out():
    session = session_with_tally()
    job = job_make(session, payload={"completion": {"mode": "detached", "maxQueueMs": 1}})
    time.sleep(0.01)
    assert services.jobs_reap() == 1
    job.refresh_from_db()
    assert job.status == "timed_out" and job.error == {"reason": "queue-timeout"}


def test_events_of_a_job_carry_no_payload():
    session = session_with_tally()
    job = job_make(session)
    services.runtime_job_cancel(session_id=session.id, job_id=str(job.id))
    event = SessionEvent.objects.get(session=session, type="job-status.updated")
    assert event.topic == "job"
    assert "payload" not in event.payload and "frozen-input" not in str(event.payload)
    assert event.payload["status"] == "cancelled" and event.payload["error"] == "The job was cancelled."
