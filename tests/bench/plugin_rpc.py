"""Benchmark: plugin-rpc action round trips (POST /api/sessions/:id/plugin-rpc, kind ``action``), with
and without a stored grant, beside an anchor measured in the same run.

Cases (one session each, the handler echoes its payload, scripted model not involved):
  anchor       GET /api/sessions/:id — an authorized session read, for the machine's speed now.
  builtin      ``beacon``'s ``ping``: a builtin plugin, no approval check at all.
  granted      ``lantern``'s ``ping``: a community plugin whose server-code and action grants (scope
               session) are stored; every call reads them from the database (no process cache).
  ungranted    the same call without a stored grant, as a client sees it: 202 approval-required →
               POST /api/approvals/:id/decision {allow, once} → the repeated request → 200.
               Timed over the three requests.

Shapes: embedded (SQLite, covel.settings.test) and hosted (PostgreSQL + Redis, covel.settings.test_hosted;
needs the servers of `make test-hosted`; action handlers run in the web process, no worker).

Run: .venv/bin/python tests/bench/plugin_rpc.py [--shape embedded|hosted|both] [--calls 60]
Prints per shape and case: median and p95 in milliseconds, and the median SQL queries per round trip.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.turn_overhead import SHAPES, _percentile, _QueryCounter  # noqa: E402

WARMUP = 5


def _session(plugins: list[str]):
    from sessions.models import Session

    return Session.objects.create(
        id=f"bench-{uuid.uuid4().hex[:8]}", world_id="bench-world", incarnation=uuid.uuid4().hex,
        event_epoch=uuid.uuid4().hex[:8], phase="playing", active_plugins=plugins,
        seats=[{"id": "main", "controller": "human", "role": "player", "characters": "auto"}],
    )


def _rpc(client, session_id: str, plugin_id: str, n: int):
    body = {"kind": "action", "pluginId": plugin_id, "action": "ping", "payload": {"n": n}}
    return client.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json")


def _ok(response, what: str):
    if response.status_code != 200:
        raise SystemExit(f"{what}: {response.status_code} {response.content[:300]!r}")
    return response


def _measure(calls: int, counter: _QueryCounter, once) -> tuple[list[float], list[int]]:
    for n in range(WARMUP):
        once(-1 - n)
    times, queries = [], []
    for n in range(calls):
        before = counter.count
        started = time.perf_counter()
        once(n)
        times.append((time.perf_counter() - started) * 1000)
        queries.append(counter.count - before)
    return times, queries


def run_shape(shape: str, calls: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="covel-bench-rpc-"))
    os.environ["COVEL_HOME"] = str(home)
    os.environ["DJANGO_SETTINGS_MODULE"] = SHAPES[shape]
    import django

    django.setup()
    from django.conf import settings

    class _NoMigrations(dict):
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    settings.COVEL_HOME = home
    os.environ["COVEL_HOME"] = str(home)  # the test settings pick their own; plugin code reads this one
    import logging

    logging.disable(logging.INFO)
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from plugins_app.registry import registry_reset
    from tests.sessions.grants_support import community_grants_allow
    from tests.sessions.lantern_support import builtin_dir_with_beacon, lantern_install

    setup_test_environment()
    if connection.vendor == "postgresql":  # a database of its own: never clobber a test run's
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = f"covel_bench_rpc_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_beacon(home / "builtin"))
        lantern_install()
        registry_reset()
        client = Client()
        counter = _QueryCounter()
        counter.install()
        builtin = _session(["narrator", "beacon"])
        granted = _session(["narrator", "lantern"])
        community_grants_allow(granted, "lantern", actions=["ping"])
        ungranted = _session(["narrator", "lantern"])
        community_grants_allow(ungranted, "lantern")  # server code granted; the action asked each time

        def ungranted_once(n: int) -> None:
            asked = _rpc(client, ungranted.id, "lantern", n)
            if asked.status_code != 202:
                raise SystemExit(f"ungranted: expected 202, got {asked.status_code} {asked.content[:200]!r}")
            approval = asked.json()["approvalId"]
            _ok(client.post(f"/api/approvals/{approval}/decision", data=json.dumps({"decision": "allow", "scope": "once"}),
                            content_type="application/json"), "decision")
            _ok(_rpc(client, ungranted.id, "lantern", n), "ungranted retry")

        cases = [
            ("anchor GET /api/sessions/:id", lambda n: _ok(client.get(f"/api/sessions/{builtin.id}"), "anchor")),
            ("builtin action", lambda n: _ok(_rpc(client, builtin.id, "beacon", n), "builtin")),
            ("community action, grant stored", lambda n: _ok(_rpc(client, granted.id, "lantern", n), "granted")),
            ("community action, no grant (202 -> allow once -> 200)", ungranted_once),
        ]
        for name, once in cases:
            times, queries = _measure(calls, counter, once)
            print(f"{shape:9s} {name:55s} calls={calls} median={statistics.median(times):.1f}ms "
                  f"p95={_percentile(times, 0.95):.1f}ms queries={statistics.median(queries):.0f}", flush=True)
    finally:
        from django.db import connections

        from sessions.locks import lock_connections_close

        lock_connections_close()
        connections.close_all()
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"], verbosity=0)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["embedded", "hosted", "both"], default="embedded")
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    if args.shape == "both":
        for shape in ("embedded", "hosted"):
            subprocess.run([sys.executable, __file__, "--shape", shape, "--calls", str(args.calls)], check=True)
        return
    run_shape(args.shape, args.calls)


if __name__ == "__main__":
    main()
