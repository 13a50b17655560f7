"""Test shape (hosted): PostgreSQL at TEST_DATABASE_URL and Redis at TEST_REDIS_URL (local defaults)."""
import atexit
import os
import shutil
import tempfile
from pathlib import Path

_home = Path(tempfile.mkdtemp(prefix="covel-test-home-"))
_home_owner = os.getpid()
# Removed when the process that made it exits (not a forked worker child that inherited the hook).
atexit.register(lambda: os.getpid() == _home_owner and shutil.rmtree(_home, ignore_errors=True))
os.environ["COVEL_HOME"] = str(_home)
# This process's own metrics directory: an xdist worker inherits the controller's environment, and
# two test processes sharing one directory would count each other's requests (tests/covel/test_metrics.py).
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(_home / "metrics")
os.environ["DATABASE_URL"] = os.environ.get("TEST_DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/covel"
_redis_url = os.environ.get("TEST_REDIS_URL") or "redis://127.0.0.1:6379/15"
# Under pytest-xdist each worker process counts down from TEST_REDIS_URL's db number (gw0: 15,
# gw1: 14, ...), so rate-limit counters and stream slots of one worker never meet another's.
_xdist = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist.startswith("gw") and _xdist[2:].isdigit():
    _base, _, _number = _redis_url.rpartition("/")
    if _number.isdigit():
        _redis_url = f"{_base}/{max(0, int(_number) - int(_xdist[2:]))}"
os.environ["REDIS_URL"] = _redis_url
os.environ.setdefault("COVEL_JSON_LOGS", "0")

from .hosted import *  # noqa: E402,F401,F403
from .hosted import DATABASES  # noqa: E402

COVEL_HOME = _home
MEDIA_ROOT = _home / "media"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 5
# Tests drive background work themselves: in-process threads unless a test starts a real worker.
COVEL_INPROCESS_WORKER = True
# Tests confirm the server's (scripted) model services for runtime jobs explicitly (spec 004
# canRunRuntimeJobWithServerServices); the credential rule's own tests turn it off.
COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = True
COVEL_ALLOWED_HOSTS = ["testserver"]
# A database per test run so that concurrent runs (developers, CI) never drop each other's tables.
# Subprocesses started by tests (daphne, Celery) must use DATABASES["default"]["NAME"] once
# pytest-django has switched to the test database.
DATABASES["default"]["TEST"] = {"NAME": f"test_covel_{os.getpid()}"}
# The test process runs the in-process worker and the stream relays on threads of its own, which
# pytest-django's database handling does not expect to share a pool with: no pool here (the
# daphne and Celery processes tests start use covel.settings.hosted, pool included).
DATABASES["default"]["OPTIONS"].pop("pool", None)
# No background timers in the test process: tests run reapers and re-senders themselves.
COVEL_INPROCESS_TIMERS = False
# Every emitted event type must be a spec CovelEventType or a documented addition (turns.engine.trace).
COVEL_STRICT_EVENT_TYPES = os.environ.get("COVEL_STRICT_EVENT_TYPES", "1") != "0"
# Tests never reach outside this machine: a refresh without its own local source fails at once.
COVEL_MODEL_DB_URL = "http://127.0.0.1:9/model_prices_and_context_window.json"
