"""Embedded default: SQLite under COVEL_HOME, in-memory channel layer, in-process worker, scripted model."""
import os

from django.core.exceptions import ImproperlyConfigured

from covel import desktop as _desktop
from covel.env import env_bool, env_choice, env_path, env_str

from .base import *  # noqa: F401,F403
from .base import COVEL_DESKTOP_REST, COVEL_HOME

# Desktop mode: the SQLite file is <data_root>/covel.db, data_root from <COVEL_HOME>/config.toml
# (PUT /api/config/data-root rewrites it; read here, so a change applies at the next start).
_data_root = (_desktop.config_data_root(COVEL_HOME) if COVEL_DESKTOP_REST else None) or COVEL_HOME / "data"
_sqlite_path = env_path("SQLITE_PATH", _data_root / "covel.db")

# spec 004 §存储后端: sqlite (default) or memory, the browser-private profile (README "The
# browser-private profile"); pg is the hosted shape (covel.settings.hosted).
STORE_BACKEND = env_choice("STORE_BACKEND", "sqlite", ("sqlite", "memory", "pg"))
if STORE_BACKEND == "pg":
    raise ImproperlyConfigured("STORE_BACKEND=pg needs DATABASE_URL (postgres://user@host:5432/db).")
if STORE_BACKEND == "memory":
    # The browser-private profile is a public site without a Host check (spec 004 §生产 MemoryStore
    # 例外): a host allow-list there is a configuration mistake, refused at start-up.
    if env_str("COVEL_ALLOWED_HOSTS"):
        raise ImproperlyConfigured("COVEL_ALLOWED_HOSTS cannot be set with STORE_BACKEND=memory: the browser-private "
                                   "profile answers every Host (unset it, or use STORE_BACKEND=sqlite)")
    _sqlite_path = None
else:
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
if STORE_BACKEND == "memory":
    # One SQLite database in this process's memory behind the same models, migrated at start-up
    # (covel.startup); nothing survives a restart. The memdb VFS (a name starting with "/" is
    # shared by every connection of the process) and not ``mode=memory&cache=shared``: a shared
    # cache locks per table and answers "database table is locked" at once instead of waiting
    # (busy timeout), which the in-process worker threads and request threads hit constantly.
    DATABASES["default"]["NAME"] = f"file:/covel-memory-{os.getpid()}?vfs=memdb"
    DATABASES["default"]["OPTIONS"]["init_command"] = "PRAGMA foreign_keys=ON;"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
COVEL_INPROCESS_WORKER = True
# The personal instance's own adapter (scripted, loopback endpoints) may run background jobs
# (spec 004: 嵌入式宿主…可以显式确认自己的 adapter 可用).
COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = env_bool("COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES", True)
REDIS_URL = env_str("REDIS_URL")
