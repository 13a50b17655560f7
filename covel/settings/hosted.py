"""Hosted shape: PostgreSQL (DATABASE_URL, psycopg 3) and Redis (REDIS_URL). Refuses to start without them."""
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from covel.env import env_bool, env_int, env_str

from .base import *  # noqa: F401,F403
from .base import COVEL_HOME, LOGGING

DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
if not DATABASE_URL:
    raise ImproperlyConfigured("The hosted shape needs DATABASE_URL (postgres://user@host:5432/db).")
if not REDIS_URL:
    raise ImproperlyConfigured("The hosted shape needs REDIS_URL (redis://127.0.0.1:6379/0).")
if not DATABASE_URL.startswith(("postgres://", "postgresql://")):
    raise ImproperlyConfigured("DATABASE_URL must be a PostgreSQL URL (postgres://...).")

STORE_BACKEND = "pg"
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("COVEL_DB_CONN_MAX_AGE", 0, minimum=0), conn_health_checks=True
    )
}
# A persistent connection is checked before it is reused (after a PostgreSQL restart it is dead).
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A connect to an unreachable server fails in seconds instead of hanging a request or a stream.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
# Connection pool per process (Django's PostgreSQL pooling on psycopg_pool): a request, a stream read
# or a turn borrows an open connection instead of opening one (issue: 7 new connections per turn).
# COVEL_DB_POOL_SIZE connections at most per process (0 = no pool: one connection per use, or
# COVEL_DB_CONN_MAX_AGE persistent ones); health-checked on borrow (CONN_HEALTH_CHECKS), so after a
# PostgreSQL restart the dead ones are replaced. A borrow waits at most COVEL_DB_POOL_TIMEOUT_SECONDS.
# The session locks keep their own dedicated connections (sessions/locks.py).
COVEL_DB_POOL_SIZE = env_int("COVEL_DB_POOL_SIZE", 16, minimum=0)
if COVEL_DB_POOL_SIZE:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 1, "max_size": COVEL_DB_POOL_SIZE, "max_idle": 120,
        "timeout": env_int("COVEL_DB_POOL_TIMEOUT_SECONDS", 10, minimum=1),
    }
CHANNEL_LAYERS = {
    "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
}
COVEL_INPROCESS_WORKER = env_bool("COVEL_INPROCESS_WORKER", False)
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # An unacknowledged message (acks_late) goes back to the queue after this long: longer than any
    # turn or job runs. A message lost sooner (a worker killed with it prefetched, a Redis restart)
    # is re-sent by the beat's re-senders (COVEL_EXECUTION_RESEND_AFTER_SECONDS,
    # COVEL_JOB_REQUEUE_AFTER_SECONDS), and a second delivery finds its row claimed.
    "visibility_timeout": 3600,
    # Bounded socket waits and keep-alive, so a vanished Redis is noticed and reconnected.
    "socket_connect_timeout": 5,
    "socket_timeout": 30,
    "socket_keepalive": True,
    "health_check_interval": 25,
    "retry_on_timeout": True,
}
COVEL_JSON_LOGS = env_bool("COVEL_JSON_LOGS", True)
if COVEL_JSON_LOGS:
    LOGGING["handlers"]["console"]["formatter"] = "json"
# Celery workers and beat log through LOGGING above (covel/celery.py setup_logging), so one shape
# has one log format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Prometheus metrics of every process on this host or pod (covel/metrics.py, multiprocess mode):
# deployments point PROMETHEUS_MULTIPROC_DIR at an empty directory and wipe it when they start.
# Set before prometheus-client is imported (the apps import it once Django is set up).
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(COVEL_HOME / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
