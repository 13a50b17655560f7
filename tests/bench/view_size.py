"""Benchmark: GET /api/sessions/:id/view size and time as a builtin-game session grows (issue: the view
carried whole prompts in llm.calling trace events and reached ~0.9 MB after a few turns).

Plays hollow-reach-light (the world's default plugins, scripted model, embedded shape) through setup
and then ``say`` turns, and at turn 10 and turn 50 prints the view's size in bytes and its median
read time, beside the same session's GET /api/traces/:id (the full trace window, prompts included)
as the anchor measured in the same run.

Run: .venv/bin/python tests/bench/view_size.py [--turns 50]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

READS = 5
CHECKPOINTS = (10, 50)


def _timed_get(client, url: str, headers: dict[str, str]) -> tuple[int, float]:
    times, size = [], 0
    for _ in range(READS):
        started = time.perf_counter()
        response = client.get(url, **headers)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code} {response.content[:200]!r}")
        size = len(response.content)
    return size, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=max(CHECKPOINTS))
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.test"
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    from tests.bench.turn_overhead import _session_builtin, _turn

    client = Client(HTTP_HOST="127.0.0.1")
    session_id, headers = _session_builtin(client)
    for n in range(1, args.turns + 1):
        _turn(client, session_id, n, headers)
        if n in CHECKPOINTS:
            view_bytes, view_ms = _timed_get(client, f"/api/sessions/{session_id}/view", headers)
            trace_bytes, trace_ms = _timed_get(client, f"/api/traces/{session_id}", headers)
            print(f"turn {n:>3}: view {view_bytes / 1024:8.1f} KiB, median {view_ms:6.1f} ms | "
                  f"anchor GET /api/traces {trace_bytes / 1024:8.1f} KiB, median {trace_ms:6.1f} ms")


if __name__ == "__main__":
    main()
