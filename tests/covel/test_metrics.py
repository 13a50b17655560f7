"""GET /metrics (covel/metrics.py, issue 23): the Prometheus exposition operators scrape — request and
turn latency, turns and jobs by outcome, queue depth and age, open streams, model calls — guarded
like the other operator routes; a Celery worker's own endpoint; and, in the hosted half
(PROMETHEUS_MULTIPROC_DIR set by the hosted settings), samples written by another process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from covel import inprocess, metrics
from tests.covel.metrics_support import sample
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.engine.providers.base import ModelError, ModelRequest
from turns.engine.providers.config import ModelConfig, ModelRouter, SlotConfig

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]


def _scrape(client, **headers) -> str:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


def test_a_turn_shows_in_request_turn_queue_stream_and_model_metrics(client):
    # given the figures before a turn
    before = _scrape(client)
    session = session_make(characters=[("hero", "Hero", "player")])
    # when a player plays one turn
    frames = stream_read(post_action(client, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True
    assert inprocess.wait_idle(30)
    after = _scrape(client)

    # then the request, the turn's stages and outcome, and its model calls were measured
    def grew(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("covel_http_request_duration_seconds_count", method="POST", route="api/actions", status="200") == 1
    assert grew("covel_turns_total", outcome="committed") == 1
    for stage in ("queue", "lock", "run", "total"):
        assert grew("covel_turn_duration_seconds_count", stage=stage) == 1, stage
    assert grew("covel_model_call_duration_seconds_count", provider="scripted") >= 1
    # and nothing is left queued or streaming; the in-process pool consumes every queue
    assert sample(after, "covel_queue_depth", queue="turns") == 0
    assert sample(after, "covel_executions", status="committed") >= 1
    assert sample(after, "covel_sse_streams_open", stream="action") == 0
    assert sample(after, "covel_queue_consumers", queue="turns") == 1


def test_queued_work_shows_as_depth_and_age(client, settings):
    from tests.jobs.runtime_jobs_support import job_make

    session = session_make()
    job_make(session)
    text = _scrape(client)
    assert sample(text, "covel_queue_depth", queue="jobs") == 1
    assert sample(text, "covel_runtime_jobs_by_status", status="queued") == 1
    assert sample(text, "covel_queue_oldest_age_seconds", queue="jobs") >= 0


def test_model_call_errors_are_counted_by_provider_and_code():
    class Refusing:
        name = "refusing"

        def stream(self, request):
            raise ModelError("provider_error", "HTTP 500 from the host", status=500)
            yield  # a generator, like the real clients

    router = ModelRouter(ModelConfig(slots={"story": SlotConfig(name="story", provider="lab", base_url="http://127.0.0.1:9")}),
                         provider_keys={"lab": "sk"}, clients={"lab": Refusing()})
    before = sample(metrics.metrics_render()[0].decode(), "covel_model_call_errors_total", provider="lab",
                    code="provider_error")
    with pytest.raises(ModelError):
        list(router.stream(router.config.slot("story"), "m", ModelRequest(messages=[])))
    after = metrics.metrics_render()[0].decode()
    assert sample(after, "covel_model_call_errors_total", provider="lab", code="provider_error") - before == 1
    assert sample(after, "covel_model_call_duration_seconds_count", provider="lab") >= 1


def test_metrics_need_the_operator_token_in_shared_tiers(client, settings):
    # given the demo tier with an operator token
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = "op-token"
    # when a scrape comes without it, then 401 in the error envelope
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused.json() == {"error": "Operator token required", "code": "operator_token_required"}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    # and with it, the exposition
    assert "covel_turns_total" in _scrape(client, HTTP_AUTHORIZATION="Bearer op-token")


def test_metrics_answer_only_reads(client):
    response = client.post("/metrics")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, HEAD"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_workers_own_endpoint_serves_the_same_metrics_with_the_same_guard(settings):
    port = _free_port()
    assert metrics.metrics_serve(port) is True
    try:
        assert "covel_celery_tasks_total" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        settings.DEPLOYMENT_TIER = "commercial"
        settings.COVEL_OPERATOR_TOKEN = "op-token"
        refused = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert refused.status_code == 401 and refused.json()["code"] == "operator_token_required"
        allowed = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer op-token"}, timeout=5)
        assert allowed.status_code == 200
    finally:
        metrics.metrics_serve_stop()


def test_celery_task_ends_are_counted_by_task_and_state():
    from turns.tasks import run_execution

    before = sample(metrics.metrics_render()[0].decode(), "covel_celery_tasks_total", task="turns.run_execution",
                    state="succeeded")
    run_execution.apply(args=("00000000-0000-0000-0000-000000000000",))  # no such execution: nothing to do
    after = metrics.metrics_render()[0].decode()
    assert sample(after, "covel_celery_tasks_total", task="turns.run_execution", state="succeeded") - before == 1


@pytest.mark.hosted_only
def test_samples_of_another_process_are_reported(client):
    # given the hosted settings' multiprocess directory, shared with a worker process of this host
    assert metrics.is_multiprocess()
    script = "from covel import metrics; metrics.job_outcome('other-process-probe')"
    subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ}, check=True, timeout=60)
    # when this process is scraped, then the other process's sample is in the sum
    assert sample(_scrape(client), "covel_runtime_jobs_total", outcome="other-process-probe") >= 1
