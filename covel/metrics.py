"""Prometheus metrics (prometheus-client): what operators' dashboards scrape from ``GET /metrics``.

Multiprocess-safe. With ``PROMETHEUS_MULTIPROC_DIR`` set (the hosted settings default it to
``$COVEL_HOME/metrics``; deployments point it at an empty per-host/per-pod directory and wipe it
when they start) every process — each daphne, each Celery worker and its prefork children —
writes its samples to files there and any process's ``/metrics`` reports the sum over all of
them (prometheus-client's multiprocess mode). Without it a process reports only itself (the
embedded shape: one process). Live gauges of processes that are gone (a killed worker child) are
dropped at every scrape.

What is measured (label values in brackets):

- ``covel_http_request_duration_seconds`` [method, route (the URL pattern, not the path), status]:
  request → response head (a stream's head, not its end).
- ``covel_turn_duration_seconds`` [stage: queue (accepted → claimed by a worker), lock (claimed →
  session lock held), run (the engine: runtimes, model calls, commit), total (accepted → outcome
  recorded)]; ``covel_turns_total`` [outcome: committed, aborted, failed, rejected, interrupted,
  requeued].
- ``covel_runtime_job_duration_seconds`` [stage: queue, run, commit]; ``covel_runtime_jobs_total``
  [outcome: a terminal job status, or requeued / waiting_for_credentials].
- ``covel_lease_expiries_total`` [kind: runtime_job (lease expired → orphaned), execution (worker
  silent → interrupted)].
- ``covel_sse_streams_open`` [stream: action, events]: streams open now.
- ``covel_model_call_duration_seconds`` / ``covel_model_call_errors_total`` [provider, code]: one
  model call (each attempt of a fallback chain), until its stream ended or failed.
- ``covel_celery_tasks_total`` [task, state: succeeded, failed, retried] and
  ``covel_celery_task_duration_seconds`` [task]: the Celery side, recorded in the workers (a
  worker's own endpoint: ``metrics_serve``, COVEL_WORKER_METRICS_PORT).
- At scrape time, from the database and the broker (``scrape_collector_install``; the jobs app
  installs its collectors): ``covel_queue_depth`` / ``covel_queue_oldest_age_seconds`` [queue],
  rows by status (``covel_executions``, ``covel_runtime_jobs_by_status``,
  ``covel_world_generations``), ``covel_queue_consumers`` [queue] (covel.workers).
"""
from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from typing import Any, Callable, Iterable

from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess, values

logger = logging.getLogger("covel.metrics")

if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and values.ValueClass is values.MutexValue:
    # prometheus-client was imported before the settings chose the directory (the celery CLI loads
    # Flower's command plugin, which imports it, before the app): pick the multiprocess value class
    # now, before the metrics below are made (they read ``values.ValueClass`` when created).
    values.ValueClass = values.get_value_class()

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

REQUEST_SECONDS = Histogram("covel_http_request_duration_seconds", "HTTP request to response head.",
                            ["method", "route", "status"], buckets=_LATENCY_BUCKETS)
TURN_SECONDS = Histogram("covel_turn_duration_seconds", "Turn latency by stage (queue, lock, run, total).",
                         ["stage"], buckets=_SLOW_BUCKETS)
TURNS = Counter("covel_turns", "Turn executions by outcome.", ["outcome"])
JOB_SECONDS = Histogram("covel_runtime_job_duration_seconds", "Runtime job latency by stage (queue, run, commit).",
                        ["stage"], buckets=_SLOW_BUCKETS)
JOBS = Counter("covel_runtime_jobs", "Runtime jobs by outcome.", ["outcome"])
LEASE_EXPIRIES = Counter("covel_lease_expiries", "Leases that expired with their work unfinished.", ["kind"])
SSE_OPEN = Gauge("covel_sse_streams_open", "Open SSE streams.", ["stream"], multiprocess_mode="livesum")
MODEL_SECONDS = Histogram("covel_model_call_duration_seconds", "One model call, until its stream ended.",
                          ["provider"], buckets=_SLOW_BUCKETS)
MODEL_ERRORS = Counter("covel_model_call_errors", "Model calls that failed.", ["provider", "code"])
CELERY_TASKS = Counter("covel_celery_tasks", "Celery tasks run, by end state.", ["task", "state"])
CELERY_TASK_SECONDS = Histogram("covel_celery_task_duration_seconds", "Celery task run time.", ["task"],
                                buckets=_SLOW_BUCKETS)

STREAM_ACTION = "action"
STREAM_EVENTS = "events"

ScrapeCollector = Callable[[], Iterable[Any]]  # () -> prometheus metric families
_scrape_collectors: list[ScrapeCollector] = []


def is_multiprocess() -> bool:
    """True when samples are shared through PROMETHEUS_MULTIPROC_DIR (see module docstring)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR")) and values.ValueClass is not values.MutexValue


def scrape_collector_install(collector: ScrapeCollector) -> None:
    """Add a function called at every scrape that returns metric families (e.g. queue depths read
    from the database). Apps above covel install theirs at start-up; installing twice is a no-op."""
    if collector not in _scrape_collectors:
        _scrape_collectors.append(collector)


class _Fn:
    def __init__(self, fn: ScrapeCollector) -> None:
        self.fn = fn

    def collect(self):
        try:
            yield from self.fn()
        except Exception as exc:  # a scrape reports what it can; the failure is logged
            logger.warning("metrics collector %s failed (%s: %s)", getattr(self.fn, "__name__", self.fn),
                           type(exc).__name__, exc)


def _dead_processes_forget() -> None:
    """Drop the live-gauge files of processes that no longer exist (a killed worker child)."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path or not os.path.isdir(path):
        return
    for name in os.listdir(path):
        if not name.startswith("gauge_live") or not name.endswith(".db"):
            continue
        pid_text = name[:-3].rsplit("_", 1)[-1]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(int(pid_text), path)
        except PermissionError:
            pass


def metrics_render() -> tuple[bytes, str]:
    """The exposition text of every metric (see module docstring) and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    if is_multiprocess():
        _dead_processes_forget()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(REGISTRY)
    for collector in _scrape_collectors:
        registry.register(_Fn(collector))
    return generate_latest(registry), CONTENT_TYPE_LATEST


# --- recording helpers (never raise: a metric must not fail the work it measures) ----------------


def _safe(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:
        logger.debug("metric update failed", exc_info=True)


def request_observe(*, method: str, route: str, status: int, seconds: float) -> None:
    """One HTTP request (``route``: the URL pattern, so ids never become label values)."""
    _safe(lambda: REQUEST_SECONDS.labels(method, route or "unmatched", str(status)).observe(seconds))


def turn_stage_observe(stage: str, seconds: float | None) -> None:
    """One stage of one turn (queue, lock, run, total); None (unknown) is skipped."""
    if seconds is not None and seconds >= 0:
        _safe(lambda: TURN_SECONDS.labels(stage).observe(seconds))


def turn_outcome(outcome: str) -> None:
    """A turn execution ended (committed, aborted, failed, rejected, interrupted) or was requeued."""
    _safe(lambda: TURNS.labels(outcome).inc())


def job_stage_observe(stage: str, seconds: float | None) -> None:
    """One stage of one runtime job (queue, run, commit)."""
    if seconds is not None and seconds >= 0:
        _safe(lambda: JOB_SECONDS.labels(stage).observe(seconds))


def job_outcome(outcome: str) -> None:
    """A runtime job reached a terminal status, was requeued or waits for credentials."""
    _safe(lambda: JOBS.labels(outcome).inc())


def lease_expired(kind: str) -> None:
    """Work whose lease/heartbeat expired was given up (runtime_job, execution)."""
    _safe(lambda: LEASE_EXPIRIES.labels(kind).inc())


def stream_opened(stream: str) -> None:
    """An SSE stream (``stream``: action, events) opened; pair with ``stream_closed``."""
    _safe(lambda: SSE_OPEN.labels(stream).inc())


def stream_closed(stream: str) -> None:
    """An SSE stream opened with ``stream_opened`` ended."""
    _safe(lambda: SSE_OPEN.labels(stream).dec())


def model_call_observe(*, provider: str, seconds: float, error_code: str | None = None) -> None:
    """One model call on ``provider`` that took ``seconds``; ``error_code``: ModelError.code when it failed."""
    _safe(lambda: MODEL_SECONDS.labels(provider or "unknown").observe(seconds))
    if error_code:
        _safe(lambda: MODEL_ERRORS.labels(provider or "unknown", error_code).inc())


def celery_task_observe(*, task: str, state: str, seconds: float | None = None) -> None:
    """A Celery task ended in ``state`` (succeeded, failed, retried) after ``seconds``."""
    _safe(lambda: CELERY_TASKS.labels(task or "unknown", state).inc())
    if seconds is not None:
        _safe(lambda: CELERY_TASK_SECONDS.labels(task or "unknown").observe(seconds))


def process_exited(pid: int) -> None:
    """A process of this host ended (a Celery pool child): drop its live gauges."""
    if is_multiprocess():
        _safe(lambda: multiprocess.mark_process_dead(pid))


# --- access --------------------------------------------------------------------------------------


def scrape_allowed(authorization: str | None, session_token: str | None = None) -> bool:
    """For the worker endpoint (no Django request): the rule of ``covel.auth.require_operator`` —
    always in the self tier; in demo/commercial only with the operator token (``Authorization:
    Bearer <token>`` or ``X-Session-Token``)."""
    if settings.DEPLOYMENT_TIER not in ("demo", "commercial"):
        return True
    expected = settings.COVEL_OPERATOR_TOKEN or ""
    presented = []
    if authorization and authorization[:7].lower() == "bearer ":
        presented.append(authorization[7:].strip())
    if session_token:
        presented.append(session_token.strip())
    return bool(expected) and any(hmac.compare_digest(t.encode(), expected.encode()) for t in presented if t)


def metrics_view(request):
    """GET /metrics: the Prometheus exposition (text format 0.0.4).

    401 ``operator_token_required`` (spec error envelope) in the demo/commercial tiers without the
    operator token; 405 ``method_not_allowed`` for other methods than GET/HEAD."""
    from django.http import HttpResponse

    from covel.auth import is_operator, owner_checks_enabled
    from covel.errors import error_response

    if request.method not in ("GET", "HEAD"):
        response = error_response(405, f"Method not allowed: {request.method} {request.path}", "method_not_allowed")
        response["Allow"] = "GET, HEAD"
        return response
    if owner_checks_enabled() and not is_operator(request):  # covel.auth.require_operator's rule
        return error_response(401, "Operator token required", "operator_token_required")
    body, content_type = metrics_render()
    return HttpResponse(body, content_type=content_type)


# --- a worker's own endpoint ---------------------------------------------------------------------

_server: dict[str, Any] = {}


def metrics_serve(port: int, host: str = "127.0.0.1") -> bool:
    """Serve ``/metrics`` from this process on ``host:port`` on a daemon thread (a Celery worker's
    main process, COVEL_WORKER_METRICS_PORT), with the same operator-token rule as the web route.
    With PROMETHEUS_MULTIPROC_DIR it reports the worker's prefork children too. False (logged)
    when the port cannot be bound; a second call is a no-op."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    if _server:
        return True

    def app(environ, start_response):
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b'{"error":"Not found","code":"not_found"}']
        if not scrape_allowed(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_X_SESSION_TOKEN")):
            start_response("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"error":"Operator token required","code":"operator_token_required"}']
        body, content_type = metrics_render()
        start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    class _Quiet(WSGIRequestHandler):
        def log_message(self, *args):  # scrapes are not worth a log line each
            pass

    try:
        server = make_server(host, port, app, handler_class=_Quiet)
    except OSError as exc:
        logger.error("worker metrics: cannot listen on %s:%s (%s)", host, port, exc)
        return False
    thread = threading.Thread(target=server.serve_forever, name="covel-metrics", daemon=True)
    thread.start()
    _server.update(server=server, thread=thread, started=time.time())
    logger.info("worker metrics on http://%s:%s/metrics", host, port)
    return True


def metrics_serve_stop() -> None:
    """Stop the endpoint ``metrics_serve`` started (tests; a worker just exits)."""
    server = _server.pop("server", None)
    if server is not None:
        server.shutdown()
        server.server_close()
    _server.clear()
