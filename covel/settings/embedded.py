"""Embedded default: SQLite under COVEL_HOME, in-memory channel layer, in-process worker, scripted model."""
from covel.env import env_bool, env_path, env_str

from .base import *  # noqa: F401,F403
from .base import COVEL_HOME

_sqlite_path = env_path("SQLITE_PATH", COVEL_HOME / "data" / "covel.db")

STORE_BACKEND = "sqlite"
_sqlite_path.parent.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_sqlite_path),
        "OPTIONS": {
            # WAL lets the in-process worker threads read while one writes; IMMEDIATE makes a
            # writer take the lock at BEGIN instead of failing mid-transaction.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
    }
}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
COVEL_INPROCESS_WORKER = True
# The personal instance's own adapter (scripted, loopback endpoints) may run background jobs
# (spec 004: 嵌入式宿主…可以显式确认自己的 adapter 可用).
COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = env_bool("COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES", True)
REDIS_URL = env_str("REDIS_URL")
