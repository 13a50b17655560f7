"""Fault injection (issue 13): the hosted cluster on its OWN Redis and PostgreSQL servers
(tests/e2e/cluster.py private stores), with action streams and event streams open while a store
restarts or stops, a worker is SIGKILLed or SIGTERMed, or a web process is SIGKILLed.

After each fault: every action stream ended within the stated bound (with its stored final frame,
a retryable ``stream_interrupted``, or — its web process killed — a cut connection); every accepted
turn committed exactly once or is reported retryable (``failed``/``interrupted`` with a retry
descriptor), consistent with its stream; a request refused while Redis was down got 503 and left
nothing; every event subscriber, reconnecting with its last id as a client does, received every
logged event once, in order; no worker, beat or web process is left dead (a killed process is
restarted as a supervisor would) and a new turn commits. The faults × outcomes table is printed in
the run's ``covel e2e figures``.

Timing knobs of this cluster (FAULT_ENV): queued turns are re-sent after 5 s, streams give up on a
dead database after 10 s, a silent worker counts as dead after 15 s, the scripted model streams
with a delay per piece so that faults land mid-turn.
"""
from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.client import Api
from tests.e2e.faults import (
    Outcome, TurnRun, Watch, endings_text, executions_by_status, session_head, turns_settle, wait_running, watch_check,
)
from tests.e2e.play import PlayedSession, expect_committed, say, session_create, session_setup

BUILTIN_WORLD = "hollow-reach-light"
SESSIONS = 6
RESEND_AFTER_SECONDS = 5
DB_OUTAGE_SECONDS = 10
STALE_SECONDS = 15
FAULT_ENV = {
    "COVEL_EXECUTION_RESEND_AFTER_SECONDS": str(RESEND_AFTER_SECONDS),
    "COVEL_SSE_DB_OUTAGE_SECONDS": str(DB_OUTAGE_SECONDS),
    "COVEL_EXECUTION_STALE_SECONDS": str(STALE_SECONDS),
    "COVEL_SSE_KEEPALIVE_SECONDS": "2",
    "COVEL_EVENT_POLL_MS": "1000",
    "COVEL_SCRIPTED_DELTA_DELAY_MS": "15",
}
#: Stated bounds: how long after the fault every action stream has ended.
BOUND_REDIS_RESTART = 60
BOUND_PG_RESTART = STALE_SECONDS + 45
BOUND_PG_STOP = DB_OUTAGE_SECONDS + 10
BOUND_WORKER_KILL = STALE_SECONDS + 30
BOUND_WORKER_TERM = 60
BOUND_WEB_KILL = 60

OUTCOMES: list[Outcome] = []


@pytest.fixture(scope="module")
def fault_cluster(stalling_model, figures):
    """2 web + 2 workers + beat on a private redis-server and a private PostgreSQL cluster."""
    from tests.e2e.cluster import cluster_new, run_dir_remove
    from tests.e2e.fakes import llm_toml_text

    started = cluster_new(private_stores=True, extra_env=FAULT_ENV)
    t0 = time.monotonic()
    try:
        started.covel_home.mkdir(parents=True, exist_ok=True)
        (started.covel_home / "llm.toml").write_text(llm_toml_text(stalling_model.base_url), encoding="utf-8")
        started.start()  # on failure it tears down what it started (private stores included)
    except BaseException:
        started.private_pg.remove()
        run_dir_remove(started)
        raise
    figures.append(f"faults: private cluster (redis :{started.private_redis.port}, postgres :{started.private_pg.port}) "
                   f"up in {time.monotonic() - t0:.1f} s")
    try:
        yield started
    finally:
        figures.append("faults × outcomes (every stream ended within its bound; exactly-once checked in the database):")
        figures.append(Outcome.HEADER)
        figures.append("|" + "---|" * 7)
        figures.extend(outcome.row() for outcome in OUTCOMES)
        problems = started.stop(check=False)
        if not problems:
            run_dir_remove(started)
        else:
            shutil.copytree(started.private_pg.root, started.run_dir / "pg", dirs_exist_ok=True, ignore_dangling_symlinks=True)
        assert not problems, f"unclean teardown (logs kept in {started.run_dir}): {problems}"


@pytest.fixture(scope="module")
def sessions(fault_cluster) -> list[PlayedSession]:
    """SESSIONS + 1 sessions in play (setup and opening done), created on alternating web processes."""
    urls = fault_cluster.base_urls

    def make(index: int) -> PlayedSession:
        api = Api(urls[index % 2])
        played = session_create(api, BUILTIN_WORLD)
        session_setup(played, player_name=f"Fault Tester {index}")
        return played

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(make, range(SESSIONS + 1)))


def _turns(cluster, played: list[PlayedSession], label: str) -> list[TurnRun]:
    urls = cluster.base_urls
    return [TurnRun(p, urls[i % 2], f"{label}: player {i} studies the lamp's brass collar.").start()
            for i, p in enumerate(played)]


def _watches(cluster, played: list[PlayedSession]) -> tuple[list[Watch], list[int]]:
    watches, starts = [], []
    for i, p in enumerate(played):
        epoch, seq = session_head(cluster, p.id)
        watches.append(Watch(cluster.base_urls, p, f"{epoch}:{seq}", index=i + 1))
        starts.append(seq)
    return watches, starts


def _workers_alive(cluster) -> str:
    """Every worker, the beat and every web process alive; every worker answers on the broker."""
    dead = [p.name for p in [*cluster.workers, *cluster.web, cluster.beat] if not p.is_running()]
    assert not dead, f"dead processes: {dead}\n{cluster.logs()}"
    expected = {cluster.worker_node_name(p) for p in cluster.workers}
    deadline = time.monotonic() + 30
    answered: set[str] = set()
    while time.monotonic() < deadline:
        answered = cluster.worker_ping()
        if expected <= answered:
            break
        time.sleep(1)
    assert expected <= answered, f"workers not answering on the broker: {expected - answered}\n{cluster.logs()}"
    return f"{len(cluster.workers)}/{len(cluster.workers)} alive, ping ok"


def _after_checks(cluster, outcome: Outcome, played: PlayedSession, watches: list[Watch], starts: list[int]) -> None:
    for watch, start in zip(watches, starts):
        watch.reconnect_if_ended(prefer=0)
    # a new turn commits on the healed cluster (a worker, its lock connections, the queue)
    expect_committed(say(played, "After the fault I check that the lamp still turns."))
    for watch, start in zip(watches, starts):
        watch_check(cluster, watch, start)
    endings: dict[str, int] = {}
    for watch in watches:
        for ending, _ in watch.endings:
            endings[f"{ending} → reconnected"] = endings.get(f"{ending} → reconnected", 0) + 1
        watch.close()
    outcome.event_endings = ", ".join(
        [f"{n} {kind}" for kind, n in endings.items()] + [f"all {len(watches)} received every event once"])
    outcome.workers_after = _workers_alive(cluster)


def _record(outcome: Outcome, runs: list[TurnRun], settled) -> None:
    outcome.action_streams = len(runs)
    outcome.stream_endings = endings_text(settled.endings)
    outcome.max_stream_seconds = settled.max_stream_seconds
    outcome.accepted = sum(1 for run in runs if run.accepted)
    outcome.committed_once = settled.committed_once
    outcome.retryable = settled.retryable
    outcome.refused = settled.refused


def test_redis_restart(fault_cluster, sessions):
    cluster = fault_cluster
    outcome = Outcome("Redis restart (down ~3 s, queue lost)", bound_seconds=BOUND_REDIS_RESTART)
    OUTCOMES.append(outcome)
    played = sessions[:SESSIONS]
    watches, starts = _watches(cluster, played)
    outcome.event_streams = len(watches)
    # given: turns on every session, 4 running in the workers and the rest queued in Redis
    runs = _turns(cluster, played, "redis")
    wait_running(cluster, runs, at_least=3)
    # when: Redis stops (nothing persisted: its queue is gone), a turn is sent meanwhile, it restarts
    fault_at = time.monotonic()
    cluster.private_redis.stop()
    queued = sum(1 for status in executions_by_status(cluster, runs).values() if status == "queued")
    refused = TurnRun(sessions[SESSIONS], cluster.base_urls[0], "redis: sent while Redis is down").start()
    refused.join(time.monotonic() + 20)
    time.sleep(max(0.0, fault_at + 3 - time.monotonic()))
    cluster.private_redis.start()
    # then
    assert refused.ending == "503 service_unavailable", refused.result and refused.result.describe()
    settled = turns_settle(cluster, [*runs, refused], fault_at=fault_at, stream_bound_seconds=BOUND_REDIS_RESTART)
    _record(outcome, [*runs, refused], settled)
    outcome.note = f"({queued} queued when Redis stopped: lost, re-sent, ran once)"
    assert settled.committed_once == len(runs), settled  # lost queued turns were re-sent and ran once
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True


def test_postgres_restart(fault_cluster, sessions):
    cluster = fault_cluster
    outcome = Outcome("PostgreSQL restart (fast)", bound_seconds=BOUND_PG_RESTART)
    OUTCOMES.append(outcome)
    played = sessions[:4]
    watches, starts = _watches(cluster, played)
    outcome.event_streams = len(watches)
    # given: turns in the middle of running
    runs = _turns(cluster, played, "pg-restart")
    wait_running(cluster, runs, at_least=2)
    # when
    fault_at = time.monotonic()
    cluster.private_pg.restart()
    # then
    settled = turns_settle(cluster, runs, fault_at=fault_at, stream_bound_seconds=BOUND_PG_RESTART)
    _record(outcome, runs, settled)
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True


def test_postgres_stop(fault_cluster, sessions):
    cluster = fault_cluster
    down_seconds = DB_OUTAGE_SECONDS + 6
    outcome = Outcome(f"PostgreSQL stop ({down_seconds} s)", bound_seconds=BOUND_PG_STOP)
    OUTCOMES.append(outcome)
    played = sessions[:4]
    watches, starts = _watches(cluster, played)
    outcome.event_streams = len(watches)
    runs = _turns(cluster, played, "pg-stop")
    wait_running(cluster, runs, at_least=2)
    # when: the database is down for longer than the streams wait for it
    fault_at = time.monotonic()
    cluster.private_pg.stop()
    try:
        ended_in_time = all(run.join(fault_at + BOUND_PG_STOP) for run in runs)
        event_deadline = fault_at + BOUND_PG_STOP
        while time.monotonic() < event_deadline and any(w.ended() is None for w in watches):
            time.sleep(0.2)
        events_ended = [w.ended() for w in watches]
        time.sleep(max(0.0, fault_at + down_seconds - time.monotonic()))
    finally:
        cluster.private_pg.start()
    # then: every stream ended while the database was still down, with a retryable error
    assert ended_in_time, [(r.request_id, r.ending) for r in runs]
    assert all(e == "error.occurred" for e in events_ended), events_ended
    settled = turns_settle(cluster, runs, fault_at=fault_at, stream_bound_seconds=BOUND_PG_STOP)
    _record(outcome, runs, settled)
    assert set(settled.endings) <= {"stream_interrupted", "committed", "not committed"}, settled.endings
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True


def _worker_of(cluster, runs: list[TurnRun]):
    """The worker process running one of ``runs`` (from the execution's ``claimed_by``)."""
    import os

    ids = [run.request_id for run in runs]
    with cluster.db() as conn:
        rows = conn.execute("SELECT claimed_by FROM turns_execution WHERE request_id = ANY(%s) AND status = 'running'",
                            (ids,)).fetchall()
    for (claimed_by,) in rows:
        try:
            group = os.getpgid(int(claimed_by.split(":")[1]))
        except (ProcessLookupError, ValueError, IndexError):
            continue
        for proc in cluster.workers:
            if proc.pid == group:
                return proc
    raise AssertionError(f"no running execution on one of our workers: {rows}")


def test_worker_sigkill(fault_cluster, sessions):
    cluster = fault_cluster
    outcome = Outcome("worker SIGKILL", bound_seconds=BOUND_WORKER_KILL)
    OUTCOMES.append(outcome)
    played = sessions[:4]
    watches, starts = _watches(cluster, played)
    outcome.event_streams = len(watches)
    runs = _turns(cluster, played, "worker-kill")
    wait_running(cluster, runs, at_least=2)
    victim = _worker_of(cluster, runs)
    # when: that worker and its pool children are killed, and a supervisor starts a new one
    fault_at = time.monotonic()
    cluster.worker_kill(victim)
    cluster.worker_wait_ready(cluster.worker_start())
    # then
    settled = turns_settle(cluster, runs, fault_at=fault_at, stream_bound_seconds=BOUND_WORKER_KILL)
    _record(outcome, runs, settled)
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True


def test_worker_sigterm(fault_cluster, sessions):
    cluster = fault_cluster
    outcome = Outcome("worker SIGTERM (warm shutdown)", bound_seconds=BOUND_WORKER_TERM)
    OUTCOMES.append(outcome)
    played = sessions[:4]
    watches, starts = _watches(cluster, played)
    outcome.event_streams = len(watches)
    runs = _turns(cluster, played, "worker-term")
    wait_running(cluster, runs, at_least=2)
    victim = _worker_of(cluster, runs)
    # when: it is asked to stop; it finishes what it runs, then a supervisor starts a new one
    fault_at = time.monotonic()
    shutdown_seconds = cluster.worker_terminate(victim, timeout_seconds=BOUND_WORKER_TERM)
    cluster.worker_wait_ready(cluster.worker_start())
    # then: nothing was cut short: every turn committed once
    settled = turns_settle(cluster, runs, fault_at=fault_at, stream_bound_seconds=BOUND_WORKER_TERM)
    _record(outcome, runs, settled)
    outcome.note = f"(warm shutdown {shutdown_seconds:.1f} s)"
    assert settled.committed_once == len(runs), settled
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True


def test_web_sigkill(fault_cluster, sessions):
    cluster = fault_cluster
    outcome = Outcome("web process SIGKILL", bound_seconds=BOUND_WEB_KILL)
    OUTCOMES.append(outcome)
    played = sessions[:4]
    watches, starts = _watches(cluster, played)  # on alternating web processes
    outcome.event_streams = len(watches)
    runs = _turns(cluster, played, "web-kill")  # streams on alternating web processes
    wait_running(cluster, runs, at_least=2)
    # when: web #1 is killed; its clients reconnect to web #2; a supervisor restarts web #1
    fault_at = time.monotonic()
    cluster.web_kill(0)
    for watch in watches:
        deadline = time.monotonic() + 10
        while watch.index % 2 == 0 and watch.ended() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        watch.reconnect_if_ended(prefer=1)
    # then: the streams on web #1 were cut at once, the others go on
    for run in runs:
        if run.base_url == cluster.base_urls[0]:
            assert run.join(time.monotonic() + 10) and run.ending == "cut", (run.request_id, run.ending)
    cut_seconds = max((run.ended_at - fault_at for run in runs if run.ending == "cut"), default=0.0)
    # when: their clients send the same request (same requestId) to web #2: a recorded one replays,
    # one web #1 never recorded runs now; and a supervisor restarts web #1
    retried = [run.resend(cluster.base_urls[1]) if run.ending == "cut" else run for run in runs]
    cluster.web_restart(0)
    # then: every turn committed once, every stream (the retried ones) ended with its outcome
    settled = turns_settle(cluster, retried, fault_at=fault_at, stream_bound_seconds=BOUND_WEB_KILL)
    _record(outcome, runs, settled)
    cut = sum(1 for run in runs if run.ending == "cut")
    outcome.stream_endings = f"{cut} cut ({cut_seconds:.1f} s), re-sent: " + outcome.stream_endings
    assert settled.committed_once == len(runs), settled
    _after_checks(cluster, outcome, played[0], watches, starts)
    outcome.passed = True
