"""Runtime jobs: enqueue, claim, run, commit, requeue, cancel, retry, reap (spec 004 §Staged
Runtime 后台作业, §多实例能力边界 后台任务; ARCHITECTURE "jobs").

Lifecycle (``jobs.schemas`` has the statuses)::

    queued → claimed → running → committing → succeeded | failed
       │        └─────────┴──────────┴──── lease expired (worker died) → orphaned (never replayed)
       ├─ cancel (queued/claimed/running) → cancelled      ├─ session/plugin changed → stale
       └─ maxQueueMs exceeded → timed_out                   └─ warm shutdown before committing → queued

- Enqueue: a turn that scheduled a detached runtime writes its RuntimeJob row inside the turn's
  commit transaction (``runtime_jobs_enqueue``, the engine's ``runtime_jobs_stage`` port) and
  ``jobs.run_runtime_job`` is sent only after that commit.
- Claim (``job_claim``): a renewable lease (``jobs.leases``) on the job's (session, runtime) —
  jobs of one runtime in one session run one at a time (spec: 同一个 (session, plugin, runtime)
  的作业串行执行) — then a compare-and-set UPDATE ``queued → claimed`` that increments
  ``fencing_token`` (``WHERE status = 'queued' AND fencing_token = <read>``). Two claimers: one
  row changes, the other gets None.
- Run (``job_run``): the lease is renewed in the background (Redis and ``lease_expires_at``),
  the runtime runs through the engine (``turns.engine.run.runtime_job_execute``) without the
  session lock; only the commit takes it. The commit's transaction sets the job's terminal
  state with ``WHERE status = 'committing' AND fencing_token = <ours>``: a stale holder's commit
  changes 0 rows and the whole transaction (game data included) is rolled back.
- Every status change appends a ``job-status.updated`` event (topic ``job``, payload the public
  job object) in the same transaction; the creating turn also gets ``runtime.deferred``.
- When a job ends or is requeued, the oldest queued job of the same (session, runtime) is sent
  to the queue (a task never waits for another task).
- Credentials (``jobs.credentials``, spec 004 §后台作业用谁的模型凭据 / §“能不能跑”是怎么判断的): a job
  runs with the credentials its source request left for it, else the server's own when a server
  slot carries a key or the host confirmed its services; otherwise it stays ``queued`` (checked
  before the claim, so nothing about it changes) until a request with keys offers them
  (``jobs_credentials_offered``), the re-sender sends it again, or ``maxQueueMs`` times it out.
- ``maxExecutionMs`` (spec: 限制从 running 到 runtime 执行返回的时间): when it passes while the runtime
  runs, the job becomes ``timed_out`` (reason ``execution-timeout``) at once, its cancel token is
  set and nothing of it commits; an uncooperative handler keeps the runtime's lease until it
  returns. Waiting for the session lock to commit does not count.
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.db.models import F
from django.utils import timezone

from covel import metrics
from covel.credentials import RequestCredentials, credentials_current, credentials_scope
from covel.errors import SessionBusy, SessionNotFound
from covel.taskqueue import TASK_RUN_RUNTIME_JOB, task_send
from jobs import credentials, leases, schemas as S, selectors
from jobs.errors import BackgroundQueueFull, RuntimeJobNotCancellable, RuntimeJobNotRetryable, SessionNotActive
from jobs.models import RuntimeJob
from turns.events import NewEvent, session_events_append
from sessions.grants import code_grant_checker
from sessions.locks import session_lock

logger = logging.getLogger("covel.jobs")

TYPE_JOB_STATUS = "job-status.updated"
TYPE_RUNTIME_DEFERRED = "runtime.deferred"
TOPIC_JOB = "job"
TOPIC_RUNTIME = "runtime"

#: Finished jobs kept per (session, runtime) (spec 004: 每个 runtime 只保留最近 20 条).
FINISHED_KEPT_PER_RUNTIME = 20
#: Queued jobs a session may hold (spec 004 background_queue_full, 默认 256).
MAX_QUEUED_PER_SESSION = 256
#: Attempts at the session lock (each waits COVEL_SESSION_LOCK_TIMEOUT_SECONDS) before failing.
COMMIT_LOCK_ATTEMPTS = 3

# CommitFailed codes the job commit hook raises (never reach a client).
CODE_FENCED = "runtime_job_fenced"
CODE_COMMIT_BARRIER = "runtime_job_commit_barrier"


def _lease_seconds() -> float:
    return float(settings.COVEL_JOB_LEASE_SECONDS)


def _lease_name(session_id: str, runtime_id: str) -> str:
    return f"runtime-job:{session_id}:{runtime_id}"


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


# --- events ------------------------------------------------------------------------------------


def _status_event(job: RuntimeJob) -> NewEvent:
    origin = (job.payload or {}).get("origin") or {}
    return NewEvent(type=TYPE_JOB_STATUS, topic=TOPIC_JOB, turn_id=origin.get("sourceTurnId") or "",
                    payload=S.runtime_job_out(job))


def _enqueue_on_commit(job_id: str) -> None:
    # Sent after the turn's commit. A broker that refuses it must not turn the committed turn into
    # an error (an on-commit exception escapes the commit): the job stays queued and the
    # re-sender (``jobs_reap`` step 3) sends it after COVEL_JOB_REQUEUE_AFTER_SECONDS.
    transaction.on_commit(functools.partial(_job_send, job_id))


def _job_send(job_id: str) -> bool:
    """Send the job's task now; False (logged) when the broker refuses it (see ``_enqueue_on_commit``)."""
    try:
        task_send(TASK_RUN_RUNTIME_JOB, job_id)
    except Exception as exc:
        logger.warning("runtime job %s: task not sent (%s: %s); the re-sender will send it", job_id,
                       exc.__class__.__name__, exc)
        return False
    return True


def runtime_jobs_enqueue(*, session, jobs: list[dict[str, Any]]) -> list[NewEvent]:
    """Write the RuntimeJob rows of a turn's detached runtimes; call inside the turn's commit
    transaction (the engine's ``CommitPlan.in_transaction`` hook).

    session: the locked ``sessions.models.Session``. jobs: ``[{jobId, pluginId, runtimeId,
    payload}]`` where payload holds the frozen inputs/settings and ``origin`` ({activation,
    sourceTurnId, sourceExecutionId, sourceRuntimeId}); the session's incarnation is added.
    Returns the events to append with the turn's: per job ``runtime.deferred`` (topic runtime,
    ``{runtimeId, pluginId, jobId, sourceTurnId}``) and ``job-status.updated`` (status queued).
    ``jobs.run_runtime_job`` is sent for each job only after the transaction commits.
    The credentials of the request the caller works for (``covel.credentials.credentials_scope``)
    are held for each job's worker (``jobs.credentials``), never written to the row.
    """
    events: list[NewEvent] = []
    source = credentials_current()  # the request the staging turn/run works for
    for spec in jobs:
        payload = {**spec["payload"], "incarnation": session.incarnation}
        job = RuntimeJob.objects.create(id=spec["jobId"], session_id=session.pk, plugin_id=spec["pluginId"],
                                        runtime_id=spec["runtimeId"], payload=payload)
        # Before the commit that sends its task, so the claiming worker finds them.
        credentials.job_credentials_hold(job, source)
        origin = payload.get("origin") or {}
        events.append(NewEvent(type=TYPE_RUNTIME_DEFERRED, topic=TOPIC_RUNTIME, turn_id=origin.get("sourceTurnId") or "",
                               payload={"runtimeId": job.runtime_id, "pluginId": job.plugin_id, "jobId": str(job.id),
                                        "sourceTurnId": origin.get("sourceTurnId")}))
        events.append(_status_event(job))
        _enqueue_on_commit(str(job.id))
    return events


def _transition(job_id: str, from_statuses: tuple[str, ...], to: str, *, token: int | None = None,
                reason: str | None = None, message: str | None = None, result: dict | None = None) -> RuntimeJob | None:
    """Compare-and-set the job's status (and, when ``token`` is given, its fencing token) and
    append its job-status.updated event in one transaction. Returns the updated job or None when
    the row was not in ``from_statuses`` (or carries another token)."""
    now = timezone.now()
    fields: dict[str, Any] = {"status": to, "updated_at": now}
    if to not in S.IN_FLIGHT:
        fields.update(lease_owner="", lease_expires_at=None)
    if reason is not None:
        fields["error"] = {"reason": reason, **({"message": message[:2000]} if message else {})}
    if result is not None:
        fields["result"] = result
    with transaction.atomic():
        rows = RuntimeJob.objects.filter(pk=job_id, status__in=from_statuses)
        if token is not None:
            rows = rows.filter(fencing_token=token)
        if not rows.update(**fields):
            return None
        job = RuntimeJob.objects.get(pk=job_id)
        try:
            session_events_append(str(job.session_id), [_status_event(job)])
        except SessionNotFound:
            pass
    if to in S.FINISHED:
        _finished_trim(job)
        _job_ended(job_id, to)
    return job


def _job_ended(job_id: str, status: str) -> None:
    """A job reached a terminal status: count it and forget its held credentials."""
    metrics.job_outcome(status)
    try:
        credentials.job_credentials_drop(job_id)
    except Exception:  # they expire on their own
        logger.debug("runtime job %s: held credentials not dropped", job_id, exc_info=True)


def _finished_trim(job: RuntimeJob) -> None:
    """Keep the newest FINISHED_KEPT_PER_RUNTIME finished jobs of the job's (session, runtime)."""
    old = list(RuntimeJob.objects.filter(session_id=job.session_id, runtime_id=job.runtime_id, status__in=S.FINISHED)
               .order_by("-created_at", "-id").values_list("pk", flat=True)[FINISHED_KEPT_PER_RUNTIME:])
    if old:
        RuntimeJob.objects.filter(pk__in=old).delete()


def _siblings_kick(session_id: str, runtime_id: str) -> None:
    """Send the oldest queued job of (session, runtime) to the queue (after a job of it ended)."""
    nxt = (RuntimeJob.objects.filter(session_id=session_id, runtime_id=runtime_id, status=S.QUEUED)
           .order_by("created_at", "id").values_list("pk", flat=True).first())
    if nxt is not None:
        _job_send(str(nxt))


# --- claim and lease ---------------------------------------------------------------------------


@dataclass
class JobClaim:
    """A claimed job: the fencing token this claim got and the lease it holds."""

    job_id: str
    session_id: str
    plugin_id: str
    runtime_id: str
    fencing_token: int
    lease: leases.Lease
    worker_id: str
    credentials: RequestCredentials | None = None


def job_claim(job_id: str, *, worker_id: str | None = None, lease_seconds: float | None = None) -> JobClaim | None:
    """Claim a queued job: take the (session, runtime) lease, then CAS ``queued → claimed`` with
    ``fencing_token + 1``, ``attempts + 1`` and ``lease_expires_at = now + lease_seconds``.

    Returns None (and holds nothing) when the job is not queued, another job of the same runtime
    in the session holds the lease, or another claimer won the CAS. lease_seconds defaults to
    COVEL_JOB_LEASE_SECONDS.
    """
    row = RuntimeJob.objects.filter(pk=job_id).values("status", "fencing_token", "session_id", "runtime_id", "plugin_id").first()
    if row is None or row["status"] != S.QUEUED:
        return None
    ttl = _lease_seconds() if lease_seconds is None else lease_seconds
    lease = leases.lease_acquire(_lease_name(row["session_id"], row["runtime_id"]), ttl_seconds=ttl)
    if lease is None:
        return None
    worker_id = worker_id or _worker_id()
    now = timezone.now()
    token = row["fencing_token"] + 1
    with transaction.atomic():
        claimed = RuntimeJob.objects.filter(pk=job_id, status=S.QUEUED, fencing_token=row["fencing_token"]).update(
            status=S.CLAIMED, fencing_token=token, attempts=F("attempts") + 1,
            lease_owner=f"{lease.owner}@{worker_id}"[:128], lease_expires_at=now + timedelta(seconds=ttl), updated_at=now,
        )
        if claimed:
            job = RuntimeJob.objects.get(pk=job_id)
            try:
                session_events_append(str(job.session_id), [_status_event(job)])
            except SessionNotFound:
                pass
    if not claimed:
        lease.release()
        return None
    return JobClaim(job_id=str(job_id), session_id=str(row["session_id"]), plugin_id=row["plugin_id"],
                    runtime_id=row["runtime_id"], fencing_token=token, lease=lease, worker_id=worker_id)


def job_lease_renew(claim: JobClaim) -> bool:
    """Extend the claim's lease (Redis/in-process) and ``lease_expires_at`` (fenced). False when
    either is lost: the lease expired, the job was cancelled/orphaned or re-claimed."""
    if not claim.lease.renew():
        return False
    expires = timezone.now() + timedelta(milliseconds=claim.lease.ttl_ms)
    return bool(RuntimeJob.objects.filter(pk=claim.job_id, fencing_token=claim.fencing_token, status__in=S.IN_FLIGHT)
                .update(lease_expires_at=expires))


def job_requeue(claim: JobClaim) -> bool:
    """Put a claimed/running job back to queued (warm shutdown before committing; spec 004: 正常关闭
    时，还没进入 committing 的作业 … 放回 queued，jobId 不变) and release the lease; ``job_run``
    sends the job to the queue again for the next worker. False when the claim is stale."""
    job = _transition(claim.job_id, (S.CLAIMED, S.RUNNING), S.QUEUED, token=claim.fencing_token)
    claim.lease.release()
    if job is not None:
        metrics.job_outcome("requeued")
        # The next worker uses the same source credentials, for another full wait.
        credentials.job_credentials_hold(job, claim.credentials)
    return job is not None


class _LeaseKeeper:
    """Renews a claim's lease every third of its length on its own thread; on loss it sets
    ``lost`` and cancels ``cancel`` (the runtime stops cooperatively; its commit is fenced)."""

    def __init__(self, claim: JobClaim) -> None:
        from turns.engine.tools.context import CancelToken

        self.claim = claim
        self.cancel = CancelToken()
        self.lost = False
        self.redis_only = False  # the job row is finished; keep only the runtime's lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"covel-lease-{claim.job_id[:8]}", daemon=True)

    def __enter__(self) -> "_LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = max(0.05, self.claim.lease.ttl_ms / 3000)
        try:
            while not self._stop.wait(interval):
                try:
                    renewed = self.claim.lease.renew() if self.redis_only else job_lease_renew(self.claim)
                except Exception:
                    logger.warning("runtime job %s: lease renewal failed", self.claim.job_id, exc_info=True)
                    renewed = False
                if not renewed:
                    if not self.redis_only:
                        self.lost = True
                        self.cancel.cancel("lease-lost")
                    return
        finally:
            connections.close_all()


# --- run ---------------------------------------------------------------------------------------


def _session_current(session, job: RuntimeJob) -> bool:
    """The pre-execution / commit barrier check: the session is still active, not being deleted,
    has the same identity (incarnation) as when the job was queued and still runs the plugin."""
    return (session is not None and session.status == "active" and not session.deletion_state
            and session.incarnation == (job.payload or {}).get("incarnation")
            and job.plugin_id in (session.active_plugins or []))


def job_run(job_id: str, *, hostname: str = "", plugin_registry: Any = None) -> str | None:
    """Run one runtime job on this worker (the body of ``jobs.run_runtime_job``).

    Claims it (a redelivered or concurrent task finds it taken and returns None), then under the
    renewed lease: pre-execution check (→ stale ``pre-execution-rejected``), ``running``, the
    runtime through the engine, and — unless the worker ``hostname`` began a warm shutdown (→
    back to ``queued``, sent again), ``maxExecutionMs`` passed (→ timed_out ``execution-timeout``)
    or the job was cancelled/lost meanwhile — ``committing`` and the commit under the session
    lock with the fencing check. A job without usable model credentials is not claimed at all
    (it stays queued; returns None). Terminal states: succeeded;
    failed ``runtime-reported-failure`` (the runtime failed; the turn record still commits);
    failed ``follower-not-emitted`` (a ``phase: prompt`` entry woke no background follower; its writes
    commit); a succeeded job's ``result.deferredJobs`` lists the followers its commit queued;
    failed ``execution-failed`` (a proposal was rejected: nothing written); stale
    ``commit-barrier-rejected``; failed ``commit-lock-timeout``. Returns the status it left the
    job in, or None when it did not own the outcome. plugin_registry: tests/embedding hosts.
    """
    jobs_reap_maybe()
    job = RuntimeJob.objects.filter(pk=job_id, status=S.QUEUED).first()
    if job is None:
        return None
    model_services = credentials.job_model_services(job, plugin_registry=plugin_registry)
    if model_services is None:
        # Stays queued, unchanged (spec 004: 否则作业保持 queued).
        logger.info("runtime job %s: no usable model credentials (none left by its request, none on the "
                    "server); it stays queued", job_id)
        metrics.job_outcome("waiting_for_credentials")
        return None
    claim = job_claim(job_id)
    if claim is None:
        return None
    claim.credentials = model_services.credentials
    metrics.job_stage_observe("queue", (timezone.now() - job.created_at).total_seconds())
    held = model_services.credentials or RequestCredentials()
    try:
        # In scope: followers this job's commit stages hold on to the same credentials.
        with _LeaseKeeper(claim) as keeper, credentials_scope(held.keys, held.routing):
            return _claimed_run(claim, keeper, hostname=hostname, plugin_registry=plugin_registry,
                                model_router=model_services.router)
    finally:
        claim.lease.release()
        # The next queued job of this runtime (a requeued job itself) goes to the next worker.
        _siblings_kick(claim.session_id, claim.runtime_id)


def _claimed_run(claim: JobClaim, keeper: _LeaseKeeper, *, hostname: str, plugin_registry: Any,
                 model_router: Any = None) -> str | None:
    from sessions.models import Session
    from turns.engine.run import RuntimeJobRejected, runtime_job_execute

    job = RuntimeJob.objects.get(pk=claim.job_id)
    session = Session.objects.filter(pk=claim.session_id).first()
    grant_check = code_grant_checker(claim.session_id, registry=plugin_registry)
    # A community runtime whose grants were revoked since it was queued does not run (spec 004:
    # 执行期间会话被暂停、结束或撤销授权 → stale); the engine asks again right before its code loads.
    if not _session_current(session, job) or _code_denied(job, grant_check, plugin_registry):
        _transition(claim.job_id, S.IN_FLIGHT, S.STALE, token=claim.fencing_token, reason=S.REASON_PRE_EXECUTION)
        return S.STALE
    if not job_start(claim):
        return None
    limit_ms = ((job.payload or {}).get("completion") or {}).get("maxExecutionMs")
    watchdog = _ExecutionDeadline(claim, keeper, limit_ms) if isinstance(limit_ms, int) and limit_ms > 0 else None
    started = time.monotonic()
    try:
        run = runtime_job_execute(job, cancel=keeper.cancel, plugin_registry=plugin_registry, code_grants=grant_check,
                                  model_router=model_router)
    except RuntimeJobRejected as exc:
        if watchdog is not None:
            watchdog.stop()
        _transition(claim.job_id, S.IN_FLIGHT, S.STALE, token=claim.fencing_token, reason=S.REASON_PRE_EXECUTION,
                    message=exc.message)
        return S.STALE
    except BaseException:
        if watchdog is not None:
            watchdog.stop()  # the run broke: the lease reaper decides, not the deadline
        raise
    metrics.job_stage_observe("run", time.monotonic() - started)
    if watchdog is not None and watchdog.stop(elapsed_seconds=time.monotonic() - started):
        logger.warning("runtime job %s: ran longer than its maxExecutionMs (%s ms); timed out, nothing committed",
                       claim.job_id, limit_ms)
        return S.TIMED_OUT
    if keeper.lost:
        logger.warning("runtime job %s: lease lost while running; its result is discarded", claim.job_id)
        return None
    if hostname and leases.worker_shutdown_requested(hostname):
        return S.QUEUED if job_requeue(claim) else None
    return job_commit(claim, run)


class _ExecutionDeadline:
    """Enforces a job's ``maxExecutionMs`` from ``running`` until its runtime returns: at the
    deadline (a timer thread) the job becomes timed_out (``execution-timeout``, fenced: a commit
    that already moved it to committing wins), its cancel token is set so a cooperative runtime
    stops, and the lease keeper keeps only the runtime's lease (the row is finished)."""

    def __init__(self, claim: JobClaim, keeper: _LeaseKeeper, limit_ms: int) -> None:
        self.claim = claim
        self.keeper = keeper
        self.limit_seconds = limit_ms / 1000
        self.timed_out = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.limit_seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        try:
            with self._lock:
                if self.timed_out:
                    return
                done = _transition(self.claim.job_id, (S.RUNNING,), S.TIMED_OUT, token=self.claim.fencing_token,
                                   reason=S.REASON_EXECUTION_TIMEOUT)
                if done is None:
                    return
                self.timed_out = True
            self.keeper.redis_only = True
            self.keeper.cancel.cancel(S.REASON_EXECUTION_TIMEOUT)
        finally:
            connections.close_all()  # the timer's own thread

    def stop(self, *, elapsed_seconds: float | None = None) -> bool:
        """The runtime returned: stop the timer; a run that took longer than the limit (the timer
        not having fired yet) times out now. True when the job ended timed_out."""
        self._timer.cancel()
        self._timer.join(timeout=10)
        if not self.timed_out and elapsed_seconds is not None and elapsed_seconds > self.limit_seconds:
            with self._lock:
                if not self.timed_out and _transition(self.claim.job_id, (S.RUNNING,), S.TIMED_OUT,
                                                      token=self.claim.fencing_token,
                                                      reason=S.REASON_EXECUTION_TIMEOUT) is not None:
                    self.timed_out = True
        return self.timed_out


def _code_denied(job: RuntimeJob, grant_check, plugin_registry: Any) -> bool:
    """True when the job's plugin is a community plugin lacking its server-code or runtime grant."""
    from plugins_app.registry import plugin_registry as registry_default

    record = (plugin_registry or registry_default()).get(job.plugin_id)
    return record is not None and record.needs_code_grant and grant_check(job.plugin_id, job.runtime_id) is not None


def job_start(claim: JobClaim) -> bool:
    """claimed → running for this claim (fenced). False when the job was cancelled, orphaned or
    claimed again meanwhile."""
    return _transition(claim.job_id, (S.CLAIMED,), S.RUNNING, token=claim.fencing_token) is not None


def _job_result(claim: JobClaim, run) -> dict[str, Any]:
    result = run.result
    out = {"turnId": run.turn.turn_id, "executionId": run.execution_id, "runtimeId": claim.runtime_id,
           "durationMs": result.duration_ms, "runtimeResults": [result.summary()], "output": result.output}
    if run.plan.followers_staged:
        out["deferredJobs"] = list(run.plan.followers_staged)  # queued in this job's commit
    return out


def job_commit(claim: JobClaim, run) -> str | None:
    """Commit a job's run (``turns.engine.run.RuntimeJobRun``): running → committing (fenced),
    then under the session lock the run's writes and the job's terminal state in one
    transaction, whose UPDATE checks ``status = committing`` and the claim's fencing token. A
    stale claim commits nothing and returns None; otherwise the terminal status."""
    from sessions.models import Session
    from turns.engine.commit import CommitFailed
    from turns.engine.run import runtime_job_commit

    if _transition(claim.job_id, (S.RUNNING,), S.COMMITTING, token=claim.fencing_token) is None:
        return None  # cancelled, orphaned or re-claimed while it ran: its result never commits
    failed = run.result.status == "failed"
    status = S.FAILED if failed else S.SUCCEEDED
    decided = {"status": status}

    def fenced_finish(session) -> list[NewEvent]:
        job = RuntimeJob.objects.get(pk=claim.job_id)
        if not _session_current(session, job):
            raise CommitFailed(CODE_COMMIT_BARRIER, "the session or plugin changed")
        error = None
        if failed:
            error = {"reason": S.REASON_RUNTIME_FAILURE, "message": str((run.result.error or {}).get("message", ""))[:2000]}
        elif (job.payload or {}).get("phase") == S.PHASE_PROMPT and not run.plan.followers_staged:
            # An expectsBackgroundFollower entry that woke no follower (spec 004: 没有触发任何后台 follower：
            # 任务状态为 failed，reason: "follower-not-emitted"); its own writes still commit.
            error = {"reason": S.REASON_FOLLOWER_NOT_EMITTED}
        decided["status"] = S.FAILED if error else S.SUCCEEDED
        fields: dict[str, Any] = {"status": decided["status"], "result": _job_result(claim, run), "lease_owner": "",
                                  "lease_expires_at": None, "updated_at": timezone.now()}
        if error:
            fields["error"] = error
        updated = RuntimeJob.objects.filter(pk=claim.job_id, status=S.COMMITTING,
                                            fencing_token=claim.fencing_token).update(**fields)
        if not updated:
            raise CommitFailed(CODE_FENCED, "stale fencing token")
        return [_status_event(RuntimeJob.objects.get(pk=claim.job_id))]

    committing = time.monotonic()
    for _ in range(COMMIT_LOCK_ATTEMPTS):
        try:
            with session_lock(claim.session_id):
                runtime_job_commit(run, in_transaction=fenced_finish)
        except SessionBusy:
            continue
        except Session.DoesNotExist:
            return None
        except CommitFailed as exc:
            if exc.code == CODE_FENCED:
                logger.warning("runtime job %s: commit with stale fencing token %s discarded", claim.job_id, claim.fencing_token)
                return None
            if exc.code == CODE_COMMIT_BARRIER:
                done = _transition(claim.job_id, (S.COMMITTING,), S.STALE, token=claim.fencing_token,
                                   reason=S.REASON_COMMIT_BARRIER)
                return S.STALE if done else None
            done = _transition(claim.job_id, (S.COMMITTING,), S.FAILED, token=claim.fencing_token,
                               reason=S.REASON_EXECUTION_FAILED, message=exc.message)
            return S.FAILED if done else None
        else:
            job = RuntimeJob.objects.filter(pk=claim.job_id).first()
            if job is not None:
                _finished_trim(job)
            metrics.job_stage_observe("commit", time.monotonic() - committing)
            _job_ended(claim.job_id, decided["status"])
            return decided["status"]
    done = _transition(claim.job_id, (S.COMMITTING,), S.FAILED, token=claim.fencing_token, reason=S.REASON_SESSION_BUSY)
    return S.FAILED if done else None


def job_task_run(job_id: str, *, hostname: str = "") -> str | None:
    """The task body: fresh DB connections (worker threads are long-lived), then ``job_run``."""
    close_old_connections()
    return job_run(job_id, hostname=hostname)


# --- endpoints -----------------------------------------------------------------------------------


def runtime_job_cancel(*, session_id: str, job_id: str) -> RuntimeJob:
    """POST /api/sessions/:id/runtime-jobs/:jobId/cancel: under the session lock, queued /
    claimed / running → cancelled (reason cancelled-by-request) with job-status.updated.

    Raises 409 runtime_job_not_cancellable (unknown job, committing or finished) and 503
    session_busy (lock wait timed out). A running job's late result never commits (its move to
    committing fails)."""
    if selectors.runtime_job_get(session_id, job_id) is None:
        raise RuntimeJobNotCancellable(message=f"Runtime job not found: {job_id}")
    with session_lock(session_id):
        job = _transition(job_id, S.CANCELLABLE, S.CANCELLED, reason=S.REASON_CANCELLED)
    if job is None:
        raise RuntimeJobNotCancellable(message="The runtime job is committing or already finished")
    return job


def runtime_job_retry(*, session, job_id: str) -> RuntimeJob:
    """POST /api/sessions/:id/runtime-jobs/:jobId/retry: a new queued job (new jobId) with the
    original frozen inputs and settings, the session's current identity and locale. The original
    job keeps its terminal state. ``jobs.run_runtime_job`` is sent after commit.

    Raises 409 runtime_job_not_retryable (unknown job, or not failed / timed_out / cancelled /
    stale / orphaned), 409 session_not_active, 429 background_queue_full (256 queued)."""
    job = selectors.runtime_job_get(session.pk, job_id)
    if job is None:
        raise RuntimeJobNotRetryable(message=f"Runtime job not found: {job_id}")
    if job.status not in S.RETRYABLE:
        raise RuntimeJobNotRetryable(message=f"A {job.status} runtime job cannot be retried")
    if session.status != "active" or session.deletion_state:
        raise SessionNotActive(message=f"Session is {session.status}, not active")
    if selectors.runtime_jobs_queued_count(session.pk) >= MAX_QUEUED_PER_SESSION:
        raise BackgroundQueueFull(message="Too many queued background jobs in this session")
    payload = {**(job.payload or {}), "incarnation": session.incarnation, "locale": session.locale, "retryOf": str(job.id)}
    payload.pop("turnId", None)  # a retry runs under a new turnId (spec 004: 重试使用新的 turnId)
    with transaction.atomic():
        new = RuntimeJob.objects.create(session_id=session.pk, plugin_id=job.plugin_id, runtime_id=job.runtime_id,
                                        payload=payload)
        session_events_append(str(session.pk), [_status_event(new)])
        _enqueue_on_commit(str(new.id))
    return new


# --- credentials ---------------------------------------------------------------------------------


def jobs_credentials_offered(session_id: str, offered: RequestCredentials) -> int:
    """A new request of the session came with provider keys (``covel.credentials.credentials_offer``):
    hold them for each of the session's queued jobs that holds none (spec 004: 等一个带凭据的新执行
    请求来提供服务) and send those jobs' tasks again. Returns how many jobs got them."""
    given = 0
    for job in RuntimeJob.objects.filter(session_id=session_id, status=S.QUEUED).order_by("created_at", "id"):
        if credentials.job_credentials_held(str(job.pk)) is not None:
            continue
        if credentials.job_credentials_hold(job, offered):
            given += 1
            _job_send(str(job.pk))
    return given


# --- reaping -------------------------------------------------------------------------------------


def memory_index_update_schedule(session_id: str) -> None:
    """After the current transaction commits, send ``jobs.memory_index_update`` for the session (the
    engine's ``memory_index_changed`` port). A broker that refuses the send is logged, never raised:
    an on-commit exception would turn the committed turn into an error, and the next commit or the
    next memory-search indexes what this one missed."""
    transaction.on_commit(functools.partial(_memory_index_update_send, session_id))


def _memory_index_update_send(session_id: str) -> None:
    from covel.taskqueue import TASK_MEMORY_INDEX_UPDATE

    try:
        task_send(TASK_MEMORY_INDEX_UPDATE, session_id)
    except Exception as exc:
        logger.warning("memory index update of %s not sent (%s: %s)", session_id, exc.__class__.__name__, exc)


#: Default bound of the before-next-execution wait (manifest ``completion.maxSettleWaitMs``).
SETTLE_WAIT_DEFAULT_MS = 30_000
#: Largest wait one execution accepts, whatever a manifest declares.
SETTLE_WAIT_MAX_MS = 120_000


def _settles(completion: Any) -> bool:
    settle = (completion or {}).get("settle") if isinstance(completion, dict) else None
    return settle is True or settle == "before-next-execution"


def runtime_jobs_settle_wait(session_id: str) -> dict[str, Any]:
    """The settle barrier (spec 004 §插件记忆: a detached runtime with ``settle: true`` — upstream
    ``settle: before-next-execution`` — makes the next execution wait for it): poll every 0.05 s
    until no unfinished job (queued / claimed / running / committing) of the session declares
    settle, each job bounded by its ``completion.maxSettleWaitMs`` (default 30 s, at most 120 s)
    counted from this call. Called by an execution before it takes the session lock (the job's
    commit needs that lock). Returns ``{"waitedMs": int, "pending": [jobId]}``: ``pending`` lists
    the settle jobs still unfinished when their bound passed (the execution then runs without them)."""
    started = time.monotonic()
    given_up: set[str] = set()
    while True:
        rows = list(RuntimeJob.objects.filter(session_id=session_id, status__in=S.UNFINISHED)
                    .values_list("pk", "payload"))
        waiting = []
        for pk, payload in rows:
            completion = (payload or {}).get("completion") or {}
            if not _settles(completion) or str(pk) in given_up:
                continue
            bound = completion.get("maxSettleWaitMs")
            bound_ms = min(int(bound), SETTLE_WAIT_MAX_MS) if isinstance(bound, int) and bound > 0 else SETTLE_WAIT_DEFAULT_MS
            if (time.monotonic() - started) * 1000 >= bound_ms:
                given_up.add(str(pk))
                continue
            waiting.append(str(pk))
        if not waiting:
            return {"waitedMs": int((time.monotonic() - started) * 1000), "pending": sorted(given_up)}
        time.sleep(0.05)


def session_jobs_drain(session_id: str, timeout_seconds: float) -> bool:
    """Session DELETE step 2 (spec 004 删除按这个顺序进行), called after the session was marked
    deleting: its queued jobs become stale (``session-deleted``; none will start now), then wait —
    polling every 0.1 s — until no in-flight job (claimed / running / committing) of the session
    still holds its runtime lease (a worker that died holds none). True when drained, False when
    ``timeout_seconds`` passed first (the delete then fails retryably)."""
    for job_id in RuntimeJob.objects.filter(session_id=session_id, status=S.QUEUED).values_list("pk", flat=True):
        _transition(str(job_id), (S.QUEUED,), S.STALE, reason=S.REASON_SESSION_DELETED)
    deadline = time.monotonic() + max(0.0, timeout_seconds)
    while True:
        runtimes = set(RuntimeJob.objects.filter(session_id=session_id, status__in=S.IN_FLIGHT)
                       .values_list("runtime_id", flat=True))
        if not any(leases.lease_holder(_lease_name(session_id, runtime_id)) for runtime_id in runtimes):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def jobs_reap(*, now=None) -> int:
    """Periodic maintenance (beat ``jobs.reap_runtime_jobs``; opportunistic in the embedded shape).

    1. claimed / running / committing jobs whose lease expired (``lease_expires_at`` passed and
       the lease is not held by their owner any more) → orphaned (reason lease-expired), never
       replayed (spec 004: 租约过期的在途作业标为 orphaned);
    2. queued jobs past their ``completion.maxQueueMs`` → timed_out;
    3. queued jobs idle for COVEL_JOB_REQUEUE_AFTER_SECONDS (their message was lost: a restarted
       in-process worker, a Redis restart, a send the broker refused) are sent to the queue again
       (spec: 重启后继续认领合法的 queued 作业): the oldest of each (session, runtime) whose lease
       nobody holds, once per idle window — a compare-and-set on ``updated_at`` marks it sent, so
       concurrent reapers send it once and the next send waits another window. A second delivery
       finds the job claimed (or its runtime's lease taken) and exits.
    Returns how many jobs changed status.
    """
    now = now or timezone.now()
    changed = 0
    expired = RuntimeJob.objects.filter(status__in=S.IN_FLIGHT, lease_expires_at__lt=now).values_list(
        "pk", "status", "fencing_token", "lease_owner", "session_id", "runtime_id")
    for pk, status, token, owner, session_id, runtime_id in list(expired):
        holder = leases.lease_holder(_lease_name(session_id, runtime_id))
        if holder is not None and owner.startswith(holder + "@"):
            continue  # its worker still renews the lease; the database write is just late
        if _transition(str(pk), (status,), S.ORPHANED, token=token, reason=S.REASON_LEASE_EXPIRED):
            changed += 1
            metrics.lease_expired("runtime_job")
            logger.warning("runtime job %s orphaned: its lease expired while %s", pk, status)
            _siblings_kick(str(session_id), runtime_id)
    queued = RuntimeJob.objects.filter(status=S.QUEUED, payload__completion__has_key="maxQueueMs").values_list(
        "pk", "created_at", "payload__completion__maxQueueMs")
    for pk, created_at, max_queue_ms in list(queued):
        if isinstance(max_queue_ms, int) and created_at + timedelta(milliseconds=max_queue_ms) < now:
            if _transition(str(pk), (S.QUEUED,), S.TIMED_OUT, reason=S.REASON_QUEUE_TIMEOUT):
                changed += 1
    idle_before = now - timedelta(seconds=settings.COVEL_JOB_REQUEUE_AFTER_SECONDS)
    stuck = (RuntimeJob.objects.filter(status=S.QUEUED, updated_at__lt=idle_before)
             .order_by("created_at", "id").values_list("pk", "session_id", "runtime_id", "updated_at"))
    seen: set[tuple[str, str]] = set()
    for pk, session_id, runtime_id, updated_at in list(stuck):
        key = (str(session_id), runtime_id)
        if key in seen or leases.lease_holder(_lease_name(*key)) is not None:
            continue
        seen.add(key)
        if not RuntimeJob.objects.filter(pk=pk, status=S.QUEUED, updated_at=updated_at).update(updated_at=now):
            continue  # claimed, cancelled or re-sent meanwhile
        if _job_send(str(pk)):
            logger.warning("runtime job %s: queued for %ss with no worker; its task was sent again", pk,
                           settings.COVEL_JOB_REQUEUE_AFTER_SECONDS)
        else:
            RuntimeJob.objects.filter(pk=pk, status=S.QUEUED, updated_at=now).update(updated_at=updated_at)
    return changed


_last_reap = 0.0
_reap_guard = threading.Lock()


def jobs_reap_maybe() -> int:
    """Embedded shape (in-process worker, no beat): run ``jobs_reap`` at most once per
    COVEL_JOB_REAP_INTERVAL_SECONDS per process. Does nothing when the Celery beat reaps."""
    global _last_reap
    if not settings.COVEL_INPROCESS_WORKER:
        return 0
    with _reap_guard:
        if time.monotonic() - _last_reap < settings.COVEL_JOB_REAP_INTERVAL_SECONDS:
            return 0
        _last_reap = time.monotonic()
    try:
        return jobs_reap()
    except Exception:
        logger.exception("runtime job reaping failed")
        return 0
