"""Benchmark: the jobs overview query (``jobs.selectors.background_overview``: the admin overview page
and every ``/metrics`` scrape) at 100,000 runtime-job rows (plus 100,000 executions), beside an anchor
measured in the same run: a bare ``SELECT COUNT(*)`` of the runtime-job table.

Run: .venv/bin/python tests/bench/jobs_overview.py   (SQLite, covel.settings.test)
     DJANGO_SETTINGS_MODULE=covel.settings.test_hosted .venv/bin/python tests/bench/jobs_overview.py
Options: --rows N (default 100000). Prints the median (and p90) of 30 runs in milliseconds, the
query count, and the admin page's own time through the test client.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test")

SAMPLES = 30
#: Status mix of the rows: mostly finished work, as on a server that has run for a while.
JOB_MIX = (("succeeded", 0.80), ("failed", 0.08), ("orphaned", 0.02), ("cancelled", 0.02), ("timed_out", 0.02),
           ("stale", 0.02), ("queued", 0.03), ("running", 0.01))
EXECUTION_MIX = (("committed", 0.93), ("failed", 0.03), ("interrupted", 0.02), ("aborted", 0.01), ("queued", 0.01))


def _timed(fn, samples: int = SAMPLES) -> tuple[float, float]:
    fn()  # warm caches and connections
    timings = []
    for _ in range(samples):
        started = time.perf_counter()
        fn()
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(samples * 0.9)]


def _statuses(mix, n: int) -> list[str]:
    out: list[str] = []
    for status, share in mix:
        out += [status] * int(n * share)
    return (out + [mix[0][0]] * n)[:n]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    rows = parser.parse_args().rows

    import django

    django.setup()
    from django.conf import settings

    class _NoMigrations(dict):
        # Like pytest --nomigrations: build tables straight from models.py.
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    settings.COVEL_INPROCESS_WORKER = True  # the page's worker list: no broker to ask
    from django.db import connection, reset_queries
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        from django.contrib.auth.models import User
        from django.test import Client

        from jobs.models import RuntimeJob
        from jobs.selectors import background_overview
        from sessions.services import session_create
        from turns.models import Execution

        sessions = [session_create(locale="en-US").session for _ in range(50)]
        base = datetime(2026, 1, 1, tzinfo=dt_timezone.utc)
        started = time.perf_counter()
        for status_list, make in (
            (_statuses(JOB_MIX, rows), lambda i, status: RuntimeJob(
                session_id=sessions[i % 50].pk, plugin_id="bench", runtime_id=f"bench/r{i % 7}", status=status,
                payload={"origin": {"activation": "stage"}}, lease_owner="o@bench-host:1:1" if status == "running" else "",
                lease_expires_at=base + timedelta(days=3650) if status == "running" else None)),
            (_statuses(EXECUTION_MIX, rows), lambda i, status: Execution(
                session_id=sessions[i % 50].pk, request_id=f"req-{i}", type="submit_actions", payload={}, status=status,
                trace_id=uuid.uuid4().hex, turn_id=str(uuid.uuid4()), origin="player")),
        ):
            model = make(0, status_list[0]).__class__
            model.objects.bulk_create([make(i, status) for i, status in enumerate(status_list)], batch_size=5000)
        # created_at is auto_now_add (bulk_create overwrites it): spread the jobs over ~3 months.
        ids = list(RuntimeJob.objects.order_by("pk").values_list("pk", flat=True))
        for offset in range(0, len(ids), 5000):
            RuntimeJob.objects.filter(pk__in=ids[offset:offset + 5000]).update(
                created_at=base + timedelta(minutes=offset // 40))
        print(f"{connection.vendor}: {rows:,} runtime jobs + {rows:,} executions written in "
              f"{time.perf_counter() - started:.1f} s")

        def anchor():
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT COUNT(*) FROM {RuntimeJob._meta.db_table}")
                cursor.fetchone()

        settings.DEBUG = True
        reset_queries()
        overview = background_overview()
        queries = len(connection.queries)
        settings.DEBUG = False
        assert sum(overview["queues"]["jobs"]["counts"].values()) == rows
        assert overview["queues"]["jobs"]["oldestQueuedSeconds"] is not None

        anchor_ms, anchor_p90 = _timed(anchor)
        overview_ms, overview_p90 = _timed(background_overview)
        User.objects.create_superuser("bench", "bench@example.invalid", "bench")
        client = Client()
        client.force_login(User.objects.get(username="bench"))
        page = "/admin/jobs/runtimejob/overview/"
        assert client.get(page).status_code == 200
        page_ms, page_p90 = _timed(lambda: client.get(page), samples=10)
        print(f"anchor  SELECT COUNT(*) of {rows:,} job rows: median {anchor_ms:.2f} ms (p90 {anchor_p90:.2f})")
        print(f"jobs overview query ({queries} queries; jobs, executions, world generations, lease holders): "
              f"median {overview_ms:.2f} ms (p90 {overview_p90:.2f}) = {overview_ms / anchor_ms:.1f}x the anchor")
        print(f"admin overview page (test client, 10 runs): median {page_ms:.2f} ms (p90 {page_p90:.2f})")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


if __name__ == "__main__":
    main()
