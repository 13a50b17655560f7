"""Benchmark: GET /api/sessions/:id/view size and time as a builtin-game session grows (issue: the view
carried whole prompts in llm.calling trace events and reached ~0.9 MB after a few turns).

Plays hollow-reach-light (the world's default plugins, scripted model) through setup and then
``say`` turns, and at turns 10, 50 and 200 prints the view's size (raw, and gzip as a browser
receives it) and its median read time, beside the same session's GET /api/traces/:id (the full
trace window, prompts included) as the anchor measured in the same run.

Run: .venv/bin/python tests/bench/view_size.py [--turns 200] [--shape embedded|hosted]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

READS = 5
CHECKPOINTS = (10, 50, 200)


def _timed_get(client, url: str, headers: dict[str, str]) -> tuple[int, int, float]:
    """(raw bytes, gzip bytes, median ms of READS reads)."""
    times, size = [], 0
    for _ in range(READS):
        started = time.perf_counter()
        response = client.get(url, **headers)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code} {response.content[:200]!r}")
        size = len(response.content)
    zipped = client.get(url, HTTP_ACCEPT_ENCODING="gzip", **headers)
    gz = len(zipped.content) if zipped.get("Content-Encoding") == "gzip" else size
    return size, gz, statistics.median(times)


def _statistics_refresh() -> None:
    """PostgreSQL: ANALYZE, as autovacuum does on a running deployment. A just-made database has no
    statistics, and its planner then scans every trace row of the session instead of the latest."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=max(CHECKPOINTS))
    parser.add_argument("--shape", choices=("embedded", "hosted"), default="embedded")
    args = parser.parse_args()
    from tests.bench.bench_support import bench_database

    with bench_database(args.shape):
        from django.test import Client

        from tests.bench.turn_overhead import _session_builtin, _turn

        client = Client(HTTP_HOST="127.0.0.1")
        session_id, headers = _session_builtin(client)
        print(f"shape {args.shape}")
        for n in range(1, args.turns + 1):
            _turn(client, session_id, n, headers)
            if n in CHECKPOINTS:
                _statistics_refresh()
                view_bytes, view_gz, view_ms = _timed_get(client, f"/api/sessions/{session_id}/view", headers)
                trace_bytes, _, trace_ms = _timed_get(client, f"/api/traces/{session_id}", headers)
                print(f"turn {n:>3}: view {view_bytes / 1000:7.1f} kB (gzip {view_gz / 1000:5.1f} kB), median "
                      f"{view_ms:5.1f} ms | anchor GET /api/traces {trace_bytes / 1000:8.1f} kB, median {trace_ms:6.1f} ms")


if __name__ == "__main__":
    main()
