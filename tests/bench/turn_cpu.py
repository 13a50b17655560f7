"""Benchmark: CPU time of one full-game turn in this process (issue 18: ≤ 130 ms CPU per turn across
all processes), beside anchors measured in the same run.

Plays the builtin world (hollow-reach-light, its default plugins, the offline scripted model) through
setup, then runs ``say`` turns (POST /api/actions until the stream's ``execution.completed``, the
worker in-process, then waits for the turn's follow-up tasks). Per turn it takes the process CPU
time (``time.process_time()``: every thread of this process — web request, stream relay, worker,
runtime and tool threads) and the wall time.

Anchors, same run, same process:
  one-row transaction  CPU of a bare ``transaction.atomic()`` + one ORM ``PluginData`` insert
                       (the smallest write a turn could make); the turn is printed as a multiple.
  frames json.dumps    CPU of ``json.dumps`` over the turn's own SSE frames (the least any process
                       must do to ship what the turn produced).

Shapes: embedded (SQLite, covel.settings.test) and hosted (PostgreSQL + Redis,
covel.settings.test_hosted; the worker still runs in-process, so the figure is this process's
CPU — the PostgreSQL and Redis servers' CPU is not included).

Run: .venv/bin/python tests/bench/turn_cpu.py [--shape embedded|hosted] [--turns 30]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_support import SHAPES, bench_database  # noqa: E402

TARGET_CPU_MS = 130
WARMUP_TURNS = 3
ANCHOR_ROUNDS = 200


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def _turn(client, session_id: str, n: int, headers: dict[str, str]) -> list[bytes]:
    """One ``say`` turn; returns the raw JSON of every SSE frame (SystemExit unless it committed)."""
    body = {"requestId": f"bench-{uuid.uuid4().hex[:10]}", "type": "submit_actions", "sessionId": session_id,
            "payload": {"actions": [{"kind": "say", "text": f"I look around ({n})."}]}}
    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json", **headers)
    frames: list[bytes] = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume")
        for chunk in response:
            for line in chunk.split(b"\n"):
                if line.startswith(b"data:"):
                    frames.append(line[len(b"data:"):])
    last = json.loads(frames[-1]) if frames else {}
    if last.get("type") != "execution.completed" or last.get("payload", {}).get("committed") is not True:
        raise SystemExit(f"turn {n} did not commit: {last}")
    return frames


def _anchor_transaction(session_id: str) -> list[float]:
    """CPU (ms) of ANCHOR_ROUNDS bare one-row ORM transactions, each."""
    from django.db import transaction

    from plugins_app.models import PluginData

    out = []
    for i in range(ANCHOR_ROUNDS):
        started = time.process_time()
        with transaction.atomic():
            PluginData.objects.create(session_id=session_id, plugin_id="bench-anchor", namespace="anchor",
                                      key=f"k{i}", value={"i": i})
        out.append((time.process_time() - started) * 1000)
    PluginData.objects.filter(session_id=session_id, plugin_id="bench-anchor").delete()
    return out


def _anchor_frames(frames: list[list[bytes]]) -> list[float]:
    """CPU (ms) of json.dumps over each turn's frames (decoded once beforehand, not timed)."""
    out = []
    for turn_frames in frames:
        decoded = [json.loads(f) for f in turn_frames]
        started = time.process_time()
        for frame in decoded:
            json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        out.append((time.process_time() - started) * 1000)
    return out


def warmed_session(client) -> tuple[str, dict[str, str]]:
    """A builtin-world session past setup that has played WARMUP_TURNS turns (the in-process
    worker idle afterwards): (session id, auth headers). Call inside bench_database."""
    from covel import inprocess
    from tests.bench.turn_overhead import _session_builtin

    session_id, headers = _session_builtin(client)
    inprocess.wait_idle()
    for n in range(WARMUP_TURNS):
        _turn(client, session_id, n, headers)
    inprocess.wait_idle()
    return session_id, headers


def run(shape: str, turns: int) -> None:
    with bench_database(shape):
        from django.test import Client

        from covel import inprocess

        client = Client()
        session_id, headers = warmed_session(client)
        cpu_ms, wall_ms, frames = [], [], []
        for n in range(turns):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            frames.append(_turn(client, session_id, 100 + n, headers))
            inprocess.wait_idle()
            cpu_ms.append((time.process_time() - cpu0) * 1000)
            wall_ms.append((time.perf_counter() - wall0) * 1000)
        tx = statistics.median(_anchor_transaction(session_id))
        dumps = statistics.median(_anchor_frames(frames))
        cpu = statistics.median(cpu_ms)
        print(f"{shape:9s} full-game turn CPU median={cpu:.1f}ms p95={_pct(cpu_ms, 0.95):.1f}ms "
              f"(wall median={statistics.median(wall_ms):.1f}ms, frames/turn={statistics.median(map(len, frames)):.0f}, "
              f"turns={turns}; issue 18 budget {TARGET_CPU_MS} ms across all processes: "
              f"{'within' if cpu <= TARGET_CPU_MS else 'OVER'} in this process alone)\n"
              f"{'':9s} anchor one-row ORM transaction CPU median={tx:.3f}ms (turn = {cpu / tx:.0f}x) | "
              f"anchor json.dumps of the turn's frames CPU median={dumps:.3f}ms (turn = {cpu / dumps:.0f}x)",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="embedded")
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    run(args.shape, args.turns)


if __name__ == "__main__":
    main()
