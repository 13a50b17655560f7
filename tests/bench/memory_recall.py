"""Benchmark: the semantic memory index and the memory plugin (issue 22), each figure printed beside
an anchor measured in the same run.

1. Offline embedding throughput (wordllama, the `memory` slot's default): items/s embedding 1,000
   short story sentences in batches of 64, beside one bare single-item embedding call (ms).
2. Index write cost per message: ``memory_index_write`` of one new message at a time (what a
   commit's ``jobs.memory_index_update`` adds), ms per item, beside a bare ``SELECT 1`` (ms).
3. Recall latency p50/p95 of the vector side of memory-search (``memory_vector_rank``: hash check,
   query embedding, the session's vectors, exact cosine) at 1,000 and 10,000 indexed items in one
   session — with the process's decoded vectors current, and for the first recall after a write
   (which reloads them) — beside the bare single-item embedding call and ``SELECT 1``.
4. Index size per item: database growth / items (SQLite: page_count × page_size; PostgreSQL:
   pg_total_relation_size of turns_memoryvector), beside the raw vector bytes (dim × 4).
5. What the memory plugin adds to a turn of the builtin game (offline scripted model): median ms of
   back-to-back turns without it, with it (extraction runs as a detached settle job, so each turn
   also waits for the previous turn's extraction), and with it when the previous extraction had
   finished (the prompt segment only); plus the extraction job's own median duration.

Run: .venv/bin/python tests/bench/memory_recall.py [--shape embedded|hosted] [--turns 12]
(hosted: PostgreSQL + Redis of `make test-hosted`, with the in-process worker).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = {"embedded": "covel.settings.test", "hosted": "covel.settings.test_hosted"}
WORDS = ("harbour", "lantern", "tide", "merchant", "silver", "key", "oak", "river", "bell", "tower", "storm", "letter",
         "smith", "widow", "ferry", "market", "bridge", "cellar", "candle", "debt", "promise", "map", "wolf", "chapel")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def _sentence(n: int) -> str:
    w = [WORDS[(n * k + k) % len(WORDS)] for k in (1, 3, 5, 7, 11)]
    return f"The {w[0]} near the {w[1]} was where {w[2]} and {w[3]} met, before the {w[4]} turned ({n})."


def _setup(shape: str):
    os.environ["DJANGO_SETTINGS_MODULE"] = SHAPES[shape]
    import django

    django.setup()
    import logging

    logging.disable(logging.INFO)
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return connection


def _select_ms(connection, runs: int = 200) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _db_bytes(connection) -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            return pages * cursor.fetchone()[0]
        cursor.execute("SELECT pg_total_relation_size('turns_memoryvector')")
        return int(cursor.fetchone()[0])


def _session(session_id: str):
    from sessions.models import Session

    return Session.objects.create(id=session_id, world_id="bench-world", incarnation=uuid.uuid4().hex,
                                  event_epoch=uuid.uuid4().hex[:8], phase="playing", active_plugins=["narrator"])


def index_figures(connection) -> None:
    from turns.engine.memory_index import SOURCE_ARCHIVAL, MemoryItem, memory_index_write, memory_vector_rank
    from turns.engine.providers.config import ModelConfig, ModelRouter
    from turns.engine.providers.embeddings import embedder_for

    choice = embedder_for(ModelRouter(ModelConfig()))
    embedder = choice.embedder
    if embedder is None:
        raise SystemExit("no offline embedding model (is wordllama installed?)")
    embedder.embed(["warm up"])
    single = []
    for n in range(50):
        started = time.perf_counter()
        embedder.embed([_sentence(n)])
        single.append((time.perf_counter() - started) * 1000)
    single_ms = statistics.median(single)
    texts = [_sentence(n) for n in range(1000)]
    started = time.perf_counter()
    for start in range(0, len(texts), 64):
        embedder.embed(texts[start:start + 64])
    rate = len(texts) / (time.perf_counter() - started)
    select_ms = _select_ms(connection)
    print(f"embedding  offline {embedder.model_name}: {rate:,.0f} items/s (batches of 64)   "
          f"anchor: one bare embedding call {single_ms:.2f} ms", flush=True)

    # index write cost per message: one item per write, as a commit's update adds them
    session = _session(f"bench-{uuid.uuid4().hex[:8]}")
    writes = []
    for n in range(100):
        item = MemoryItem(f"message:w{n}", "recall", _sentence(10_000 + n), role="assistant")
        started = time.perf_counter()
        memory_index_write(session.id, choice, [item])
        writes.append((time.perf_counter() - started) * 1000)
    print(f"write      one message per index write: median {statistics.median(writes):.2f} ms, "
          f"p95 {_percentile(writes, 0.95):.2f} ms   anchors: SELECT 1 {select_ms:.3f} ms, bare embedding {single_ms:.2f} ms",
          flush=True)

    for size in (1_000, 10_000):
        session = _session(f"bench-{uuid.uuid4().hex[:8]}")
        items = [MemoryItem(f"lorebook:e{n}", SOURCE_ARCHIVAL, _sentence(n), kind="lorebook", label=f"e{n}")
                 for n in range(size)]
        before = _db_bytes(connection)
        for start in range(0, size, 500):
            memory_index_write(session.id, choice, items[start:start + 500])
        grown = _db_bytes(connection) - before
        dim = len(embedder.embed(["x"])[0])
        latencies = []
        for n in range(30):
            started = time.perf_counter()
            ranked = memory_vector_rank(session.id, choice, f"where did the {WORDS[n % len(WORDS)]} go", items)
            latencies.append((time.perf_counter() - started) * 1000)
            assert ranked and len(ranked) == size
        cold = []
        for n in range(8):  # the first recall after a commit wrote one item: the process reloads the vectors
            extra = MemoryItem(f"lorebook:x{size}-{n}", SOURCE_ARCHIVAL, _sentence(50_000 + n), kind="lorebook", label="x")
            memory_index_write(session.id, choice, [extra])
            items.append(extra)
            started = time.perf_counter()
            memory_vector_rank(session.id, choice, f"where did the {WORDS[n]} go", items)
            cold.append((time.perf_counter() - started) * 1000)
        print(f"recall     {size:>6,} items: p50 {_percentile(latencies, 0.5):.1f} ms, p95 {_percentile(latencies, 0.95):.1f} ms"
              f" (vectors cached); first recall after a write p50 {_percentile(cold, 0.5):.1f} ms"
              f"   anchors: SELECT 1 {select_ms:.3f} ms, bare embedding {single_ms:.2f} ms", flush=True)
        print(f"size       {size:>6,} items: {grown / size:,.0f} bytes/item in the database   anchor: raw vector {dim * 4} bytes",
              flush=True)


def _say(client, session_id: str, headers: dict[str, str], n: int) -> float:
    from tests.bench.turn_overhead import _turn

    elapsed, _frame = _turn(client, session_id, n, headers)
    return elapsed


def _game(client, extra: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    from tests.bench.turn_overhead import BUILTIN_WORLD, _stream

    plan = client.get(f"/api/worlds/{BUILTIN_WORLD}/plugin-plan").json()
    response = client.post("/api/sessions", data=json.dumps({"worldId": BUILTIN_WORLD,
                                                            "plugins": list(plan["defaultPluginIds"]) + list(extra)}),
                           content_type="application/json")
    created = response.json()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {created['ownerToken']}"}
    session_id = created["id"]

    def body(type_: str, payload: dict) -> dict:
        return {"requestId": f"bench-{uuid.uuid4().hex[:10]}", "type": type_, "sessionId": session_id, "payload": payload}

    frames = _stream(client, body("start_session", {}), headers)
    for _round in range(4):
        requested = [f for f in frames if f["type"] == "interaction.requested"]
        if not requested:
            break
        actions = []
        for frame in requested:
            interaction = frame["payload"]["interaction"]
            values = {}
            for spec in interaction.get("fields") or []:
                if spec["type"] == "select":
                    options = [o["value"] if isinstance(o, dict) else o for o in spec.get("options") or []]
                    values[spec["name"]] = options[0]
                else:
                    values[spec["name"]] = "Ada Quill" if "name" in spec["name"].lower() else "Quiet and watchful."
            actions.append({"kind": "act", "fields": values, "interaction": {
                "turnId": frame["turnId"], "interactionId": interaction["interactionId"], "type": interaction["type"]}})
        frames = _stream(client, body("submit_actions", {"actions": actions}), headers)
    return session_id, headers


def turn_figures(turns: int) -> None:
    from django.test import Client

    from covel import inprocess
    from jobs.models import RuntimeJob

    client = Client()
    results = {}
    for label, extra, settle_first in (("without memory", (), False), ("with memory (back-to-back)", ("memory",), False),
                                       ("with memory, extraction done", ("memory",), True)):
        session_id, headers = _game(client, extra)
        inprocess.wait_idle()
        for n in range(2):
            _say(client, session_id, headers, n)
        inprocess.wait_idle()
        times = []
        for n in range(turns):
            if settle_first:
                inprocess.wait_idle()
            times.append(_say(client, session_id, headers, 100 + n))
        inprocess.wait_idle()
        results[label] = statistics.median(times)
        if extra:
            jobs = RuntimeJob.objects.filter(session_id=session_id, runtime_id="memory/extract", status="succeeded")
            durations = [(j.updated_at - j.created_at).total_seconds() * 1000 for j in jobs]
            results["extraction job (queued → committed)"] = statistics.median(durations)
    base = results["without memory"]
    for label, value in results.items():
        extra = "" if label == "without memory" or "job" in label else f"   ({value - base:+.1f} ms)"
        print(f"turn       {label}: median {value:.1f} ms{extra}   anchor: turn without memory {base:.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="embedded")
    parser.add_argument("--turns", type=int, default=12)
    args = parser.parse_args()
    connection = _setup(args.shape)
    from django.conf import settings

    try:
        print(f"shape={args.shape} database={connection.vendor}", flush=True)
        index_figures(connection)
        turn_figures(args.turns)
    finally:
        from django.db import connections

        from sessions.locks import lock_connections_close

        lock_connections_close()
        connections.close_all()
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"], verbosity=0)


if __name__ == "__main__":
    main()
