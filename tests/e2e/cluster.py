"""A real hosted-shape cluster for the end-to-end tests: 2 daphne + 2 Celery worker processes (and
the one Celery beat) on a fresh PostgreSQL database and a dedicated Redis database.

Nothing here runs in the pytest process except process management and health probes: every
request of the tests goes over TCP to the daphne processes, every turn runs in a Celery worker.

Environment (all optional):
  COVEL_E2E_PG_URL          server URL without a database, default postgres://postgres@127.0.0.1:5432
  COVEL_E2E_REDIS_URL       server URL without a database number, default redis://127.0.0.1:6379
  COVEL_E2E_REDIS_DBS       candidate Redis database numbers, default "2-14"; the first empty one
                            is claimed (SET NX of CLAIM_KEY) so that concurrent runs never share one
  COVEL_E2E_WORKER_CONCURRENCY  prefork children per Celery worker, default 2
  COVEL_E2E_KEEP_LOGS       "1" keeps the run directory (logs, COVEL_HOME) after teardown

The database is named ``covel_e2e_<pid>_<n>`` (n: the cluster's number in this process) and carries a comment with the host and pid; a run that
finds such a database of a dead pid on this host (a crashed earlier run) drops it first.

Private stores (the fault-injection scenarios, ``cluster_new(private_stores=True)``): the cluster
then runs against its own ``redis-server`` and its own PostgreSQL cluster (``initdb`` into a
temporary directory, as the ``postgres`` user when the tests run as root), both on free loopback
ports and started by the run, so restarting or stopping them touches nothing else on the machine.
``PrivateRedis`` / ``PrivatePostgres`` offer ``restart``, ``stop`` and ``start``; teardown stops
them and removes their directories.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import redis

REPO = Path(__file__).resolve().parents[2]
CLAIM_KEY = "covel:e2e:claim"
DB_PREFIX = "covel_e2e_"
_DB_SERIAL = itertools.count(1)
HEALTH_TIMEOUT_SECONDS = 90
WORKER_READY_TIMEOUT_SECONDS = 90
STOP_TIMEOUT_SECONDS = 30
QUEUES = "turns,jobs,media,worldgen"


class ClusterError(RuntimeError):
    """A cluster process did not start, did not stop, or left something behind."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse_db_range(text: str) -> list[int]:
    numbers: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            numbers.extend(range(int(low), int(high) + 1))
        else:
            numbers.append(int(part))
    return numbers


@dataclass
class Proc:
    """One cluster process, started in its own process group (so SIGKILL reaches its children)."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def is_running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class PrivateRedis:
    """A ``redis-server`` of this run only: loopback, a free port, no persistence (like the CI's),
    so a restart empties it as a real Redis restart without persistence does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.popen: subprocess.Popen | None = None
        self.log_path = root / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout_seconds: float = 20) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.popen = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root), "--logfile", str(self.log_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise ClusterError(f"private redis-server exited ({self.popen.returncode})")
            try:
                redis.Redis(port=self.port, socket_connect_timeout=1).ping()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise ClusterError(f"private redis-server not answering on {self.port}")

    def stop(self, *, sig: int = signal.SIGTERM) -> None:
        """Stop it (SIGTERM: a clean shutdown, nothing saved; SIGKILL: a crash)."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        self.popen.wait(timeout=STOP_TIMEOUT_SECONDS)

    def restart(self, *, down_seconds: float = 1.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def remove(self) -> None:
        self.stop(sig=signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


class PrivatePostgres:
    """A PostgreSQL cluster of this run only (``initdb`` into a temporary directory, trust auth for
    user ``postgres``, loopback on a free port, fsync off). Run as the ``postgres`` OS user when the
    tests run as root (PostgreSQL refuses to run as root)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="covel-e2e-pg-"))
        self.data_dir = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self.run_as = "postgres" if os.geteuid() == 0 else None
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
        located = shutil.which("pg_ctl")
        self.bin_dir = Path(bins[-1]).parent if bins else Path(located).parent if located else None
        if self.bin_dir is None:
            raise ClusterError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        result = subprocess.run([*prefix, str(self.bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True,
                                timeout=timeout, cwd=self.root)
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
                               f"{self.log_tail()}")
        return result

    def _options(self) -> str:
        return (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-instructions")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", "60", "-o", self._options(),
                  "start")

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are ended, as ``systemctl stop`` does)."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, *, down_seconds: float = 0.0) -> None:
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start()

    def is_running(self) -> bool:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        return subprocess.run([*prefix, str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status"],
                              capture_output=True, cwd=self.root).returncode == 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no postgres log)"

    def remove(self) -> None:
        try:
            if self.data_dir.exists() and self.is_running():
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        except ClusterError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Cluster:
    """The processes and stores of one e2e run. Use ``start()`` / ``stop()``; see module docstring."""

    run_dir: Path
    pg_url: str = field(default_factory=lambda: os.environ.get("COVEL_E2E_PG_URL", "postgres://postgres@127.0.0.1:5432"))
    redis_server_url: str = field(default_factory=lambda: os.environ.get("COVEL_E2E_REDIS_URL", "redis://127.0.0.1:6379"))
    worker_concurrency: int = field(default_factory=lambda: int(os.environ.get("COVEL_E2E_WORKER_CONCURRENCY", "2")))
    # One process may run several clusters (the shared one and a scenario's own): each gets its own
    # database, or a scenario's start/stop would drop the shared cluster's data.
    db_name: str = field(default_factory=lambda: f"{DB_PREFIX}{os.getpid()}_{next(_DB_SERIAL)}")
    redis_db: int | None = None
    web: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    beat: Proc | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    private_redis: PrivateRedis | None = None
    private_pg: PrivatePostgres | None = None
    _worker_serial: int = 0

    # ----------------------------------------------------------------- derived locations
    @property
    def covel_home(self) -> Path:
        return self.run_dir / "home"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def database_url(self) -> str:
        return f"{self.pg_url.rstrip('/')}/{self.db_name}"

    @property
    def redis_url(self) -> str:
        assert self.redis_db is not None, "Redis database not claimed yet"
        return f"{self.redis_server_url.rstrip('/')}/{self.redis_db}"

    @property
    def base_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{proc.port}" for proc in self.web]

    def env(self) -> dict[str, str]:
        """The environment every cluster process runs with (the hosted shape)."""
        env = {
            key: value
            for key, value in os.environ.items()
            # The pytest process runs with the test settings; none of that may leak into the cluster.
            if not key.startswith(("DJANGO_", "COVEL_", "TEST_", "PYTEST_"))
            and key not in {"DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"}
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "covel.settings.hosted",
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "COVEL_HOME": str(self.covel_home),
                "DEPLOYMENT_TIER": "self",
                "COVEL_JSON_LOGS": "0",
                # One client address drives hundreds of requests; the per-address limiter is not under test.
                "RATE_LIMIT_RPM": "1000000",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(REPO),
            }
        )
        env.update(self.extra_env)
        return env

    # ----------------------------------------------------------------- stores
    def _admin_connect(self) -> psycopg.Connection:
        return psycopg.connect(f"{self.pg_url.rstrip('/')}/postgres", autocommit=True, connect_timeout=5)

    def _drop_stale_databases(self, conn: psycopg.Connection) -> None:
        host = socket.gethostname()
        rows = conn.execute(
            "SELECT d.datname, shobj_description(d.oid, 'pg_database') FROM pg_database d WHERE d.datname LIKE %s",
            (DB_PREFIX + "%",),
        ).fetchall()
        for name, comment in rows:
            match = re.fullmatch(r"covel-e2e host=(\S+) pid=(\d+)", comment or "")
            if match and match.group(1) == host and not _pid_alive(int(match.group(2))) and name != self.db_name:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def database_create(self) -> None:
        """Create the run's empty database (dropping a stale one of the same name)."""
        with self._admin_connect() as conn:
            self._drop_stale_databases(conn)
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
            comment = f"covel-e2e host={socket.gethostname()} pid={os.getpid()}"
            conn.execute(f"COMMENT ON DATABASE \"{self.db_name}\" IS '{comment}'")

    def database_drop(self) -> None:
        with self._admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    def database_exists(self) -> bool:
        with self._admin_connect() as conn:
            return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.db_name,)).fetchone() is not None

    def db(self) -> psycopg.Connection:
        """A new autocommit connection to the run's database (for assertions on committed rows)."""
        return psycopg.connect(self.database_url, autocommit=True, connect_timeout=5)

    def redis_claim(self) -> None:
        """Claim the first empty Redis database of COVEL_E2E_REDIS_DBS for this run."""
        owner = f"{socket.gethostname()}:{os.getpid()}"
        for number in _parse_db_range(os.environ.get("COVEL_E2E_REDIS_DBS", "2-14")):
            client = redis.Redis.from_url(f"{self.redis_server_url.rstrip('/')}/{number}", socket_connect_timeout=3)
            try:
                holder = client.get(CLAIM_KEY)
                if holder is not None:
                    host, _, pid = holder.decode().rpartition(":")
                    if host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid)):
                        client.flushdb()  # a crashed earlier run of ours
                    else:
                        continue
                if client.dbsize() != 0:
                    continue  # someone else's data: never touch it
                if client.set(CLAIM_KEY, owner, nx=True, ex=6 * 3600):
                    self.redis_db = number
                    return
            finally:
                client.close()
        raise ClusterError("no free Redis database among COVEL_E2E_REDIS_DBS; free one or widen the range")

    def redis_release(self) -> None:
        if self.redis_db is None:
            return
        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=3)
        try:
            client.flushdb()
        finally:
            client.close()

    # ----------------------------------------------------------------- processes
    def _spawn(self, proc: Proc) -> Proc:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = open(proc.log_path, "ab")
        try:
            proc.popen = subprocess.Popen(
                proc.argv, cwd=REPO, env={**self.env(), **proc.env}, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        return proc

    def _manage(self, *args: str, timeout: float = 300) -> None:
        result = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def schema_build(self) -> None:
        """Apply the real migrations to the run's database (refused when models.py is ahead of them)."""
        self._manage("-m", "tests.e2e.schema", "migrate")

    def web_start(self, index: int, port: int | None = None) -> Proc:
        port = port or free_port()
        proc = Proc(
            name=f"web-{index}",
            argv=[sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                  "--application-close-timeout", "10", "covel.asgi:application"],
            log_path=self.logs_dir / f"web-{index}.log",
            port=port,
            # As deployed (deploy/): under ASGI every request runs in its own thread, so a persistent
            # connection would outlive its request's thread; web processes close it per request.
            env={"COVEL_DB_CONN_MAX_AGE": "0"},
        )
        return self._spawn(proc)

    def worker_start(self) -> Proc:
        """Start one more Celery worker process (queues turns, jobs, media, worldgen)."""
        self._worker_serial += 1
        serial = self._worker_serial
        proc = Proc(
            name=f"worker-{serial}",
            argv=[sys.executable, "-m", "celery", "-A", "covel", "worker", "-Q", QUEUES,
                  "-n", f"e2e{os.getpid()}-{serial}@%h", "--concurrency", str(self.worker_concurrency),
                  "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            log_path=self.logs_dir / f"worker-{serial}.log",
        )
        self._spawn(proc)
        self.workers.append(proc)
        return proc

    def beat_start(self) -> Proc:
        """Start the cluster's one Celery beat (reapers of dead executions and expired job leases)."""
        proc = Proc(
            name="beat",
            argv=[sys.executable, "-m", "celery", "-A", "covel", "beat",
                  "--schedule", str(self.run_dir / "celerybeat-schedule"), "--loglevel", "INFO"],
            log_path=self.logs_dir / "beat.log",
        )
        self.beat = self._spawn(proc)
        return proc

    def _wait_health(self, proc: Proc, *, require_workers: bool = True) -> None:
        """Wait until ``proc`` answers /api/health ok; without ``require_workers`` a 503 whose only
        failing check is ``workers`` (no worker consumes the queues yet) counts as up."""
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        last = "no answer"
        while time.monotonic() < deadline:
            if not proc.is_running():
                raise ClusterError(f"{proc.name} exited ({proc.popen.returncode}) before /api/health answered:\n{proc.log_tail()}")
            try:
                response = httpx.get(f"http://127.0.0.1:{proc.port}/api/health", timeout=5)
                if response.status_code == 200 and response.json().get("status") == "ok":
                    return
                failing = {name for name, check in (response.json().get("checks") or {}).items() if not check.get("ok")}
                if not require_workers and failing == {"workers"}:
                    return
                last = f"{response.status_code} {response.text[:300]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        raise ClusterError(f"{proc.name} not healthy after {HEALTH_TIMEOUT_SECONDS} s ({last}):\n{proc.log_tail()}")

    def worker_wait_ready(self, proc: Proc) -> None:
        deadline = time.monotonic() + WORKER_READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if not proc.is_running():
                raise ClusterError(f"{proc.name} exited ({proc.popen.returncode}) before it was ready:\n{proc.log_tail()}")
            if re.search(r"@\S+ ready\.", proc.log_tail(400)):
                return
            time.sleep(0.2)
        raise ClusterError(f"{proc.name} not ready after {WORKER_READY_TIMEOUT_SECONDS} s:\n{proc.log_tail()}")

    def start(self, *, web_count: int = 2, worker_count: int = 2) -> None:
        """Create the stores, build the schema, start the processes and wait until all are ready.

        On any failure everything already started is torn down and ClusterError is raised.
        """
        self.covel_home.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.private_redis is not None:
                self.private_redis.start()
                self.redis_server_url = self.private_redis.url
            if self.private_pg is not None:
                self.private_pg.init()
                self.private_pg.start()
                self.pg_url = self.private_pg.url
            self.redis_claim()
            self.database_create()
            self.schema_build()
            self.web = [self.web_start(index) for index in range(1, web_count + 1)]
            for _ in range(worker_count):
                self.worker_start()
            self.beat_start()
            for proc in self.workers:
                self.worker_wait_ready(proc)
            for proc in self.web:
                self._wait_health(proc, require_workers=worker_count > 0)
        except BaseException:
            self.stop(check=False)
            raise

    def worker_kill(self, proc: Proc) -> None:
        """SIGKILL a worker and its pool children at once (a crashed machine, not a shutdown)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.popen.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(proc.pid):
            raise ClusterError(f"{proc.name}: pool children survived SIGKILL of the group")
        self.workers.remove(proc)

    def worker_terminate(self, proc: Proc, *, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> float:
        """SIGTERM one worker (Celery warm shutdown: running tasks finish first) and wait for it to
        exit; returns the seconds it took. ClusterError when it needed longer than the timeout."""
        started = time.monotonic()
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.popen.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.popen.wait(timeout=10)
            raise ClusterError(f"{proc.name} did not finish its warm shutdown within {timeout_seconds} s")
        self.workers.remove(proc)
        return time.monotonic() - started

    def web_kill(self, index: int) -> Proc:
        """SIGKILL web process ``index`` (0-based) and its group; it stays in ``web`` (dead) until
        ``web_restart``."""
        proc = self.web[index]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.popen.wait(timeout=10)
        return proc

    def web_restart(self, index: int) -> Proc:
        """Start web process ``index`` again on its port (a supervisor's restart) and wait until healthy."""
        old = self.web[index]
        if old.is_running():
            raise ClusterError(f"{old.name} is still running")
        proc = self.web_start(index + 1, port=old.port)
        self.web[index] = proc
        self._wait_health(proc)
        return proc

    def worker_ping(self, timeout_seconds: float = 5.0) -> set[str]:
        """Node names of the workers that answer ``celery inspect ping`` on the broker right now."""
        from celery import Celery

        app = Celery(broker=self.redis_url, set_as_current=False)
        try:
            replies = app.control.ping(timeout=timeout_seconds) or []
        finally:
            app.close()
        return {name for reply in replies for name in reply}

    def worker_node_name(self, proc: Proc) -> str:
        """The Celery node name of ``proc`` (``-n`` with %h expanded)."""
        name = proc.argv[proc.argv.index("-n") + 1]
        return name.replace("%h", socket.gethostname())

    def _stop_group(self, procs: list[Proc], sig: int) -> list[str]:
        """Send ``sig`` to every process, wait for all; SIGKILL a group still alive after
        STOP_TIMEOUT_SECONDS. Returns the problems found (empty when all stopped on ``sig``)."""
        problems: list[str] = []
        live = [proc for proc in procs if proc.popen is not None]
        for proc in live:
            if proc.popen.poll() is None:
                try:
                    proc.popen.send_signal(sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for proc in live:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"{proc.name} did not stop on signal {sig} within {STOP_TIMEOUT_SECONDS} s")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=10)
        for proc in live:
            grace = time.monotonic() + 10
            while _group_alive(proc.pid) and time.monotonic() < grace:
                time.sleep(0.05)
            if _group_alive(proc.pid):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                problems.append(f"{proc.name} left processes behind in its group")
        return problems

    def stop(self, *, check: bool = True) -> list[str]:
        """Tear down in the hosted shape's order: web first (stop accepting), beat, then the workers
        (SIGTERM = warm shutdown, running turns drain), then the stores (drop DB, flush Redis DB).

        Returns the problems found (processes that needed SIGKILL, leftovers); with ``check`` raises
        ClusterError when there are any.
        """
        problems = self._stop_group(self.web, signal.SIGTERM)
        problems += self._stop_group([self.beat] if self.beat else [], signal.SIGTERM)
        problems += self._stop_group(list(self.workers), signal.SIGTERM)
        try:
            self.database_drop()
            if self.database_exists():
                problems.append(f"database {self.db_name} still exists after DROP")
        except psycopg.Error as exc:
            problems.append(f"could not drop database {self.db_name}: {exc}")
        try:
            self.redis_release()
        except redis.RedisError as exc:
            problems.append(f"could not flush Redis db {self.redis_db}: {exc}")
        if self.private_redis is not None:
            self.private_redis.remove()
        if self.private_pg is not None:
            self.private_pg.remove()
        if check and problems:
            raise ClusterError("unclean teardown: " + "; ".join(problems))
        return problems

    def logs(self) -> str:
        """Tails of every process log (for failure messages), the private PostgreSQL's included."""
        procs = [*self.web, *self.workers, *([self.beat] if self.beat else [])]
        tails = [f"== {proc.name} ==\n{proc.log_tail()}" for proc in procs]
        if self.private_pg is not None:
            tails.append(f"== private postgres ==\n{self.private_pg.log_tail()}")
        return "\n\n".join(tails)


def cluster_new(*, private_stores: bool = False, extra_env: dict[str, str] | None = None) -> Cluster:
    """A Cluster in a fresh temporary run directory; with ``private_stores`` on its own Redis and
    PostgreSQL servers (see module docstring). ``extra_env`` is added to every process's environment."""
    run_dir = Path(tempfile.mkdtemp(prefix="covel-e2e-"))
    cluster = Cluster(run_dir=run_dir, extra_env=dict(extra_env or {}))
    if private_stores:
        cluster.private_redis = PrivateRedis(run_dir / "redis")
        cluster.private_pg = PrivatePostgres()
    return cluster


def run_dir_remove(cluster: Cluster) -> None:
    if os.environ.get("COVEL_E2E_KEEP_LOGS") != "1":
        shutil.rmtree(cluster.run_dir, ignore_errors=True)
