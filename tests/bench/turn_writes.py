"""Benchmark: a full-game turn against the bare replay of its own writes (issue 18's anchor).

Plays the builtin world (hollow-reach-light, its default plugins, the offline scripted model)
through setup, then times ``say`` turns end to end (POST /api/actions until the stream's
``execution.completed``, the worker in-process). For each timed turn it records every writing
statement the turn ran (INSERT / UPDATE / DELETE with their parameters) and, on a copy of the
database as it was before the turn, replays exactly those statements in ONE bare transaction
(no ORM, no engine): that replay is the anchor, measured in the same run.

Prints per shape: turn median / p95 (ms), statements per turn (all, and writes), the replay's
median (ms) and the ratio turn / replay. Targets (issue 18): hosted ≤ 2×, embedded ≤ 5×,
≤ 30 statements per turn.

Shapes: embedded (SQLite file, covel.settings.test), hosted (PostgreSQL + Redis,
covel.settings.test_hosted; needs the servers of `make test-hosted`; the copy is a
``CREATE DATABASE … TEMPLATE`` of the test database).

Run: .venv/bin/python tests/bench/turn_writes.py [--shape embedded|hosted] [--turns 15]
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_support import SHAPES, StatementRecorder, bench_database, pool_close, pool_warm  # noqa: E402

TARGET_RATIO = {"embedded": 5.0, "hosted": 2.0}


def _replay_sqlite(path: str, writes) -> float:
    """Replay ``writes`` on the SQLite database file ``path`` in one transaction; seconds."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for sql, params, many in writes:
            sql = sql.replace("%s", "?")
            if many:
                conn.executemany(sql, params)
            else:
                conn.execute(sql, params or ())
        conn.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        conn.close()


def _replay_pg(dsn: str, writes) -> float:
    import psycopg

    with psycopg.connect(dsn, autocommit=False, prepare_threshold=None) as conn:
        started = time.perf_counter()
        with conn.cursor() as cur:
            for sql, params, many in writes:
                if many:
                    cur.executemany(sql, params)
                else:
                    cur.execute(sql, params)
        conn.commit()
        return time.perf_counter() - started


def run(shape: str, turns: int) -> None:
    with bench_database(shape) as settings:
        from django.db import connections
        from django.test import Client

        from covel import inprocess
        from sessions.locks import lock_connections_close
        from tests.bench.turn_overhead import _session_builtin, _turn

        db = settings.DATABASES["default"]
        copy_name = f"{db['NAME']}_replay"
        try:
            client = Client()
            recorder = StatementRecorder(keep_writes=True)
            recorder.install()
            session_id, headers = _session_builtin(client)
            for n in range(3):
                _turn(client, session_id, n, headers)
            inprocess.wait_idle()
            turn_ms, replay_ms, counts, write_counts = [], [], [], []
            for n in range(turns):
                # The copy: the database as it is before this turn.
                lock_connections_close()
                connections.close_all()
                if shape == "embedded":
                    shutil.copyfile(db["NAME"], db["NAME"] + ".replay")
                else:
                    import psycopg

                    pool_close()
                    with psycopg.connect(_dsn(db, "postgres"), autocommit=True) as admin:
                        admin.execute(f'DROP DATABASE IF EXISTS "{copy_name}"')
                        admin.execute(f'CREATE DATABASE "{copy_name}" TEMPLATE "{db["NAME"]}"')
                    pool_warm()
                recorder.take()
                elapsed, _frame = _turn(client, session_id, 100 + n, headers)
                inprocess.wait_idle()
                count, writes = recorder.take()
                turn_ms.append(elapsed)
                counts.append(count)
                write_counts.append(len(writes))
                if shape == "embedded":
                    replay_ms.append(_replay_sqlite(db["NAME"] + ".replay", writes) * 1000)
                else:
                    replay_ms.append(_replay_pg(_dsn(db, copy_name), writes) * 1000)
            turn_median, replay_median = statistics.median(turn_ms), statistics.median(replay_ms)
            ratio = turn_median / replay_median if replay_median else float("inf")
            p95 = sorted(turn_ms)[min(len(turn_ms) - 1, round(0.95 * (len(turn_ms) - 1)))]
            print(f"{shape:9s} full-game turn median={turn_median:.1f}ms p95={p95:.1f}ms "
                  f"statements/turn={statistics.median(counts):.0f} (writes {statistics.median(write_counts):.0f}) | "
                  f"anchor: its writes replayed in one bare transaction median={replay_median:.2f}ms | "
                  f"ratio {ratio:.1f}x (target <= {TARGET_RATIO[shape]:.0f}x: {'met' if ratio <= TARGET_RATIO[shape] else 'NOT met'})",
                  flush=True)
        finally:
            lock_connections_close()
            connections.close_all()
            pool_close()
            if shape == "embedded":
                Path(db["NAME"] + ".replay").unlink(missing_ok=True)
            else:
                import psycopg

                with psycopg.connect(_dsn(db, "postgres"), autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{copy_name}"')


def _dsn(db: dict, name: str) -> str:
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="embedded")
    parser.add_argument("--turns", type=int, default=15)
    args = parser.parse_args()
    run(args.shape, args.turns)


if __name__ == "__main__":
    main()
