"""Benchmark: memory per idle ``GET /api/events/stream`` (issue 18: <= 10 KB per idle stream).

One fresh daphne process serving covel.asgi (hosted shape: PostgreSQL + Redis) opens IDLE_STREAMS
idle streams (one session each: every stream also holds its session's feed and Redis channel);
the figure is (RSS while holding them - RSS before) / IDLE_STREAMS. The anchor, measured in the
same run with the same client: a bare asyncio SSE server (``asyncio.start_server``, one parked
handler per connection writing the response head and one frame; tests/bench/idle_streams_bare.py).
Also printed: daphne's own floor, a daphne process serving a raw ASGI stream application without
Django or covel (tests/bench/idle_streams_floor_asgi.py). Each is measured cold (fresh process) and
after WARM_STREAMS streams were opened and closed (the marginal cost, without first-request costs).

``--tracemalloc`` also serves tests.bench.idle_streams_asgi (tracemalloc on) and prints the top
Python allocation sites per idle stream (snapshot diff), to see where the bytes go.

Run: .venv/bin/python tests/bench/idle_streams.py [--streams N] [--tracemalloc]   (needs PostgreSQL at
TEST_DATABASE_URL and Redis at TEST_REDIS_URL, as `make test-hosted`; builds and drops its own test database)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test_hosted")

from tests.bench.event_fanout import Subscriber, _AppDaphne, _proc_status  # noqa: E402

SETTLE_SECONDS = 3.0
#: Streams opened and closed before the warm measurement (and the tracemalloc snapshots).
WARM_STREAMS = 20


def _rss_kb(pid: int) -> int:
    return int(_proc_status(pid)["VmRSS"].split()[0])


async def _hold(port: int, pid: int, session_ids: list[str], snapshot=None, warm_ids=()) -> tuple[int, int]:
    """RSS (KiB) of ``pid`` before and while holding one idle stream per session id; first opens
    and closes one stream per ``warm_ids`` (the first requests' one-time costs: lazy imports,
    caches, thread pools) so that the difference is the marginal cost of the idle streams."""
    if warm_ids:
        warm = [Subscriber(port, sid, None) for sid in warm_ids]
        await asyncio.gather(*(s.start() for s in warm))
        await asyncio.sleep(1.0)
        for s in warm:
            s.close()
    await asyncio.sleep(1.0)
    if snapshot is not None:
        await snapshot("before")
    before = _rss_kb(pid)
    subs = [Subscriber(port, sid, None) for sid in session_ids]
    for i in range(0, len(subs), 100):
        await asyncio.gather(*(s.start() for s in subs[i:i + 100]))
    await asyncio.sleep(SETTLE_SECONDS)  # a few poll and keep-alive rounds with every feed alive
    during = _rss_kb(pid)
    if snapshot is not None:
        await snapshot("during")
    for s in subs:
        s.close()
    return before, during


class _Bare:
    """The anchor server in its own process (tests/bench/idle_streams_bare.py)."""

    def __init__(self) -> None:
        from tests.turns.events_support import REPO, free_port

        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "bench" / "idle_streams_bare.py"), str(self.port)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _tracemalloc_report(before_path: str, during_path: str, streams: int, top: int = 25) -> None:
    import tracemalloc

    before = tracemalloc.Snapshot.load(before_path)
    during = tracemalloc.Snapshot.load(during_path)
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, during = before.filter_traces(filters), during.filter_traces(filters)
    total = sum(s.size_diff for s in during.compare_to(before, "filename"))
    print(f"  tracemalloc (Python allocations): {total / streams / 1024:5.2f} KiB per stream; top sites (per stream):")
    for stat in during.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        print(f"    {stat.size_diff / streams:8.0f} B  {stat.count_diff / streams:5.1f} blocks  {frame.filename[-60:]}:{frame.lineno}")
    print("  by file:")
    for stat in during.compare_to(before, "filename")[:12]:
        print(f"    {stat.size_diff / streams:8.0f} B  {stat.traceback[0].filename[-70:]}")


def _rss_part(env: dict[str, str], ids: list[str], warm_ids: list[str], servers: list) -> None:
    n = len(ids)
    rows = []
    for label, warm in (("cold (fresh process)", ()), (f"after {len(warm_ids)} streams opened and closed", warm_ids)):
        bare = _Bare()
        servers.append(bare)
        b0, b1 = asyncio.run(_hold(bare.port, bare.proc.pid, ids, warm_ids=warm))
        bare.stop()
        servers.remove(bare)
        floor = _AppDaphne(env, "tests.bench.idle_streams_floor_asgi:application")
        servers.append(floor)
        f0, f1 = asyncio.run(_hold(floor.port, floor.proc.pid, ids, warm_ids=warm))
        floor.stop()
        servers.remove(floor)
        ours = _AppDaphne(env, "covel.asgi:application")
        servers.append(ours)
        threads0 = int(_proc_status(ours.proc.pid)["Threads"])
        o0, o1 = asyncio.run(_hold(ours.port, ours.proc.pid, ids, warm_ids=warm))
        threads1 = int(_proc_status(ours.proc.pid)["Threads"])
        ours.stop()
        servers.remove(ours)
        rows.append((label, o0, o1, threads0, threads1, b0, b1, f0, f1))
    for label, o0, o1, threads0, threads1, b0, b1, f0, f1 in rows:
        per_ours, per_bare, per_floor = (o1 - o0) / n, (b1 - b0) / n, (f1 - f0) / n
        print(f"  {label}:")
        print(f"    covel daphne:        RSS {o0 / 1024:6.1f} -> {o1 / 1024:6.1f} MB   {per_ours:5.1f} KiB per idle stream"
              f"   (threads {threads0} -> {threads1})")
        print(f"    anchor bare asyncio: RSS {b0 / 1024:6.1f} -> {b1 / 1024:6.1f} MB   {per_bare:5.1f} KiB per idle stream")
        print(f"    ratio {per_ours / per_bare if per_bare > 0 else float('nan'):4.1f}x   (target: <= 10 KiB per idle stream)")
        print(f"    daphne floor (raw ASGI stream app, no Django): RSS {f0 / 1024:6.1f} -> {f1 / 1024:6.1f} MB"
              f"   {per_floor:5.1f} KiB per idle stream")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--no-rss", action="store_true", help="only the tracemalloc part")
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    class _NoMigrations(dict):
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    from django.db import connection, connections
    from django.test.utils import setup_test_environment

    if settings.STORE_BACKEND != "pg":
        raise SystemExit("idle_streams measures the hosted shape: use covel.settings.test_hosted")
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    servers: list = []
    try:
        from sessions.models import Session
        from tests.turns.events_support import server_env

        env = server_env(COVEL_SSE_MAX_CONNECTIONS_PER_SESSION="1000", COVEL_SSE_MAX_CONNECTIONS="5000",
                         RATE_LIMIT_RPM="1000000")
        ids = [f"idle-{i}" for i in range(args.streams)]
        warm_ids = [f"warm-{i}" for i in range(WARM_STREAMS)]
        Session.objects.bulk_create([Session(id=sid, world_id="w", incarnation="i", event_epoch="bench") for sid in ids + warm_ids])
        connections.close_all()
        n = args.streams
        print(f"idle event streams, hosted shape, {n} streams ({n} sessions), {os.cpu_count()} CPUs")

        if args.no_rss:
            args.tracemalloc = True
        else:
            _rss_part(env, ids, warm_ids, servers)
        if args.tracemalloc:
            import httpx

            traced = _AppDaphne(env, "tests.bench.idle_streams_asgi:application")
            servers.append(traced)
            home = Path(os.environ.get("IDLE_STREAMS_SNAPSHOTS") or settings.COVEL_HOME)

            async def snapshot(label: str) -> None:
                await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{traced.port}/__bench/tracemalloc",
                                        params={"path": str(home / f"tm-{label}.bin")}, timeout=120)

            asyncio.run(_hold(traced.port, traced.proc.pid, ids, snapshot, warm_ids))
            traced.stop()
            servers.remove(traced)
            _tracemalloc_report(str(home / "tm-before.bin"), str(home / "tm-during.bin"), n)
    finally:
        for server in servers:
            server.stop()
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
