"""Benchmark: turn overhead — time from POST /api/actions to the stream's execution.completed with the
offline scripted provider (no model latency), and SQL queries per turn, for both shapes.

Shapes:
  embedded  SQLite (covel.settings.test), in-process worker threads, local event bus.
  hosted    PostgreSQL + Redis (covel.settings.test_hosted), a real ``celery -A covel worker``
            subprocess on a private queue, Redis bus; needs the servers of `make test-hosted`.

Plugin sets:
  minimal   a bare ``playing`` session with only ``narrator`` (no world package, no setup).
  builtin   a session in the builtin world ``hollow-reach-light`` with the world's default plugin set
            (pregame, world-init, char-creator, narrator, world-time, codex, guide, affinity), created
            over POST /api/sessions and played through setup (start_session, the character form, the
            opening continuation) before the timed ``say`` turns.
  packs     each builtin pack (plugins_app/packs/builtin.yaml: traditional-story, dialogue-mode,
            low-cost): a session in ``hollow-reach-light`` with the pack's ``requested`` plugins (what
            GET /api/worlds/:id/plugin-plan defaults to for that pack), played through setup the
            same way. Each pack line also gives its overhead over the ``minimal`` anchor (median ms
            and queries per turn), so ``minimal`` always runs with the packs.

Run: .venv/bin/python tests/bench/turn_overhead.py [--shape embedded|hosted|both]
     [--plugins minimal|builtin|packs|both|all] [--turns 40]   (both = minimal + builtin; all = every set)
Prints, per shape and plugin set: median and p95 in milliseconds, and the median number of SQL
queries one turn runs (web request + relay + worker; counted in-process, so on the hosted shape with
the in-process worker against PostgreSQL). Targets (issue 6, minimal set): median < 40 ms embedded,
< 80 ms hosted.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_support import SHAPES, NoMigrations, StatementRecorder  # noqa: E402

TARGET_MS = {"embedded": 40, "hosted": 80}
WARMUP_TURNS = 3
BUILTIN_WORLD = "hollow-reach-light"
PLUGIN_SETS = ("minimal", "builtin")
PACK_IDS = ("traditional-story", "dialogue-mode", "low-cost")
ANCHOR = "minimal"


def pack_plugins(pack_id: str) -> list[str]:
    """The ``requested`` plugin ids of builtin pack ``pack_id`` (plugins_app/packs/builtin.yaml)."""
    import yaml

    packs = yaml.safe_load((ROOT / "plugins_app" / "packs" / "builtin.yaml").read_text(encoding="utf-8"))
    return list(next(p for p in packs if p["id"] == pack_id)["requested"])


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _session(plugins: str, client) -> tuple[str, dict[str, str]]:
    """A session ready for ``say`` turns: (session id, extra request headers)."""
    if plugins in PACK_IDS:
        return _session_builtin(client, pack_plugins(plugins))
    return _session_builtin(client) if plugins == "builtin" else (_session_minimal().id, {})


def _stream(client, body: dict, headers: dict[str, str]) -> list[dict]:
    import warnings

    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json", **headers)
    frames = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume")
        for chunk in response:
            for line in chunk.split(b"\n"):
                if line.startswith(b"data:"):
                    frames.append(json.loads(line[len(b"data:"):]))
    completed = [f for f in frames if f["type"] == "execution.completed"]
    if len(completed) != 1 or completed[0]["payload"].get("committed") is not True:
        raise SystemExit(f"{body['type']} did not commit: {[(f['type'], f['payload']) for f in frames][-3:]}")
    return frames


def _session_builtin(client, plugins: list[str] | None = None) -> tuple[str, dict[str, str]]:
    """POST /api/sessions in BUILTIN_WORLD with ``plugins`` (None: its default plugins), then play
    setup to ``playing``."""
    request = {"worldId": BUILTIN_WORLD, **({"plugins": plugins} if plugins is not None else {})}
    response = client.post("/api/sessions", data=json.dumps(request), content_type="application/json")
    if response.status_code != 201:
        raise SystemExit(f"session create failed: {response.status_code} {response.content[:300]!r}")
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
                    values[spec["name"]] = spec.get("defaultValue") if spec.get("defaultValue") in options else options[0]
                elif "name" in spec["name"].lower():
                    values[spec["name"]] = "Ada Quill"
                else:
                    values[spec["name"]] = "Quiet and watchful."
            actions.append({"kind": "act", "fields": values, "interaction": {
                "turnId": frame["turnId"], "interactionId": interaction["interactionId"], "type": interaction["type"]}})
        frames = _stream(client, body("submit_actions", {"actions": actions}), headers)
    from sessions.models import Session

    phase = Session.objects.get(pk=session_id).phase
    if phase != "playing":
        raise SystemExit(f"session {session_id} still in phase {phase!r} after setup")
    return session_id, headers


def _session_minimal():
    from sessions.models import Character, Session

    session = Session.objects.create(
        id=f"bench-{uuid.uuid4().hex[:8]}", world_id="bench-world", incarnation=uuid.uuid4().hex,
        event_epoch=uuid.uuid4().hex[:8], phase="playing", active_plugins=["narrator"],
        seats=[{"id": "main", "controller": "human", "role": "player", "characters": "auto"}],
    )
    Character.objects.create(session=session, character_id="hero", name="Hero", type="player")
    return session


def _turn(client, session_id: str, n: int, headers: dict[str, str] | None = None) -> tuple[float, dict]:
    import warnings

    body = {"requestId": f"bench-{uuid.uuid4().hex[:10]}", "type": "submit_actions", "sessionId": session_id,
            "payload": {"actions": [{"kind": "say", "text": f"I look around ({n})."}]}}
    started = time.perf_counter()
    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json", **(headers or {}))
    last = b""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume")
        for chunk in response:
            for line in chunk.split(b"\n"):
                if line.startswith(b"data:"):
                    last = line
    elapsed_ms = (time.perf_counter() - started) * 1000
    frame = json.loads(last[len(b"data:"):])
    if frame["type"] != "execution.completed" or frame["payload"].get("committed") is not True:
        raise SystemExit(f"turn {n} did not commit: {frame}")
    return elapsed_ms, frame


def _worker(settings, queue: str):
    db = settings.DATABASES["default"]
    url = f"postgres://{db.get('USER') or ''}{':' + db['PASSWORD'] if db.get('PASSWORD') else ''}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "covel.settings.hosted", "DATABASE_URL": url,
           "REDIS_URL": settings.REDIS_URL, "COVEL_HOME": str(settings.COVEL_HOME), "COVEL_INPROCESS_WORKER": "0",
           "COVEL_JSON_LOGS": "0"}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "covel", "worker", "-Q", queue, "--concurrency", "1",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _worker_stop(worker) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)


def run_shape(shape: str, turns: int, plugin_sets: tuple[str, ...] = PLUGIN_SETS) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = SHAPES[shape]
    import django

    django.setup()
    from django.conf import settings

    settings.MIGRATION_MODULES = NoMigrations()
    import logging

    logging.disable(logging.INFO)
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from covel import inprocess

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    worker = None
    try:
        client = Client()
        counter = StatementRecorder()
        counter.install()
        from covel.celery import app

        routes = dict(app.conf.task_routes or {})
        anchor: tuple[float, float] | None = None  # (median ms, queries/turn) of ANCHOR
        for plugins in plugin_sets:
            # Queries per turn: everything in this process (request, relay, in-process worker).
            settings.COVEL_INPROCESS_WORKER = True
            app.conf.task_routes = routes
            app.amqp.flush_routes()
            app.amqp.router = app.amqp.Router()
            session_id, headers = _session(plugins, client)
            inprocess.wait_idle()
            for n in range(WARMUP_TURNS):
                _turn(client, session_id, n, headers)
            inprocess.wait_idle()
            query_counts = []
            times_ms = []
            for n in range(turns):
                before = counter.count
                elapsed, _frame = _turn(client, session_id, n, headers)
                inprocess.wait_idle()
                query_counts.append(counter.count - before)
                if shape == "embedded":
                    times_ms.append(elapsed)
            if shape == "hosted":
                # Timing: a real Celery worker process on a private queue.
                queue = f"turns-bench-{uuid.uuid4().hex[:8]}"
                app.conf.task_routes = {**routes, "turns.*": {"queue": queue}}
                app.amqp.flush_routes()
                app.amqp.router = app.amqp.Router()
                settings.COVEL_INPROCESS_WORKER = False
                if worker is not None:
                    _worker_stop(worker)
                worker = _worker(settings, queue)
                session_id, headers = _session(plugins, client)
                for n in range(WARMUP_TURNS):
                    _turn(client, session_id, n, headers)
                for n in range(turns):
                    elapsed, _frame = _turn(client, session_id, n, headers)
                    times_ms.append(elapsed)
            median = statistics.median(times_ms)
            queries = statistics.median(query_counts)
            target = f" (target median < {TARGET_MS[shape]} ms: {'met' if median < TARGET_MS[shape] else 'NOT met'})" \
                if plugins == ANCHOR else ""
            if plugins == ANCHOR:
                anchor = (median, queries)
            elif plugins in PACK_IDS and anchor is not None:
                target = f" (vs {ANCHOR}: {median - anchor[0]:+.1f}ms, {queries - anchor[1]:+.0f} queries/turn)"
            print(
                f"{shape:9s} plugins={plugins:17s} turns={turns} median={median:.1f}ms "
                f"p95={_percentile(times_ms, 0.95):.1f}ms queries/turn={queries:.0f}{target}",
                flush=True,
            )
    finally:
        if worker is not None:
            _worker_stop(worker)
        from django.db import connections

        from sessions.locks import lock_connections_close

        lock_connections_close()
        connections.close_all()
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"], verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["embedded", "hosted", "both"], default="both")
    parser.add_argument("--plugins", choices=[*PLUGIN_SETS, "packs", "both", "all"], default="all")
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    if args.shape == "both":
        for shape in ("embedded", "hosted"):
            # One Django setup per process: each shape runs in its own interpreter.
            subprocess.run([sys.executable, __file__, "--shape", shape, "--plugins", args.plugins,
                            "--turns", str(args.turns)], check=True)
        return
    sets = {"both": PLUGIN_SETS, "all": (*PLUGIN_SETS, *PACK_IDS), "packs": (ANCHOR, *PACK_IDS)}
    run_shape(args.shape, args.turns, sets.get(args.plugins, (args.plugins,)))


if __name__ == "__main__":
    main()
