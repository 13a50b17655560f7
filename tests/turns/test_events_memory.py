"""Memory per idle event stream (issue 18, README "Event fan-out"): what an open, idle
GET /api/events/stream keeps allocated in the server once its head is sent, measured with
tracemalloc on the real ASGI application in this process (the server's per-connection objects —
daphne/Twisted — are not in this figure; tests/bench/idle_streams.py measures the whole process)."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
from pathlib import Path

import pytest

from tests.turns.events_support import AsgiSse, db, make_session
from turns import event_stream

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 50
WARM = 10
#: Bytes of Python allocations per idle stream attributed to the server side (ours, Django's
#: leftovers, the ORM's cached statements) in this harness, by shape: measured ~5.8 KB embedded and
#: ~7.0 KB hosted (plus the stream's Redis lease and channel); 8.5 / 9.7 KB before issue 18 (an
#: asyncio.Event and a __dict__ per feed, closures, Django's context variables kept).
#: Hosted, one full parallel `make test` measured 8.43 KB (the process's other threads left by
#: earlier tests allocate inside the window too); alone it stays near 7.0 KB.
BOUND_BYTES = {"sqlite": 7200, "memory": 7200, "pg": 8800}
_HARNESS = str(Path(__file__).resolve().parent)  # the fake client's own objects are not the server's


def _deployment_slots() -> int | None:
    """Open-stream slots the deployment counts in Redis (hosted), None embedded."""
    if not isinstance(event_stream.connection_registry, event_stream.DeploymentConnectionRegistry):
        return None
    from covel.ratelimit import redis_client

    return redis_client().zcard(event_stream.DeploymentConnectionRegistry._ALL)


async def _slots_given_back(expected: int | None, seconds: float = 5.0) -> int | None:
    # Hosted, a stream that ends on the event loop leaves its Redis release to the keeper thread.
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        slots = await asyncio.to_thread(_deployment_slots)
        if slots is None or slots <= expected or asyncio.get_running_loop().time() > deadline:
            return slots
        await asyncio.sleep(0.1)


def _server_side_bytes(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    total = 0
    for stat in after.compare_to(before, "traceback"):
        innermost = next((f for f in reversed(stat.traceback) if "site-packages" in f.filename
                          or "/lib/python" not in f.filename), None)
        if innermost is not None and not innermost.filename.startswith(_HARNESS):
            total += stat.size_diff
    return total


async def test_an_idle_stream_keeps_little_allocated_once_its_head_is_sent(settings):
    settings.COVEL_STRICT_EVENT_TYPES = False
    settings.COVEL_SSE_MAX_CONNECTIONS_PER_SESSION = STREAMS + 5
    settings.RATE_LIMIT_RPM = 100_000
    settings.COVEL_EVENT_POLL_MS = 600_000  # no safety-net poll (its IN (...) statements get cached) meanwhile
    sessions = await db(lambda: [make_session() for _ in range(STREAMS + WARM)])
    gc.collect()  # streams earlier tests left unclosed release their slots now, not mid-measurement
    already_open = event_stream.connection_registry.count()
    slots_before = await asyncio.to_thread(_deployment_slots)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for session in sessions[:WARM]:  # first requests' one-time costs (imports, caches, pools)
                await (await stack.enter_async_context(AsgiSse(f"sessionId={session.pk}"))).frame()
        tracemalloc.start(10)
        try:
            async with contextlib.AsyncExitStack() as stack:
                await asyncio.sleep(0.2)
                gc.collect()
                before = tracemalloc.take_snapshot()
                for session in sessions[WARM:]:
                    sse = await stack.enter_async_context(AsgiSse(f"sessionId={session.pk}"))
                    assert (await sse.frame()).event == "system.connected"
                await asyncio.sleep(0.2)
                gc.collect()
                during = tracemalloc.take_snapshot()
                open_streams = event_stream.connection_registry.count()
        finally:
            tracemalloc.stop()
        slots_after = await _slots_given_back(slots_before)
    finally:
        event_stream.db_connections_close()
    per_stream = _server_side_bytes(before, during) / STREAMS
    assert open_streams - already_open == STREAMS
    assert per_stream <= BOUND_BYTES[settings.STORE_BACKEND], f"{per_stream:.0f} bytes per idle stream"
    assert event_stream.connection_registry.count() == already_open
    assert slots_after == slots_before  # hosted: every slot given back in Redis too
