"""A real ``celery -A covel worker`` process for hosted-shape tests (the ``celery_worker_process``
fixture): it runs on the test database and consumes a queue private to the test, so concurrent runs
never take each other's tasks. Used by tests/e2e/test_actions_worker.py, tests/e2e/
test_runtime_jobs_worker.py and the worker tests of tests/turns (test_control, test_provider_keys)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

WORKER_START_SECONDS = 60


def _database_url() -> str:
    db = settings.DATABASES["default"]
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += ":" + db["PASSWORD"]
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def celery_worker_process(settings):
    """A real worker on a private ``turns`` queue; this process routes turn tasks to it."""
    from covel.celery import app

    queue = f"turns-test-{uuid.uuid4().hex[:8]}"
    routes = {**app.conf.task_routes, "turns.*": {"queue": queue}}
    old_routes = app.conf.task_routes
    app.conf.task_routes = routes
    app.amqp.flush_routes()
    app.amqp.router = app.amqp.Router()
    settings.COVEL_INPROCESS_WORKER = False
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "covel.settings.hosted",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "COVEL_HOME": str(settings.COVEL_HOME),
        "COVEL_INPROCESS_WORKER": "0",
        "COVEL_JSON_LOGS": "0",
        "COVEL_DB_CONN_MAX_AGE": "0",
    }
    log_path = Path(settings.COVEL_HOME) / f"{queue}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "covel", "worker", "-Q", queue, "--concurrency", "2",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()
        app.conf.task_routes = old_routes
        app.amqp.flush_routes()
        app.amqp.router = app.amqp.Router()
        if process.returncode not in (0, -signal.SIGTERM):
            print(log_path.read_text(errors="replace")[-4000:])
