"""Operators see the truth and background jobs keep their contract (issue 23), on real processes: one
daphne web process over PostgreSQL + Redis, first with no Celery worker at all, then with two.

1. No worker: ``GET /api/health`` is 503 ``degraded`` with ``checks.workers`` naming every queue;
   an action's stream ends by itself with ``error.occurred`` ``no_worker_available`` (retryable)
   within the pickup bound, and ``/execution`` offers the retry.
2. Workers started: health ok; the retried setup runs.
3. No credential (spec 004 §后台作业用谁的模型凭据): the community test plugin ``tally`` (a detached
   post-turn function runtime, trusted by its install receipt) has its model routed, through the
   session's runtimeModelOverrides, to a slot that needs a key; the server has none and does not
   confirm its own services. Its job stays ``queued`` (never claimed, across re-sends) until the
   next request brings the player's key; then it and the new job run.
4. ``maxExecutionMs``: ``tally-limited`` (1.5 s) asked to sleep 4 s ends ``timed_out``, reason
   ``execution-timeout``, nothing committed; its Celery task is a failed task — in Flower (started
   as README says, ``celery -A covel flower``) and on ``/metrics``.
5. SIGTERM to the worker running a job: the warm shutdown puts the job back in the queue (same
   jobId) and the other worker commits it exactly once.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from plugins_app.trust import receipt_write
from tests.covel.metrics_support import sample
from tests.e2e.client import Api
from tests.e2e.cluster import Proc, cluster_new, free_port, run_dir_remove
from tests.e2e.play import PlayedSession, expect_committed, session_setup

pytestmark = pytest.mark.e2e

WORLD = "hollow-reach-light"
PICKUP_SECONDS = 5
LIMIT_MS = 1500
PLAYER_KEY = "sk-player-e2e"
KEYS_HEADER = {"X-Provider-Keys": base64.b64encode(json.dumps({"my-lab": PLAYER_KEY}).encode()).decode()}

OPERATOR_ENV = {
    "COVEL_TRUSTED_SOURCES": "covel-e2e",
    "COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES": "0",
    "COVEL_EXECUTION_PICKUP_SECONDS": str(PICKUP_SECONDS),
    "COVEL_WORKER_CHECK_CACHE_SECONDS": "2",
    "COVEL_JOB_REQUEUE_AFTER_SECONDS": "3",
    "COVEL_JOB_REAP_INTERVAL_SECONDS": "1",
}

MANIFEST = """\
---
id: {plugin_id}
kind: plugin
version: 1.0.0
description: Counts turns in the background (e2e test plugin).
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
    detached: {detached}
  function:
    handler: ./handler.py
---
Tally.
"""

HANDLER = textwrap.dedent(
    """\
    import os
    import re
    import time


    def handle(ctx):
        # "sleep <seconds>" in the player's message makes the job slow.
        found = re.search(r"sleep (\\d+(?:\\.\\d+)?)", ctx.player_message or "")
        if found:
            time.sleep(float(found.group(1)))
        count = ctx.plugin_data.get("stats", "turns", 0) + 1
        ctx.plugin_data.set("stats", "turns", count)
        return {"count": count, "pid": os.getpid()}
    """
)

LLM_TOML = (
    '[covel.story]\nprovider = "scripted"\n\n[covel.plugin]\nprovider = "scripted"\n\n'
    '[covel.memory]\nprovider = "scripted"\n\n'
    # Only the tally runtimes are routed here (runtimeModelOverrides); they never call it.
    '[covel.keyed]\nprovider = "my-lab"\nmodel = "lab-1"\nbaseUrl = "http://127.0.0.1:9/v1"\n'
)


def _plugin_write(home: Path, plugin_id: str, detached: str = "true") -> None:
    root = home / "plugins" / plugin_id
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(MANIFEST.format(plugin_id=plugin_id, detached=detached), encoding="utf-8")
    (root / "handler.py").write_text(HANDLER, encoding="utf-8")
    receipt_write(root, "covel-e2e/tally")  # a trusted, verified source: no code approval needed


@pytest.fixture(scope="module")
def ops():
    cluster = cluster_new(extra_env=OPERATOR_ENV)
    _plugin_write(cluster.covel_home, "tally")
    _plugin_write(cluster.covel_home, "tally-limited", detached=f"{{maxExecutionMs: {LIMIT_MS}}}")
    (cluster.covel_home / "llm.toml").write_text(LLM_TOML, encoding="utf-8")
    try:
        cluster.start(web_count=1, worker_count=0)
    except BaseException:
        run_dir_remove(cluster)
        raise
    port = free_port()
    # Flower's JSON API answers without auth only when told so (FLOWER_UNAUTHENTICATED_API).
    flower = cluster._spawn(Proc(name="flower", argv=[sys.executable, "-m", "celery", "-A", "covel", "flower",
                                                       f"--port={port}", "--address=127.0.0.1"],
                                 log_path=cluster.logs_dir / "flower.log", port=port,
                                 env={"FLOWER_UNAUTHENTICATED_API": "true"}))
    cluster.flower = flower
    try:
        yield cluster
    finally:
        flower.popen.send_signal(signal.SIGTERM)
        try:
            flower.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(flower.pid, signal.SIGKILL)
        problems = cluster.stop(check=False)
        if problems:
            print(cluster.logs())
        run_dir_remove(cluster)
        assert not problems, problems


@pytest.fixture(scope="module")
def state():
    return {}


def _session(api: Api, plugin_id: str):
    plan = api.json("GET", f"/api/worlds/{WORLD}/plugin-plan")
    created = api.json("POST", "/api/sessions", {"worldId": WORLD, "plugins": [*plan["defaultPluginIds"], plugin_id]},
                       expect=201)
    session_api = api.with_token(created["ownerToken"])
    session_api.json("PATCH", f"/api/sessions/{created['id']}", {"runtimeModelOverrides": {plugin_id: "keyed"}})
    return created["id"], session_api


def _jobs(api: Api, session_id: str) -> list[dict]:
    return api.json("GET", f"/api/sessions/{session_id}/runtime-jobs")["items"]


def _wait(predicate, what: str, timeout: float = 60.0, *, describe=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{describe()}" if describe else ""))


def _turn_id(result) -> str:
    return result.of_type("execution.completed")[0]["payload"]["turnId"]


def _count(api: Api, session_id: str, plugin_id: str):
    response = api.get(f"/api/sessions/{session_id}/plugin-data/{plugin_id}/stats/turns")
    return response.json()["value"] if response.status_code == 200 else None


def _job_statuses(cluster, job_id: str) -> list[str]:
    with cluster.db() as conn:
        rows = conn.execute("SELECT payload->>'status' FROM turns_sessionevent WHERE type = 'job-status.updated' "
                            "AND payload->>'jobId' = %s ORDER BY seq", (job_id,)).fetchall()
    return [row[0] for row in rows]


def test_1_without_workers_health_degrades_and_an_action_stream_ends_with_its_code(ops, state):
    web = Api(ops.base_urls[0])
    # given no worker consumes any queue
    health = httpx.get(f"{ops.base_urls[0]}/api/health", timeout=10)
    assert health.status_code == 503, health.text
    body = health.json()
    assert body["status"] == "degraded" and body["code"] == "service_degraded"
    assert body["checks"]["workers"]["missing"] == ["turns", "jobs", "media", "worldgen"], body["checks"]
    assert body["checks"]["database"] == {"ok": True} and body["checks"]["redis"] == {"ok": True}
    # when a player starts a session
    session_id, api = _session(web, "tally")
    started = time.monotonic()
    result = api.action("start_session", session_id, {}, read_timeout_seconds=60)
    waited = time.monotonic() - started
    # then the stream ended by itself with the code, nothing ran, and the execution is retryable
    assert result.status_code == 200, result.describe()
    assert [f["type"] for f in result.frames] == ["error.occurred", "execution.completed"], result.describe()
    error = result.frames[0]["payload"]
    assert error["code"] == "no_worker_available" and error["retryable"] is True, error
    assert result.frames[1]["payload"]["committed"] is False
    # bound: the pickup window, the relay's 5 s check and the 2 s worker-check cache
    assert PICKUP_SECONDS <= waited <= PICKUP_SECONDS + 5 + 2 + 5, waited
    status = api.json("GET", f"/api/sessions/{session_id}/execution")
    assert status["state"] == "interrupted" and status["retry"]["type"] == "start_session", status
    state["session"] = (session_id, api)


def test_2_with_workers_health_is_ok_and_the_retried_setup_runs(ops, state):
    # given two workers started
    for _ in range(2):
        ops.worker_wait_ready(ops.worker_start())
    # then health says ok once the web process sees them consume every queue
    last: list[str] = []

    def healthy():
        response = httpx.get(f"{ops.base_urls[0]}/api/health", timeout=10)
        last[:] = [response.text]
        return response.status_code == 200 and response.json()
    try:
        body = _wait(healthy, "health ok with workers", timeout=30)
    except AssertionError:
        raise AssertionError(f"health never ok: {last}\n{ops.logs()}")
    assert all(len(names) == 2 for names in body["checks"]["workers"]["queues"].values()), body["checks"]
    # and the setup that found no worker runs when retried
    session_id, api = state["session"]
    played = PlayedSession(id=session_id, token=api.token, api=api, created={})
    session_setup(played)
    state["played"] = played


def test_3_a_job_stays_queued_without_credentials_until_a_request_brings_them(ops, state):
    played = state["played"]
    api = played.api
    # given a turn without provider keys whose tally job needs the keyed slot (the opening turn of the
    # setup left one already)
    known = {j["jobId"] for j in _jobs(api, played.id)}
    expect_committed(api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "I look around."}]}))
    first = _wait(lambda: [j for j in _jobs(api, played.id) if j["jobId"] not in known], "the tally job")[0]
    # when the workers have had it (and the re-sender has sent it again, every 3 s)
    time.sleep(8)
    # then every job is still queued, never claimed, nothing written
    waiting = _jobs(api, played.id)
    assert all(j["status"] == "queued" and j["attempt"] == 0 for j in waiting), waiting
    assert _job_statuses(ops, first["jobId"]) == ["queued"]
    assert _count(api, played.id, "tally") is None
    # when the next turn carries the player's key
    expect_committed(api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "I wait."}]},
                                headers=KEYS_HEADER))
    # then the waiting jobs and the new one run with it and commit once each
    expected = len(waiting) + 1
    _wait(lambda: [j["status"] for j in _jobs(api, played.id)] == ["succeeded"] * expected, "every job to succeed",
          describe=lambda: f"{json.dumps(_jobs(api, played.id), indent=1)}\n{ops.logs()}")
    assert _count(api, played.id, "tally") == expected
    assert all(j["attempt"] == 1 for j in _jobs(api, played.id))
    with ops.db() as conn:
        stored = conn.execute("SELECT count(*) FROM jobs_runtimejob WHERE payload::text LIKE %s",
                              (f"%{PLAYER_KEY}%",)).fetchone()[0]
    assert stored == 0  # the key never reached the job rows


def test_4_a_job_past_max_execution_ms_times_out_and_its_task_fails(ops):
    web = Api(ops.base_urls[0])
    session_id, api = _session(web, "tally-limited")
    played = PlayedSession(id=session_id, token=api.token, api=api, created={})
    session_setup(played)
    # when a turn asks the limited runtime to run 4 s
    turn_id = _turn_id(expect_committed(api.action("submit_actions", session_id, {"actions": [
        {"kind": "say", "text": "sleep 4"}]}, headers=KEYS_HEADER)))
    job = _wait(lambda: next((j for j in _jobs(api, session_id) if j["origin"]["sourceTurnId"] == turn_id
                              and j["status"] not in ("queued", "claimed", "running")), None), "the limited job to end")
    # then it ended timed_out with the spec's reason, and wrote nothing
    assert job["status"] == "timed_out" and job["reason"] == "execution-timeout", job
    assert job["maxExecutionMs"] == LIMIT_MS
    # (the setup's opening job, which only waited for the key, ran and wrote its one count)
    _wait(lambda: _count(api, session_id, "tally-limited") == 1, "the opening's job to commit its count")
    # and its Celery task is a failed task (the worker-side figures, read through the web's /metrics)
    def task_failed():
        text = httpx.get(f"{ops.base_urls[0]}/metrics", timeout=10).text
        return sample(text, "covel_celery_tasks_total", task="jobs.run_runtime_job", state="failed") >= 1
    _wait(task_failed, "the failed job task on /metrics", timeout=20)

    def flower_failures():
        try:
            tasks = httpx.get(f"http://127.0.0.1:{ops.flower.port}/api/tasks",
                              params={"taskname": "jobs.run_runtime_job", "state": "FAILURE"}, timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return None
        return [t for t in tasks.values() if job["jobId"] in str(t.get("args"))]
    failed = _wait(flower_failures, "Flower to show the job's task as FAILURE", timeout=30,
                   describe=lambda: ops.flower.log_tail())
    assert "JobFailed" in str(failed[0].get("exception")), failed


def _worker_of_pid(cluster, pid: int):
    parent = int(Path(f"/proc/{pid}/status").read_text().split("PPid:")[1].split()[0])
    return next(proc for proc in cluster.workers if proc.pid in (pid, parent))


def test_5_sigterm_requeues_the_running_job_and_another_worker_commits_it_once(ops, state):
    played = state["played"]
    api = played.api
    before = _count(api, played.id, "tally")
    # given a slow job running on one worker
    turn_id = _turn_id(expect_committed(api.action("submit_actions", played.id, {"actions": [
        {"kind": "say", "text": "sleep 5"}]}, headers=KEYS_HEADER)))
    job = _wait(lambda: next((j for j in _jobs(api, played.id) if j["origin"]["sourceTurnId"] == turn_id
                              and j["status"] == "running"), None), "the job to run")
    with ops.db() as conn:
        owner = conn.execute("SELECT lease_owner FROM jobs_runtimejob WHERE id = %s", (job["jobId"],)).fetchone()[0]
    victim = _worker_of_pid(ops, int(owner.split("@", 1)[1].split(":")[1]))
    # when that worker gets SIGTERM (warm shutdown) mid-job
    shutdown_seconds = ops.worker_terminate(victim)
    # then the job went back to the queue and the other worker committed it, once
    done = _wait(lambda: next((j for j in _jobs(api, played.id) if j["jobId"] == job["jobId"]
                               and j["status"] not in ("queued", "claimed", "running", "committing")), None),
                 "the requeued job to finish", timeout=90)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    assert _job_statuses(ops, job["jobId"]) == ["queued", "claimed", "running", "queued", "claimed", "running",
                                                "committing", "succeeded"]
    assert _count(api, played.id, "tally") == before + 1
    assert shutdown_seconds < 30
    ops.worker_wait_ready(ops.worker_start())  # back to two workers
