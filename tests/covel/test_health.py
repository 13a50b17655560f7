"""GET /api/health tells whether work can run (issue 23): with Celery workers (no in-process pool) it
reports which workers consume each queue (covel.workers: ``celery inspect active_queues``, cached
briefly) and answers 503 ``degraded`` when a queue has none. Runs on both halves: Celery's
in-memory broker (SQLite) and the hosted test Redis, where no worker of this run listens."""
from __future__ import annotations

import pytest

from covel import workers

pytestmark = pytest.mark.django_db


@pytest.fixture
def celery_workers_only(settings):
    settings.COVEL_INPROCESS_WORKER = False
    settings.COVEL_WORKER_INSPECT_TIMEOUT_SECONDS = 0.3
    workers.queue_consumers_forget()
    yield
    workers.queue_consumers_forget()


def test_health_degrades_when_no_worker_consumes_a_queue(client, celery_workers_only):
    response = client.get("/api/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["code"] == "service_degraded"
    check = body["checks"]["workers"]
    assert check["ok"] is False and check["missing"] == ["turns", "jobs", "media", "worldgen"]
    assert check["queues"] == {"turns": [], "jobs": [], "media": [], "worldgen": []}
    assert body["error"] == "Service degraded: no worker consumes queue(s) turns, jobs, media, worldgen"
    assert body["checks"]["database"]["ok"] is True


def test_the_worker_answer_is_cached_briefly(client, celery_workers_only, settings):
    settings.COVEL_WORKER_CHECK_CACHE_SECONDS = 60
    first = client.get("/api/health").json()["checks"]["workers"]["checkedAt"]
    assert client.get("/api/health").json()["checks"]["workers"]["checkedAt"] == first


def test_the_in_process_worker_needs_no_worker_check(client, settings):
    settings.COVEL_INPROCESS_WORKER = True
    response = client.get("/api/health")
    assert response.status_code == 200 and "workers" not in response.json()["checks"]
