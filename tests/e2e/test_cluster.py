"""The harness itself: two daphne processes answer on their own ports over one PostgreSQL and
Redis, and both Celery workers consume the turns queue."""
from __future__ import annotations

import httpx


def test_both_web_processes_are_healthy_on_the_hosted_shape(cluster):
    # given the running cluster
    # when each web process is asked for its health
    bodies = [httpx.get(f"{url}/api/health", timeout=10).json() for url in cluster.base_urls]

    # then both answer ok, on PostgreSQL and Redis, as two distinct processes
    for body in bodies:
        assert body["status"] == "ok", body
        assert body["storage"]["data"]["backend"] == "pg"
        assert {"database", "redis", "workers"} <= set(body["checks"]), body["checks"]
        assert all(body["checks"][name] == {"ok": True} for name in ("database", "redis", "migrations")), body["checks"]
        # and every queue is consumed by both workers (celery inspect, issue 23)
        consumers = body["checks"]["workers"]["queues"]
        assert set(consumers) == {"turns", "jobs", "media", "worldgen"}, body["checks"]["workers"]
        assert all(len(names) == len(cluster.workers) for names in consumers.values()), body["checks"]["workers"]
    assert bodies[0]["bootId"] != bodies[1]["bootId"]


def test_both_workers_answer_on_the_broker(cluster):
    # given the running cluster's two Celery workers
    from celery import Celery

    app = Celery(broker=cluster.redis_url)
    try:
        # when they are pinged over the broker
        replies = app.control.broadcast("ping", reply=True, limit=2, timeout=10.0)
    finally:
        app.close()

    # then exactly our two workers answer
    names = sorted(name for reply in replies for name in reply)
    assert len(names) == 2, replies
    assert all(proc.is_running() for proc in cluster.workers)
    assert cluster.beat is not None and cluster.beat.is_running(), cluster.beat and cluster.beat.log_tail()
