"""Benchmark: hosted throughput of full-game turns on a real cluster (issue 18: ≥ 15 turns/s on this
machine, ≤ 130 ms CPU per turn across all processes, every turn committed once, no session_busy),
beside an anchor measured in the same run.

Cluster: the hosted shape exactly as tests/e2e/cluster.py starts it (2 daphne web + 2 Celery workers
with their prefork children + the one beat) on a database of its own (``covel_helper_tp_<pid>`` on
the PostgreSQL server at COVEL_E2E_PG_URL) and, by default, a ``redis-server`` of its own on a free
loopback port (``--redis shared`` uses a Redis database 11-12 of the shared server instead; its CPU
then includes other clients'). N sessions of the builtin world (hollow-reach-light, default plugins,
the offline scripted model) are created and set up first, untimed; then all of them play T ``say``
turns at once through the real HTTP API (POST /api/actions read until ``execution.completed``),
each session alternating between the two web processes.

Printed for the timed phase (the first turn sent → the last ``execution.completed``, CPU read until
the workers went idle again, so follow-up tasks of the turns are included):
  turns/s, p50/p95 turn latency (request sent → execution.completed);
  CPU seconds per committed turn of each process kind, from /proc/<pid>/stat utime+stime sampled
  every 0.25 s (a pid first seen during the phase counts from 0): each daphne, each Celery worker
  with its pool children (the process group), beat, the PostgreSQL backends of the cluster's
  database (pg_stat_activity; connections opened and commits per turn from pg_stat_database), and
  redis-server (private only); the machine's idle CPU of those processes is printed too.
Anchor (same run, after the cluster phase): the same kind of turns played one after another in one
process with the in-process worker (what tests/bench/turn_cpu.py --shape hosted measures: web
request, stream relay, worker, runtimes, all in one process; its PostgreSQL backends measured the
same way as the cluster's). The cluster's Python CPU per turn is printed as a multiple of it.
Cluster anchor (same cluster, after the timed rounds): one session's ``--serial-turns`` turns one
after another, each waited until the workers are idle: the cluster's own cost of a turn without
queueing or concurrency (what the timed phase adds on top is contention and interleaving).

Checks: every action stream committed exactly once (one ``execution.completed`` with committed
true, one turn id), no ``session_busy`` anywhere, and in the database every session has T completed
player turns, each turn id committed once and each requestId one execution. A failed check exits 1.

Run: .venv/bin/python tests/bench/cluster_throughput.py [--sessions 20] [--turns 5] [--repeat 1]
     [--anchor-turns 20] [--serial-turns 10] [--redis private|shared] [--profile DIR]
``--profile DIR``: py-spy (``--py-spy PATH``, default /tmp/pyspy-venv/bin/py-spy, a venv of its own)
records each web and worker process during the timed phase; collapsed stacks land in DIR.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TARGET_TURNS_PER_SECOND = 15
TARGET_CPU_MS = 130
BUILTIN_WORLD = "hollow-reach-light"
SESSION_BUSY = "session_busy"
DB_PREFIX = "covel_helper_tp"
SAMPLE_SECONDS = 0.25
CLK_TCK = os.sysconf("SC_CLK_TCK")
IDLE_SETTLE_SECONDS = 1.0
IDLE_CPU_FRACTION = 0.05


# --------------------------------------------------------------------------- CPU accounting
def _cpu_seconds(pid: int) -> float | None:
    """utime+stime of ``pid`` (all its threads) in seconds; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


_scan: dict[str, object] = {"at": 0.0, "groups": {}}
_scan_lock = threading.Lock()


def _group_pids(pgid: int) -> list[int]:
    """Every live pid whose process group is ``pgid`` (a cluster process and its children). One
    scan of /proc serves every group asked within 0.1 s (this bench's own CPU stays small)."""
    with _scan_lock:
        if time.monotonic() - _scan["at"] > 0.1:
            groups: dict[int, list[int]] = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat", "rb") as handle:
                        text = handle.read().decode()
                except OSError:
                    continue
                fields = text[text.rindex(")") + 2:].split()
                groups.setdefault(int(fields[2]), []).append(int(entry))
            _scan.update(at=time.monotonic(), groups=groups)
        return list(_scan["groups"].get(pgid, []))  # type: ignore[union-attr]


class CpuTracker:
    """Samples the CPU of process kinds every SAMPLE_SECONDS on a thread.

    ``kinds``: {name: callable returning the pids of that kind now}. A pid seen at ``start`` counts
    from its value then, a pid first seen later from 0 (it was born in the phase); a pid that exits
    keeps its last sampled value (at most one sample period of its CPU is lost)."""

    def __init__(self, kinds: dict[str, object]) -> None:
        self.kinds = kinds
        self._base: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _sample(self, *, baseline: bool) -> None:
        for kind, pids_of in self.kinds.items():
            try:
                pids = pids_of()
            except Exception:
                continue
            for pid in pids:
                value = _cpu_seconds(pid)
                if value is None:
                    continue
                key = (kind, pid)
                with self._lock:
                    if key not in self._base:
                        self._base[key] = value if baseline else 0.0
                    self._last[key] = value

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample(baseline=False)

    def start(self) -> None:
        self._sample(baseline=True)
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-tracker")
        self._thread.start()

    def totals(self) -> dict[str, float]:
        """CPU seconds per kind since ``start`` (sampled now)."""
        self._sample(baseline=False)
        out: dict[str, float] = {kind: 0.0 for kind in self.kinds}
        with self._lock:
            for key, last in self._last.items():
                out[key[0]] += last - self._base[key]
        return out

    def stop(self) -> dict[str, float]:
        totals = self.totals()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return totals


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLK_TCK, sum(values[:8]) / CLK_TCK


def _pg_backends(admin_url: str, db_name: str):
    """A callable listing the pids of PostgreSQL backends connected to ``db_name`` (the admin
    connection itself is on database ``postgres``, so it is not counted)."""
    import psycopg

    conn = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    lock = threading.Lock()

    def pids() -> list[int]:
        with lock:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (db_name,)).fetchall()
        return [row[0] for row in rows]

    pids.close = conn.close  # type: ignore[attr-defined]
    return pids


def _pg_db_stats(admin_url: str, db_name: str) -> dict[str, int]:
    """pg_stat_database counters of ``db_name``: sessions (connections opened) and commits."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = %s",
                           (db_name,)).fetchone()
    return {"sessions": int(row[0] or 0), "commits": int(row[1] or 0)} if row else {"sessions": 0, "commits": 0}


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- the cluster phase
def _busy(result) -> bool:
    if result.error and result.error.get("code") == SESSION_BUSY:
        return True
    return any(f["payload"].get("code") == SESSION_BUSY for f in result.of_type("error.occurred"))


def _sessions_prepare(cluster, count: int) -> list:
    """Create and set up ``count`` sessions in parallel (untimed); returns their PlayedSession."""
    from tests.e2e.client import Api
    from tests.e2e.play import session_create, session_setup

    def one(index: int):
        creator = Api(cluster.base_urls[index % 2])
        try:
            played = session_create(creator, BUILTIN_WORLD)
        finally:
            creator.close()
        played.api.close()
        played.api = Api(cluster.base_urls[(index + 1) % 2], played.token)
        session_setup(played, player_name=f"Wren Talloway {index}")
        return played

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def _workers_idle(tracker_kinds: dict[str, object], timeout_seconds: float = 60.0) -> None:
    """Wait until the worker process groups use < IDLE_CPU_FRACTION of a core for IDLE_SETTLE_SECONDS
    (the turns' follow-up tasks are done)."""
    deadline = time.monotonic() + timeout_seconds
    worker_kinds = [pids_of for kind, pids_of in tracker_kinds.items() if kind.startswith("worker")]

    def total() -> float:
        return sum(_cpu_seconds(pid) or 0.0 for pids_of in worker_kinds for pid in pids_of())

    while time.monotonic() < deadline:
        before = total()
        time.sleep(IDLE_SETTLE_SECONDS)
        if total() - before < IDLE_CPU_FRACTION * IDLE_SETTLE_SECONDS:
            return


def _profilers_start(cluster, out_dir: Path, py_spy: str) -> list[subprocess.Popen]:
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    targets = [(p.name, p.pid, False) for p in cluster.web] + [(p.name, p.pid, True) for p in cluster.workers]
    for name, pid, children in targets:
        argv = [py_spy, "record", "--pid", str(pid), "--rate", "50", "--format", "raw", "--nonblocking", "--gil",
                "-o", str(out_dir / f"{name}.txt")]
        if children:
            argv.append("--subprocesses")
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(out_dir / f"{name}.log", "wb")))
    time.sleep(1.0)
    return procs


def _profilers_stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _round(cluster, sessions: list, turns: int, kinds: dict[str, object], admin_url: str,
           profile_dir: Path | None, py_spy: str, round_no: int) -> dict:
    """One timed phase: every session plays ``turns`` say turns at once. Returns the figures."""
    from tests.e2e.client import Api
    from tests.e2e.play import say

    # Idle CPU of the same processes over 2 s (keep-alives, heartbeats, beat), for reference.
    idle = CpuTracker(kinds)
    idle.start()
    time.sleep(2.0)
    idle_totals = {k: v / 2.0 for k, v in idle.stop().items()}

    profilers = _profilers_start(cluster, profile_dir / f"round{round_no}", py_spy) if profile_dir else []
    barrier = threading.Barrier(len(sessions) + 1)
    results: dict[int, list] = {}

    def play(index: int) -> None:
        played = sessions[index]
        apis = [Api(url, played.token) for url in cluster.base_urls]
        out = []
        try:
            barrier.wait()
            for number in range(turns):
                out.append(say(played, f"Player {index} takes step {round_no}.{number + 1} along the cliff path.",
                               api=apis[(index + number) % 2]))
        finally:
            for api in apis:
                api.close()
        results[index] = out

    stats0 = _pg_db_stats(admin_url, cluster.db_name)
    tracker = CpuTracker(kinds)
    threads = [threading.Thread(target=play, args=(i,), daemon=True) for i in range(len(sessions))]
    for thread in threads:
        thread.start()
    tracker.start()
    machine0 = _machine_cpu()
    started = time.monotonic()
    barrier.wait()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    _workers_idle(kinds)
    totals = tracker.stop()
    machine1 = _machine_cpu()
    stats1 = _pg_db_stats(admin_url, cluster.db_name)
    _profilers_stop(profilers)

    flat = [r for i in sorted(results) for r in results[i]]
    problems = []
    if len(results) != len(sessions):
        problems.append(f"{len(sessions) - len(results)} session threads failed")
    for result in flat:
        if _busy(result):
            problems.append("session_busy: " + result.describe()[:600])
            continue
        completed = result.of_type("execution.completed")
        if (result.status_code != 200 or len(completed) != 1 or completed[0]["payload"].get("committed") is not True
                or result.of_type("error.occurred") or len(result.turn_ids) != 1):
            problems.append("not committed once: " + result.describe()[:600])
    return {"wall": wall, "results": results, "flat": flat, "totals": totals, "idle": idle_totals,
            "pg": {k: stats1[k] - stats0[k] for k in stats0}, "problems": problems,
            "machine": (machine1[0] - machine0[0], machine1[1] - machine0[1])}


def _serial_round(cluster, played, turns: int, kinds: dict[str, object]) -> dict:
    """Cluster anchor: ``turns`` say turns of one session one after another on the same cluster
    (no queueing, no concurrency); CPU per process kind per turn, each turn waited until the
    workers are idle again."""
    from tests.e2e.client import Api
    from tests.e2e.play import say

    apis = [Api(url, played.token) for url in cluster.base_urls]
    tracker = CpuTracker(kinds)
    tracker.start()
    flat = []
    try:
        for number in range(turns):
            flat.append(say(played, f"A lone step {number + 1} along the cliff path.", api=apis[number % 2]))
            _workers_idle(kinds)
    finally:
        for api in apis:
            api.close()
    totals = tracker.stop()
    problems = []
    for result in flat:
        completed = result.of_type("execution.completed")
        if (_busy(result) or result.status_code != 200 or len(completed) != 1
                or completed[0]["payload"].get("committed") is not True or len(result.turn_ids) != 1):
            problems.append("serial turn not committed once: " + result.describe()[:600])
    return {"flat": flat, "totals": totals, "problems": problems}


def _db_check(cluster, sessions: list, all_results: dict[int, list], expected_turns: int,
              expected_by_index: dict[int, int] | None = None) -> list[str]:
    """Every session has ``expected_turns`` (or ``expected_by_index[i]``) completed player turns;
    each turn id committed once, each requestId one execution."""
    problems = []
    with cluster.db() as conn:
        for index, played in enumerate(sessions):
            results = all_results.get(index, [])
            expected = (expected_by_index or {}).get(index, expected_turns)
            session = played.api.json("GET", f"/api/sessions/{played.id}")
            if session["completedPlayerTurns"] != expected:
                problems.append(f"session {played.id}: completedPlayerTurns {session['completedPlayerTurns']} "
                                f"!= {expected}")
            turn_ids = [r.turn_ids[0] for r in results if r.turn_ids]
            rows = conn.execute(
                "SELECT turn_id, count(*) FROM turns_turnresult WHERE session_id = %s AND committed "
                "AND player_turn_index IS NOT NULL GROUP BY turn_id", (played.id,)).fetchall()
            if sorted(rows) != sorted((t, 1) for t in turn_ids):
                problems.append(f"session {played.id}: committed turn rows {sorted(rows)} != stream turns {turn_ids}")
            executions = conn.execute(
                "SELECT request_id, count(*) FROM turns_execution WHERE session_id = %s AND request_id = ANY(%s) "
                "GROUP BY request_id", (played.id, [r.request["requestId"] for r in results])).fetchall()
            if sorted(c for _, c in executions) != [1] * len(results):
                problems.append(f"session {played.id}: executions per requestId {executions}")
    return problems


def cluster_phase(args) -> dict:
    """Start the cluster, prepare the sessions, run ``args.repeat`` timed rounds, check, stop."""
    from tests.e2e import cluster as cluster_mod

    os.environ.setdefault("COVEL_E2E_REDIS_DBS", "12,11")
    db_name = f"{DB_PREFIX}_{os.getpid()}"
    cluster = cluster_mod.cluster_new(private_stores=False, extra_env=dict(_env_pairs(args.cluster_env)))
    cluster.db_name = db_name
    if args.redis == "private":
        cluster.private_redis = cluster_mod.PrivateRedis(cluster.run_dir / "redis")
    admin_url = f"{cluster.pg_url.rstrip('/')}/postgres"
    print(f"cluster: starting 2 web + 2 workers (concurrency {cluster.worker_concurrency}) + beat on database "
          f"{db_name}, {'private redis-server' if args.redis == 'private' else 'shared Redis'}", flush=True)
    cluster.start()
    pg_pids = None
    try:
        pg_pids = _pg_backends(admin_url, db_name)
        kinds: dict[str, object] = {}
        for proc in cluster.web:
            kinds[proc.name] = (lambda pgid=proc.pid: _group_pids(pgid))
        for proc in cluster.workers:
            kinds[proc.name] = (lambda pgid=proc.pid: _group_pids(pgid))
        kinds["beat"] = (lambda pgid=cluster.beat.pid: _group_pids(pgid))
        kinds["postgres"] = pg_pids
        kinds["client"] = (lambda pid=os.getpid(): [pid])  # this bench's HTTP clients (not in the sums)
        if cluster.private_redis is not None:
            kinds["redis-server"] = (lambda pid=cluster.private_redis.popen.pid: [pid])
        print(f"cluster: up; preparing {args.sessions} sessions (create + setup, untimed)", flush=True)
        sessions = _sessions_prepare(cluster, args.sessions)
        rounds = []
        problems: list[str] = []
        merged: dict[int, list] = {}
        for round_no in range(1, args.repeat + 1):
            figures = _round(cluster, sessions, args.turns, kinds, admin_url,
                             Path(args.profile) if args.profile else None, args.py_spy, round_no)
            rounds.append(figures)
            problems += figures["problems"]
            for index, results in figures["results"].items():
                merged.setdefault(index, []).extend(results)
            _round_print(figures, round_no, args)
        serial = _serial_round(cluster, sessions[0], args.serial_turns, kinds) if args.serial_turns else None
        if serial is not None:
            problems += serial["problems"]
            merged.setdefault(0, []).extend(serial["flat"])
        expected = {0: args.turns * args.repeat + (args.serial_turns or 0)}
        problems += _db_check(cluster, sessions, merged, args.turns * args.repeat, expected)
        for played in sessions:
            played.api.close()
        return {"rounds": rounds, "problems": problems, "serial": serial}
    finally:
        if pg_pids is not None:
            pg_pids.close()
        leftover = cluster.stop(check=False)
        if leftover:
            print(f"cluster: unclean teardown: {leftover} (logs in {cluster.run_dir})", flush=True)
        else:
            cluster_mod.run_dir_remove(cluster)


def _env_pairs(items: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in items or []:
        key, _, value = item.partition("=")
        pairs.append((key, value))
    return pairs


def _round_print(figures: dict, round_no: int, args) -> None:
    committed = len(figures["flat"]) - len(figures["problems"])
    latencies = [r.latency_seconds * 1000 for r in figures["flat"]]
    tps = len(figures["flat"]) / figures["wall"]
    per_turn = {k: v / max(1, committed) * 1000 for k, v in figures["totals"].items()}
    python_ms = sum(v for k, v in per_turn.items() if k not in ("postgres", "redis-server", "client"))
    all_ms = sum(v for k, v in per_turn.items() if k != "client")
    busy, total = figures["machine"]
    accounted = sum(figures["totals"].values())
    parts = " ".join(f"{k}={v:.1f}" for k, v in per_turn.items())
    idle = " ".join(f"{k}={v * 100:.1f}%" for k, v in figures["idle"].items())
    print(f"round {round_no}: {committed}/{len(figures['flat'])} turns committed once, wall {figures['wall']:.1f} s, "
          f"{tps:.2f} turns/s (target {TARGET_TURNS_PER_SECOND}); latency p50={_pct(latencies, 0.5):.0f} ms "
          f"p95={_pct(latencies, 0.95):.0f} ms\n"
          f"  CPU ms per committed turn: {parts} | python total={python_ms:.1f} all={all_ms:.1f} "
          f"(target {TARGET_CPU_MS}; 2 free cores at this cost: {2000 / max(all_ms, 0.1):.1f} turns/s)\n"
          f"  machine: {busy / total * 100 if total else 0:.0f}% busy ({busy:.1f} CPU s, "
          f"{busy / max(1, committed) * 1000:.0f} ms/turn); the processes above incl. client: {accounted:.1f} s, "
          f"other processes on the machine {busy - accounted:.1f} s\n"
          f"  postgres: {figures['pg']['sessions'] / max(1, committed):.2f} connections opened/turn, "
          f"{figures['pg']['commits'] / max(1, committed):.1f} commits/turn | idle CPU before the round "
          f"(share of one core): {idle}", flush=True)


# --------------------------------------------------------------------------- the anchor
def anchor_child(turns: int) -> None:
    """In this process (hosted shape, in-process worker, database covel_helper_tp_anchor_<pid>):
    one session set up, 3 warm-up turns, then ``turns`` say turns one after another, each waited
    until the worker is idle. Prints one JSON line: CPU ms per turn (median, mean) of this process
    and of its PostgreSQL backends."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.test_hosted"
    import django

    django.setup()
    from django.conf import settings
    from django.db import connections

    name = f"{DB_PREFIX}_anchor_{os.getpid()}"
    settings.DATABASES["default"]["TEST"]["NAME"] = name
    connections["default"].settings_dict["TEST"]["NAME"] = name
    from tests.bench.bench_support import bench_database
    from tests.bench.turn_cpu import _turn, warmed_session

    with bench_database("hosted"):
        from django.test import Client

        from covel import inprocess

        client = Client()
        session_id, headers = warmed_session(client)
        db = connections["default"].settings_dict
        admin_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/postgres"
        pg = _pg_backends(admin_url, name)
        tracker = CpuTracker({"postgres": pg})
        tracker.start()
        cpu_ms = []
        total0 = time.process_time()
        for n in range(turns):
            cpu0 = time.process_time()
            _turn(client, session_id, 100 + n, headers)
            inprocess.wait_idle()
            cpu_ms.append((time.process_time() - cpu0) * 1000)
        process_total = time.process_time() - total0
        pg_total = tracker.stop()["postgres"]
        pg.close()
    print(json.dumps({"median_ms": statistics.median(cpu_ms), "mean_ms": process_total / turns * 1000,
                      "pg_ms": pg_total / turns * 1000, "turns": turns}), flush=True)


def anchor_phase(turns: int) -> dict:
    env = {**os.environ, "TEST_DATABASE_URL": os.environ.get("TEST_DATABASE_URL")
           or f"postgres://postgres@127.0.0.1:5432/{DB_PREFIX}_anchor",
           "TEST_REDIS_URL": os.environ.get("TEST_REDIS_URL") or "redis://127.0.0.1:6379/11"}
    result = subprocess.run([sys.executable, __file__, "--anchor-child", "--anchor-turns", str(turns)], env=env,
                            capture_output=True, text=True, timeout=900, cwd=ROOT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"anchor failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5, help="say turns per session per round")
    parser.add_argument("--repeat", type=int, default=1, help="timed rounds on the same cluster")
    parser.add_argument("--anchor-turns", type=int, default=20)
    parser.add_argument("--serial-turns", type=int, default=10,
                        help="cluster anchor: turns of one session one after another on the same cluster (0: none)")
    parser.add_argument("--redis", choices=["private", "shared"], default="private")
    parser.add_argument("--profile", metavar="DIR")
    parser.add_argument("--py-spy", default="/tmp/pyspy-venv/bin/py-spy")
    parser.add_argument("--cluster-env", action="append", metavar="KEY=VALUE",
                        help="extra environment of every cluster process (e.g. COVEL_DB_POOL_SIZE=4)")
    parser.add_argument("--anchor-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor_child:
        anchor_child(args.anchor_turns)
        return
    outcome = cluster_phase(args)
    anchor = anchor_phase(args.anchor_turns)
    print(f"anchor (same run): one process, in-process worker, {anchor['turns']} sequential turns: "
          f"CPU median={anchor['median_ms']:.1f} ms mean={anchor['mean_ms']:.1f} ms per turn; "
          f"its PostgreSQL backends {anchor['pg_ms']:.1f} ms per turn", flush=True)
    for round_no, figures in enumerate(outcome["rounds"], 1):
        committed = max(1, len(figures["flat"]) - len(figures["problems"]))
        python_ms = sum(v for k, v in figures["totals"].items()
                        if k not in ("postgres", "redis-server", "client")) / committed * 1000
        pg_ms = figures["totals"].get("postgres", 0.0) / committed * 1000
        print(f"round {round_no} vs anchor: cluster python CPU/turn {python_ms:.1f} ms = "
              f"{python_ms / anchor['mean_ms']:.2f}x the one-process turn; PostgreSQL {pg_ms:.1f} ms = "
              f"{pg_ms / max(anchor['pg_ms'], 0.1):.2f}x; turns/s {len(figures['flat']) / figures['wall']:.2f}",
              flush=True)
    serial = outcome.get("serial")
    if serial is not None and serial["flat"]:
        count = len(serial["flat"])
        per_turn = {k: v / count * 1000 for k, v in serial["totals"].items()}
        python_ms = sum(v for k, v in per_turn.items() if k not in ("postgres", "redis-server", "client"))
        all_ms = sum(v for k, v in per_turn.items() if k != "client")
        latencies = [r.latency_seconds * 1000 for r in serial["flat"]]
        print(f"cluster anchor (same cluster, one session, {count} turns one after another): CPU ms per turn "
              + " ".join(f"{k}={v:.1f}" for k, v in per_turn.items())
              + f" | python total={python_ms:.1f} all={all_ms:.1f}; latency p50={_pct(latencies, 0.5):.0f} ms",
              flush=True)
    if outcome["problems"]:
        print("CHECKS FAILED:\n" + "\n".join(outcome["problems"][:20]), flush=True)
        raise SystemExit(1)
    print("checks: every turn committed exactly once, no session_busy", flush=True)


if __name__ == "__main__":
    main()
