"""Benchmark: event fan-out on the hosted shape (PostgreSQL + Redis, a real daphne process).

1. Delivery latency, commit → frame received by the subscriber, for 1 and 200 concurrent
   subscribers of one session (median and p99). The committing thread is in this process and
   stamps the moment its transaction committed; subscribers are raw HTTP/1.0 sockets on this
   process's event loop, stamping the moment a frame's bytes arrive (client overhead included).
   Anchor (issue 18), measured in the same run with the same client: a bare asyncio + Redis pub/sub
   SSE server (tests/bench/event_fanout_bare.py); its publisher stamps the "commit" and PUBLISHes
   the event on the session's Redis channel, the server (redis-py asyncio SUBSCRIBE) writes one SSE
   frame to every connected client. The two servers alternate, LATENCY_ROUNDS rounds; printed:
   every round's median/p99, the median over rounds of each figure, and the median over rounds of
   the per-round ratio ours/anchor (each round's pair measured back to back: the steadier ratio on
   a machine others load too). Target: p99 at 200 subscribers <= 1.5x the anchor.
2. RSS (and thread count) of one fresh daphne process before and while it holds 1,000 idle
   subscriptions (1,000 sessions, one stream each).
3. Foreign traffic (issue 18): CPU seconds (utime+stime, /proc) of a web process that idly watches
   one session while FOREIGN_MESSAGES wake-ups of another session are published as fast as a
   pipelined client can, beside the anchor measured at the same moment: an identical daphne process
   that also runs the pre-issue-18 listener (``PSUBSCRIBE covel:*``, every message decoded and
   dispatched; tests/bench/event_fanout_pattern_asgi.py). Both also print their CPU over an equally
   long quiet window, and both must still deliver an event of the watched session afterwards.

Targets (issue 8): p99 < 50 ms at 200 subscribers; < 150 MB RSS with 1,000 idle subscriptions.
Issue 18: p99 at 200 subscribers <= 1.5x the bare asyncio + Redis server.
Issue 18: a process receives only the sessions it serves (foreign traffic costs it ~nothing).

Run: .venv/bin/python tests/bench/event_fanout.py [latency] [rss] [foreign] [--rounds N] [--inline-events]
(default: all sections, LATENCY_ROUNDS rounds; --inline-events: see INLINE_EVENTS; needs PostgreSQL at TEST_DATABASE_URL and
Redis at TEST_REDIS_URL, as `make test-hosted`; builds and drops its own test database)
"""
from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test_hosted")

EVENTS_1 = 100
EVENTS_200 = 100
GAP_SECONDS = 0.05
IDLE_SUBSCRIPTIONS = 1000
FOREIGN_MESSAGES = 50_000
#: Rounds of the latency part; each round measures both servers (order alternating).
LATENCY_ROUNDS = 4


class Subscriber:
    """One SSE stream over a raw socket; records arrival time per event seq."""

    def __init__(self, port: int, session_id: str, arrivals: dict[int, float] | None) -> None:
        self.port, self.session_id, self.arrivals = port, session_id, arrivals
        self.connected = asyncio.Event()
        self.writer = None
        self.task = None

    async def start(self) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(
            f"GET /api/events/stream?sessionId={self.session_id} HTTP/1.0\r\nHost: 127.0.0.1:{self.port}\r\n\r\n".encode()
        )
        await self.writer.drain()
        self.task = asyncio.create_task(self._read(reader))
        await asyncio.wait_for(self.connected.wait(), 30)

    async def _read(self, reader) -> None:
        buffer = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            now = time.perf_counter()
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                if b"system.connected" in block:
                    self.connected.set()
                    continue
                for line in block.split(b"\n"):
                    if line.startswith(b"id: ") and self.arrivals is not None:
                        self.arrivals[int(line.rsplit(b":", 1)[1])] = now

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


#: ``--inline-events``: the commit's wake-up carries its rows (``eventbus.notify(..., events)``), as
#: turns.events would publish with the change proposed for issue 18; simulated in this process only.
INLINE_EVENTS = False


def _append_paced(session_id: str, count: int, commits: dict[int, float]) -> None:
    from django.db import connections, transaction

    from turns.events import NewEvent, session_events_append

    try:
        for i in range(count):
            stamp: dict = {}
            with transaction.atomic():
                # Registered before the append's own on_commit (the publish): runs first after COMMIT.
                transaction.on_commit(lambda: stamp.__setitem__("t", time.perf_counter()))
                (row,) = session_events_append(session_id, [NewEvent(type="event.emitted", topic="game", payload={"i": i})])
                if INLINE_EVENTS:
                    from turns.event_stream import wire_events

                    transaction.on_commit(lambda row=row: _inline_notify(session_id, row.seq, wire_events([row])))
            commits[row.seq] = stamp["t"]
            time.sleep(GAP_SECONDS)
    finally:
        connections.close_all()


class _BareFanout:
    """The latency anchor in its own process (tests/bench/event_fanout_bare.py) and its publisher:
    ``publish_paced`` is the bare counterpart of ``_append_paced`` (stamp "commit", PUBLISH)."""

    def __init__(self) -> None:
        import subprocess

        from django.conf import settings

        from tests.turns.events_support import REPO, free_port

        self.port = free_port()
        # Pub/sub channels are global to the Redis server (not per db): unique per run.
        self.prefix = f"covel-bench-bare:{os.getpid()}:"
        self.url = settings.REDIS_URL
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "bench" / "event_fanout_bare.py"), str(self.port), self.url, self.prefix],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"
        self.seq = 0

    def head(self, session_id: str) -> int:
        return self.seq

    def publish_paced(self, session_id: str, count: int, commits: dict[int, float]) -> None:
        import json

        import redis

        client = redis.Redis.from_url(self.url)
        try:
            for i in range(count):
                self.seq += 1
                t = time.perf_counter()
                client.publish(self.prefix + session_id, json.dumps(
                    {"seq": self.seq, "type": "event.emitted", "topic": "game", "payload": {"i": i}}))
                commits[self.seq] = t
                time.sleep(GAP_SECONDS)
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def _our_head(session_id: str) -> int:
    from sessions.models import Session
    from tests.turns.events_support import in_thread

    return in_thread(lambda: Session.objects.get(pk=session_id).event_seq)


def _inline_notify(session_id: str, seq: int, events: list) -> None:
    _NOTIFY(session_id, seq, events)


_NOTIFY = None


def _inline_events_on() -> None:
    """Simulate the proposed turns.events change: its own seq-only wake-up becomes a no-op and the
    benchmark's on_commit (right after it) publishes the rows inline."""
    global INLINE_EVENTS, _NOTIFY
    from covel import eventbus

    INLINE_EVENTS, _NOTIFY = True, eventbus.notify
    eventbus.notify = lambda session_id, seq, events=None: _NOTIFY(session_id, seq, events) if events else None


async def _latency(port: int, session_id: str, subscribers: int, events: int, publish=None, head_of=None) -> list[float]:
    """Commit → frame received samples (ms) of ``events`` paced commits seen by ``subscribers``
    streams of ``session_id`` at ``port``; ``publish``/``head_of`` default to ours (append + head)."""
    publish = publish or _append_paced
    head_of = head_of or _our_head
    arrivals = [dict() for _ in range(subscribers)]
    subs = [Subscriber(port, session_id, arrivals[i]) for i in range(subscribers)]
    for i in range(0, subscribers, 50):
        await asyncio.gather(*(s.start() for s in subs[i:i + 50]))
    await asyncio.sleep(0.5)  # every subscription live, connect work done
    head = await asyncio.to_thread(head_of, session_id)
    commits: dict[int, float] = {}
    thread = threading.Thread(target=publish, args=(session_id, events, commits))
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # let the last frames land
    for s in subs:
        s.close()
    samples = []
    missing = 0
    for got in arrivals:
        for seq, committed_at in commits.items():
            if seq <= head:
                continue
            if seq in got:
                samples.append((got[seq] - committed_at) * 1000.0)
            else:
                missing += 1
    if missing:
        print(f"  !! {missing} frames not received")
    return samples


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


async def _idle_rss(port: int, pid: int, session_ids: list[str]) -> tuple[float, float, int, int]:
    before = _proc_status(pid)
    subs = [Subscriber(port, sid, None) for sid in session_ids]
    for i in range(0, len(subs), 100):
        await asyncio.gather(*(s.start() for s in subs[i:i + 100]))
    await asyncio.sleep(3.0)  # a few poll rounds with all feeds alive
    during = _proc_status(pid)
    for s in subs:
        s.close()
    return (int(before["VmRSS"].split()[0]) / 1024, int(during["VmRSS"].split()[0]) / 1024,
            int(before["Threads"]), int(during["Threads"]))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _publish_foreign(count: int) -> None:
    """``count`` wake-ups of a session nobody watches, pipelined (the fastest a client publishes)."""
    import json

    import redis
    from django.conf import settings

    from covel import eventbus

    client = redis.Redis.from_url(settings.REDIS_URL)
    channel = eventbus._PREFIX + "session:bench-foreign"
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.publish(channel, json.dumps({"seq": i}))
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()
    client.close()


class _AppDaphne:
    """A daphne process serving ``app`` (events_support.Daphne serves covel.asgi only)."""

    def __init__(self, env: dict[str, str], app: str) -> None:
        import subprocess

        import httpx
        from django.conf import settings

        from tests.turns.events_support import REPO, free_port

        self.port = free_port()
        self.log = open(Path(settings.COVEL_HOME) / f"daphne-{self.port}.log", "w+")
        self.proc = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "daphne"), "-b", "127.0.0.1", "-p", str(self.port), app],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"daphne {app} did not come up")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/health", timeout=1).status_code in (200, 503):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


async def _foreign_cpu(servers: list, watched: str) -> list[tuple[float, float, bool]]:
    """Per server: (CPU s over a quiet window, CPU s while FOREIGN_MESSAGES are published, whether
    an event of the watched session still arrived afterwards)."""

    arrivals = [dict() for _ in servers]
    subs = [Subscriber(server.port, watched, arrivals[i]) for i, server in enumerate(servers)]
    await asyncio.gather(*(s.start() for s in subs))
    await asyncio.sleep(1.0)
    started = [_cpu_seconds(server.proc.pid) for server in servers]
    t0 = time.perf_counter()
    await asyncio.to_thread(_publish_foreign, FOREIGN_MESSAGES)
    # Until every listener drained what Redis queued for it: no process used CPU for 0.6 s.
    last, calm = list(started), 0
    while calm < 3 and time.perf_counter() - t0 < 60:
        await asyncio.sleep(0.2)
        now = [_cpu_seconds(server.proc.pid) for server in servers]
        calm = calm + 1 if all(b - a < 0.02 for a, b in zip(last, now)) else 0
        last = now
    window = time.perf_counter() - t0
    busy = [b - a for a, b in zip(started, last)]
    quiet_start = [_cpu_seconds(server.proc.pid) for server in servers]
    await asyncio.sleep(window)
    quiet = [_cpu_seconds(server.proc.pid) - before for server, before in zip(servers, quiet_start)]
    commits: dict[int, float] = {}
    await asyncio.to_thread(_append_paced, watched, 1, commits)
    await asyncio.sleep(1.0)
    for s in subs:
        s.close()
    (seq,) = commits
    return [(q, b, seq in got) for q, b, got in zip(quiet, busy, arrivals)]


def _latency_part(env: dict[str, str], servers: list, rounds: int) -> None:
    """Both servers alternately, ``rounds`` times; prints each round and the medians with ratios."""
    from tests.turns.events_support import Daphne

    ours = Daphne(env)
    servers.append(ours)
    bare = _BareFanout()
    servers.append(bare)
    runs = {"ours": ours, "bare": bare}
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    print(f"  delivery latency, commit -> frame received; {rounds} rounds, servers alternating"
          f" (anchor: bare asyncio + Redis pub/sub SSE server, same client)")
    for r in range(rounds):
        order = ("ours", "bare") if r % 2 == 0 else ("bare", "ours")
        for count, events in ((1, EVENTS_1), (200, EVENTS_200)):
            for name in order:
                server = runs[name]
                if name == "ours":
                    samples = asyncio.run(_latency(server.port, "bench-0", count, events))
                else:
                    samples = asyncio.run(_latency(server.port, "bench-0", count, events, bare.publish_paced, bare.head))
                figures = (statistics.median(samples), _p(samples, 0.99), max(samples))
                results.setdefault((name, count), []).append(figures)
                print(f"    round {r + 1} {name:4} {count:>3} subscriber(s): median {figures[0]:6.2f} ms   p99 {figures[1]:6.2f} ms"
                      f"   max {figures[2]:6.2f} ms   ({len(samples)} frames, {events} commits)")
    print(f"  median over {rounds} rounds:")
    for count, events in ((1, EVENTS_1), (200, EVENTS_200)):
        o = [statistics.median(f[i] for f in results[("ours", count)]) for i in range(3)]
        b = [statistics.median(f[i] for f in results[("bare", count)]) for i in range(3)]
        target = "   (target: p99 <= 1.5x the anchor)" if count == 200 else ""
        print(f"  {count:>3} subscriber(s): commit -> frame received  median {o[0]:6.2f} ms   p99 {o[1]:6.2f} ms   max {o[2]:6.2f} ms")
        print(f"      anchor bare asyncio + Redis:          median {b[0]:6.2f} ms   p99 {b[1]:6.2f} ms   max {b[2]:6.2f} ms")
        pairs = list(zip(results[("ours", count)], results[("bare", count)]))
        r50 = statistics.median(x[0] / y[0] for x, y in pairs)
        r99 = statistics.median(x[1] / y[1] for x, y in pairs)
        print(f"      ratio of the medians above:           median {o[0] / b[0]:5.2f}x     p99 {o[1] / b[1]:5.2f}x")
        print(f"      median of per-round ratios:           median {r50:5.2f}x     p99 {r99:5.2f}x{target}")
    for server in (ours, bare):
        server.stop()
        servers.remove(server)


def main() -> None:
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
    from django.db import connection, connections
    from django.test.utils import setup_test_environment

    if settings.STORE_BACKEND != "pg":
        raise SystemExit("event_fanout measures the hosted shape: use covel.settings.test_hosted")
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    servers = []
    try:
        from sessions.models import Session
        from tests.turns.events_support import Daphne, server_env

        env = server_env(
            COVEL_SSE_MAX_CONNECTIONS_PER_SESSION="1000", COVEL_SSE_MAX_CONNECTIONS="5000", RATE_LIMIT_RPM="1000000",
        )
        Session.objects.bulk_create(
            [Session(id=f"bench-{i}", world_id="w", incarnation="i", event_epoch="bench") for i in range(IDLE_SUBSCRIPTIONS + 1)]
        )
        connections.close_all()

        args = sys.argv[1:]
        rounds = LATENCY_ROUNDS
        if "--rounds" in args:
            at = args.index("--rounds")
            rounds = int(args[at + 1])
            del args[at:at + 2]
        if "--inline-events" in args:
            args.remove("--inline-events")
            _inline_events_on()
        sections = set(args) or {"latency", "rss", "foreign"}
        print(f"event fan-out, hosted shape (PostgreSQL + Redis), one daphne process, {os.cpu_count()} CPUs")
        if "latency" in sections:
            _latency_part(env, servers, rounds)

        if "rss" in sections:
            fresh = Daphne(env)
            servers.append(fresh)
            rss_before, rss_during, threads_before, threads_during = asyncio.run(
                _idle_rss(fresh.port, fresh.proc.pid, [f"bench-{i}" for i in range(1, IDLE_SUBSCRIPTIONS + 1)])
            )
            print(
                f"  daphne RSS: {rss_before:6.1f} MB idle server -> {rss_during:6.1f} MB holding {IDLE_SUBSCRIPTIONS} idle "
                f"subscriptions ({IDLE_SUBSCRIPTIONS} sessions); threads {threads_before} -> {threads_during}"
                f"; {(rss_during - rss_before) * 1024 / IDLE_SUBSCRIPTIONS:.1f} KiB per stream"
                " (beside its anchors: tests/bench/idle_streams.py)"
            )
            fresh.stop()
            servers.clear()

        if "foreign" in sections:
            channel_bus = _AppDaphne(env, "covel.asgi:application")
            servers.append(channel_bus)
            pattern_bus = _AppDaphne(env, "tests.bench.event_fanout_pattern_asgi:application")
            servers.append(pattern_bus)
            (q_new, b_new, ok_new), (q_old, b_old, ok_old) = asyncio.run(_foreign_cpu([channel_bus, pattern_bus], "bench-0"))
            print(f"  idle-watching daphne (1 stream) while {FOREIGN_MESSAGES:,} wake-ups of another session are published:")
            print(f"    per-channel SUBSCRIBE (now):  CPU {b_new:5.2f} s   (quiet window of the same length {q_new:5.2f} s)"
                  f"   watched event delivered: {ok_new}")
            print(f"    PSUBSCRIBE covel:* (anchor):  CPU {b_old:5.2f} s   (quiet window of the same length {q_old:5.2f} s)"
                  f"   watched event delivered: {ok_old}")
            print(f"    foreign traffic: {max(b_new - q_new, 0) / FOREIGN_MESSAGES * 1e6:5.1f} us CPU/message now, "
                  f"{max(b_old - q_old, 0) / FOREIGN_MESSAGES * 1e6:5.1f} us/message with the pattern")
    finally:
        for server in servers:
            server.stop()
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
