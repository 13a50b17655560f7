"""Test shape (SQLite): the embedded default with a throw-away COVEL_HOME."""
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
# The suite runs on the SQLite file; a STORE_BACKEND=memory left in the shell would switch the whole
# run to the browser-private profile (its tests set STORE_BACKEND themselves).
os.environ.pop("STORE_BACKEND", None)

from .embedded import *  # noqa: E402,F401,F403
from .embedded import DATABASES  # noqa: E402

COVEL_HOME = _home
MEDIA_ROOT = _home / "media"
# A file database (not :memory:) so that worker threads and the test share committed rows.
DATABASES["default"]["TEST"] = {"NAME": str(_home / "test.db")}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
COVEL_SESSION_LOCK_TIMEOUT_SECONDS = 5
COVEL_ALLOWED_HOSTS = ["testserver"]
# No background timers in the test process: tests run reapers and re-senders themselves.
COVEL_INPROCESS_TIMERS = False
# Every emitted event type must be a spec CovelEventType or a documented addition (turns.engine.trace).
COVEL_STRICT_EVENT_TYPES = os.environ.get("COVEL_STRICT_EVENT_TYPES", "1") != "0"
# Tests never reach outside this machine: a refresh without its own local source fails at once.
COVEL_MODEL_DB_URL = "http://127.0.0.1:9/model_prices_and_context_window.json"
