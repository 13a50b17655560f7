"""Benchmark: is a turn flat with history? A full-game turn at turn ~1,000 against the same game's
first turns (the anchor, measured in the same run on the same session).

Plays the builtin world (hollow-reach-light, default plugins, offline scripted model, worker
in-process) through setup, times ``--window`` ``say`` turns right away (fresh), plays on to
``--turns`` untimed, then times another ``--window`` turns. Prints both medians, their ratio
(target, issue 18: ≤ 1.1×), statements per turn at both ends, and the plugin-data rows the session
holds by then. On PostgreSQL both windows start after an ANALYZE (statistics as autovacuum keeps
them on a running deployment).

Run: .venv/bin/python tests/bench/turn_history.py [--shape embedded|hosted] [--turns 1000] [--window 20]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_support import SHAPES, StatementRecorder, bench_database  # noqa: E402

TARGET_RATIO = 1.1


def _statistics_refresh() -> None:
    """PostgreSQL: ANALYZE before each timed window, as autovacuum does on a running deployment.
    Without statistics of the just-filled tables the planner estimates a session's chat and
    prompt-history rows at ~8 and reads all 3,000 of them to sort out the latest 500, so the
    late window would measure a missing ANALYZE, not the turn."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def run(shape: str, turns: int, window: int) -> None:
    with bench_database(shape):
        from django.test import Client

        from covel import inprocess
        from plugins_app.models import PluginData
        from tests.bench.turn_overhead import _session_builtin, _turn

        client = Client()
        recorder = StatementRecorder()
        recorder.install()
        session_id, headers = _session_builtin(client)
        inprocess.wait_idle()

        def timed(start: int) -> tuple[float, float]:
            _statistics_refresh()
            times, counts = [], []
            for n in range(start, start + window):
                recorder.take()
                elapsed, _frame = _turn(client, session_id, n, headers)
                inprocess.wait_idle()
                times.append(elapsed)
                counts.append(recorder.take()[0])
            return statistics.median(times), statistics.median(counts)

        fresh_ms, fresh_q = timed(0)
        started = time.monotonic()
        for n in range(window, turns):
            _turn(client, session_id, n, headers)
        inprocess.wait_idle()
        played_s = time.monotonic() - started
        late_ms, late_q = timed(turns)
        ratio = late_ms / fresh_ms if fresh_ms else float("inf")
        rows = PluginData.objects.filter(session_id=session_id).count()
        print(f"{shape:9s} turn {turns}..{turns + window}: median={late_ms:.1f}ms statements={late_q:.0f} | "
              f"anchor: turns 0..{window} of the same session median={fresh_ms:.1f}ms statements={fresh_q:.0f} | "
              f"ratio {ratio:.2f}x (target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'}); "
              f"{rows} plugin-data rows; {turns - window} untimed turns in {played_s:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="embedded")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=20)
    args = parser.parse_args()
    run(args.shape, args.turns, args.window)


if __name__ == "__main__":
    main()
