"""Every setting of the Covel server. Shapes (embedded/hosted/test) override only what differs.

Environment variables follow the spec (004 §关键环境变量 and §鉴权): DEPLOYMENT_TIER,
COVEL_DESKTOP_REST_TOKEN, COVEL_BIND_HOST, COVEL_ALLOWED_HOSTS, CORS_ORIGIN, RATE_LIMIT_RPM,
COVEL_HOME, PORT/SERVER_PORT.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from covel.env import env_bool, env_choice, env_int, env_list, env_path, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent
COVEL_VERSION = "0.1.0"
# A new id per process start, reported by /api/health so clients notice restarts.
COVEL_BOOT_ID = str(uuid.uuid4())

COVEL_HOME = env_path("COVEL_HOME", Path("~/.covel"))

SECRET_KEY = env_str("DJANGO_SECRET_KEY", "covel-embedded-not-secret-" + "x" * 20)
DEBUG = env_bool("COVEL_DEBUG", False)
# Host checking is done by covel.middleware.HostCheckMiddleware so that it answers in the
# spec's envelope (403 host_not_allowed) instead of Django's 400.
ALLOWED_HOSTS = ["*"]

DEPLOYMENT_TIER = env_choice("DEPLOYMENT_TIER", "self", ("self", "demo", "commercial"))
COVEL_OPERATOR_TOKEN = env_str("COVEL_DESKTOP_REST_TOKEN")
if DEPLOYMENT_TIER in ("demo", "commercial") and not COVEL_OPERATOR_TOKEN:
    raise ImproperlyConfigured(
        f"DEPLOYMENT_TIER={DEPLOYMENT_TIER} requires COVEL_DESKTOP_REST_TOKEN (the operator token)."
    )
# Desktop mode (spec 004 §桌面端的文件管理 API; README "Desktop mode"): the desktop client's file and
# configuration routes (config/keys, settings, proxy, data-root, open-folder, app-update). The
# desktop is a personal server: a shared tier with these routes is refused at start-up.
COVEL_DESKTOP_REST = env_bool("COVEL_DESKTOP_REST", False)
if COVEL_DESKTOP_REST and DEPLOYMENT_TIER != "self":
    raise ImproperlyConfigured(f"COVEL_DESKTOP_REST=1 is the desktop's personal server; DEPLOYMENT_TIER={DEPLOYMENT_TIER} cannot use it.")
# The command POST /api/config/open-folder runs with the path (unset: open / xdg-open when a display exists).
COVEL_DESKTOP_OPENER = env_str("COVEL_DESKTOP_OPENER")
COVEL_BIND_HOST = env_str("COVEL_BIND_HOST", "127.0.0.1")
COVEL_ALLOWED_HOSTS = env_list("COVEL_ALLOWED_HOSTS")
# django-cors-headers (spec 004 §鉴权 CORS): browser origins in CORS_ORIGIN (comma-separated, each
# scheme://host[:port]) may read /api responses, the event stream included; writes from any other
# origin are refused by covel.middleware.OriginCheckMiddleware before CORS runs.
CORS_ALLOWED_ORIGINS = env_list("CORS_ORIGIN")
CORS_URLS_REGEX = r"^/api(/.*)?$"
CORS_ALLOW_HEADERS = (
    "accept", "authorization", "content-type", "last-event-id", "x-session-token", "x-provider-keys",
    "x-slot-config", "x-plugin-user-settings", "x-model-relay", "x-requested-with",
)
CORS_EXPOSE_HEADERS = ("retry-after", "etag", "content-disposition", "allow")
CORS_PREFLIGHT_MAX_AGE = 600
RATE_LIMIT_RPM = env_int("RATE_LIMIT_RPM", 60, minimum=1)
# Read and sync routes of a session (spec 004 §状态查询, §消息历史): requests a minute per client and
# path, counted per deployment (covel/ratelimit.py). COVEL_CLIENT_IP_HEADER: the header a trusted
# proxy puts the client address in (e.g. X-Forwarded-For); unset: REMOTE_ADDR.
COVEL_READ_RATE_LIMIT_RPM = env_int("COVEL_READ_RATE_LIMIT_RPM", 120, minimum=1)
COVEL_SYNC_RATE_LIMIT_RPM = env_int("COVEL_SYNC_RATE_LIMIT_RPM", 60, minimum=1)
COVEL_CLIENT_IP_HEADER = env_str("COVEL_CLIENT_IP_HEADER", "") or ""
COVEL_PORT = env_int("PORT", env_int("SERVER_PORT", 3001, minimum=1, maximum=65535), minimum=1, maximum=65535)

# Event stream (spec 004 §事件系统), read at request time. Connection caps count this web process's
# open GET /api/events/stream responses (429 connection_limit_exceeded / global_connection_limit_exceeded).
COVEL_SSE_MAX_CONNECTIONS_PER_SESSION = env_int("COVEL_SSE_MAX_CONNECTIONS_PER_SESSION", 16, minimum=1)
COVEL_SSE_MAX_CONNECTIONS = env_int("COVEL_SSE_MAX_CONNECTIONS", 2000, minimum=1)
# Hosted: each open stream holds a slot lease in Redis this long, renewed every third of it, so the
# slots of a web process that died free themselves (turns.event_stream.DeploymentConnectionRegistry).
COVEL_SSE_SLOT_LEASE_SECONDS = env_int("COVEL_SSE_SLOT_LEASE_SECONDS", 60, minimum=2)
COVEL_SSE_KEEPALIVE_SECONDS = env_int("COVEL_SSE_KEEPALIVE_SECONDS", 15, minimum=1)
COVEL_SSE_HEARTBEAT_SECONDS = env_int("COVEL_SSE_HEARTBEAT_SECONDS", 30, minimum=1)
# How long an event stream or action stream keeps waiting (with keep-alives) while its database
# reads fail before it ends with a retryable error.occurred (code stream_interrupted). A PostgreSQL
# restart takes a few seconds; a longer outage ends the streams and clients reconnect.
COVEL_SSE_DB_OUTAGE_SECONDS = env_int("COVEL_SSE_DB_OUTAGE_SECONDS", 30, minimum=1)
# Safety-net poll of the event log (a lost wake-up delays delivery by at most this much).
COVEL_EVENT_POLL_MS = env_int("COVEL_EVENT_POLL_MS", 2000, minimum=20)
# Events kept per session; older cursors get system.reset.
COVEL_EVENT_LOG_RETAIN = env_int("COVEL_EVENT_LOG_RETAIN", 5000, minimum=100)
# POST /api/events/emit in the demo/commercial tiers (spec 004: ENABLE_DEBUG_PAGE).
ENABLE_DEBUG_PAGE = env_bool("ENABLE_DEBUG_PAGE", False)

# Request body limits in bytes (spec 004 §响应格式约定 请求体上限).
BODY_LIMIT_DEFAULT_BYTES = 1 * 1024 * 1024
BODY_LIMIT_LARGE_BYTES = 20 * 1024 * 1024
BODY_LIMIT_CHECKPOINT_BYTES = 64 * 1024 * 1024
# Django's own guard must not fire before ours (it would answer 400, not 413).
DATA_UPLOAD_MAX_MEMORY_SIZE = None
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "corsheaders",
    # Listed so /api/docs serves Swagger UI from ninja's bundled static files, not a CDN.
    "ninja",
    "sessions.apps.SessionsConfig",
    "turns.apps.TurnsConfig",
    "plugins_app.apps.PluginsAppConfig",
    "jobs.apps.JobsConfig",
    "media.apps.MediaConfig",
]

MIDDLEWARE = [
    "covel.middleware.RequestLogMiddleware",
    "covel.middleware.JsonGzipMiddleware",
    "covel.middleware.HostCheckMiddleware",
    "covel.middleware.OriginCheckMiddleware",
    # After the origin checks: a refused request (foreign_request_refused, origin_not_allowed) leaves
    # without CORS allow headers; everything it lets through, errors included, carries them.
    "corsheaders.middleware.CorsMiddleware",
    "covel.middleware.BodyLimitMiddleware",
    "covel.middleware.JsonBodyMiddleware",
    "covel.middleware.UrlNulMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "covel.middleware.ApiEnvelopeMiddleware",
]

ROOT_URLCONF = "covel.urls"
ASGI_APPLICATION = "covel.asgi.application"
WSGI_APPLICATION = "covel.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
# daphne serves /static/ (admin, Swagger UI) itself; hosted deployments behind a CDN may turn it off.
COVEL_SERVE_STATIC = env_bool("COVEL_SERVE_STATIC", True)
STATIC_ROOT = COVEL_HOME / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MEDIA_ROOT = COVEL_HOME / "media"
# Media (spec 004 §媒体管理): POST /api/media/cleanup is off unless enabled; download tokens are
# HMAC-signed with COVEL_MEDIA_TOKEN_SECRET (SECRET_KEY when unset).
COVEL_MEDIA_CLEANUP_ENABLED = env_bool("COVEL_MEDIA_CLEANUP_ENABLED", False)
COVEL_MEDIA_TOKEN_SECRET = env_str("COVEL_MEDIA_TOKEN_SECRET")

# Filled in by the shapes.
STORE_BACKEND = "sqlite"
DATABASES: dict = {}
REDIS_URL: str | None = None
CHANNEL_LAYERS: dict = {}

# Background work: in-process worker threads (embedded) or Celery workers (hosted).
COVEL_INPROCESS_WORKER = True
COVEL_INPROCESS_WORKER_THREADS = env_int("COVEL_INPROCESS_WORKER_THREADS", 4, minimum=1, maximum=64)
CELERY_BROKER_URL = "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ROUTES = {
    "turns.*": {"queue": "turns"},
    "jobs.*": {"queue": "jobs"},
    "media.*": {"queue": "media"},
    "worldgen.*": {"queue": "worldgen"},
}
CELERY_TASK_DEFAULT_QUEUE = "jobs"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
# Surviving broker restarts (README "Faults"): workers and beat reconnect for as long as Redis is
# away (Celery's default gives up after 100 attempts and the worker exits).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_CONNECTION_TIMEOUT = 5
# A running turn keeps running when the broker connection drops: its state is in the database, and
# a redelivery of its message finds the execution claimed and exits. Cancelling it (Celery 6's
# default) would only turn a Redis blip into interrupted turns.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Sending a task while the broker is down fails within about a second (POST /api/actions then
# answers 503 service_unavailable and records nothing) instead of hanging the request.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.25, "interval_max": 0.5}
# Executions still queued this long after they were accepted, with no worker claim, are sent to
# the queue once more (their message was lost: a Redis restart, a worker killed with it
# prefetched). A second delivery finds the row claimed and exits, so this never runs a turn twice.
COVEL_EXECUTION_RESEND_AFTER_SECONDS = env_int("COVEL_EXECUTION_RESEND_AFTER_SECONDS", 30, minimum=1)
# Beat: executions whose worker died (no heartbeat, session lock free) become interrupted.
CELERY_BEAT_SCHEDULE = {
    "turns-reap-executions": {"task": "turns.reap_executions", "schedule": 30.0},
    # Queued executions whose task never reached a worker are sent again (once).
    "turns-resend-executions": {
        "task": "turns.resend_executions",
        "schedule": float(max(1, min(15, COVEL_EXECUTION_RESEND_AFTER_SECONDS // 2))),
    },
    # Runtime jobs whose lease expired become orphaned; queue timeouts; lost queued jobs re-sent.
    "jobs-reap-runtime-jobs": {"task": "jobs.reap_runtime_jobs", "schedule": 15.0},
}
# Embedded shape: run the beat schedule above on in-process timers (covel.inprocess.timers_start)
# in the web process, since there is no beat. Only with COVEL_INPROCESS_WORKER; test settings turn
# it off (tests drive the reapers and re-senders themselves).
COVEL_INPROCESS_TIMERS = env_bool("COVEL_INPROCESS_TIMERS", True)
# Runtime jobs (spec 004 §Staged Runtime 后台作业): lease length (renewed every third of it),
# how often the embedded shape reaps opportunistically, when an idle queued job is sent again.
COVEL_JOB_LEASE_SECONDS = env_int("COVEL_JOB_LEASE_SECONDS", 30, minimum=1)
COVEL_JOB_REAP_INTERVAL_SECONDS = env_int("COVEL_JOB_REAP_INTERVAL_SECONDS", 15, minimum=1)
COVEL_JOB_REQUEUE_AFTER_SECONDS = env_int("COVEL_JOB_REQUEUE_AFTER_SECONDS", 120, minimum=1)
# Who may run a runtime job with the server's own model services when the job's source request
# holds no credentials any more (spec 004 §后台作业用谁的模型凭据, ApiBootstrapConfig.
# canRunRuntimeJobWithServerServices): without this confirmation only a server slot that carries an
# API key counts; the embedded shape confirms its own (offline/local) adapter.
COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = env_bool("COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES", False)

# Operators (README "The hosted shape"): task events for Flower; the worker check of GET /api/health
# (celery inspect, cached per process); a queued turn no worker claimed within
# COVEL_EXECUTION_PICKUP_SECONDS while no worker consumes `turns` ends its stream (no_worker_available);
# a Celery worker's own Prometheus endpoint (covel/metrics.py) when COVEL_WORKER_METRICS_PORT is set.
# COVEL_CELERY_TASK_EVENTS=0 turns the task events off (each task then costs no event PUBLISHes to
# Redis; Flower can still switch them on at run time with its "enable events" control).
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("COVEL_CELERY_TASK_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = CELERY_WORKER_SEND_TASK_EVENTS
COVEL_WORKER_CHECK_CACHE_SECONDS = env_int("COVEL_WORKER_CHECK_CACHE_SECONDS", 10, minimum=1, maximum=600)
COVEL_WORKER_INSPECT_TIMEOUT_SECONDS = env_int("COVEL_WORKER_INSPECT_TIMEOUT_MS", 2000, minimum=100, maximum=30000) / 1000
COVEL_EXECUTION_PICKUP_SECONDS = env_int("COVEL_EXECUTION_PICKUP_SECONDS", 60, minimum=1)
COVEL_WORKER_METRICS_PORT = env_int("COVEL_WORKER_METRICS_PORT", None, minimum=1, maximum=65535)  # type: ignore[arg-type]
COVEL_WORKER_METRICS_HOST = env_str("COVEL_WORKER_METRICS_HOST", "127.0.0.1")

# Session lock (spec 004 §多进程部署的会话锁): wait bound before 503 session_busy.
COVEL_SESSION_LOCK_TIMEOUT_SECONDS = env_int("COVEL_SESSION_LOCK_TIMEOUT_SECONDS", 30, minimum=0)
# Suspensions (spec 004 §Suspend / Resume): how long one waits for its answer before the sweep
# abandons it; how often the sweep runs (before the list and resume routes); how old a "resuming"
# claim must be before the sweep releases it (a process died mid-resume).
COVEL_SUSPENSION_TTL_SECONDS = env_int("COVEL_SUSPENSION_TTL_SECONDS", 7 * 24 * 3600, minimum=1)
COVEL_SUSPENSION_SWEEP_SECONDS = env_int("COVEL_SUSPENSION_SWEEP_SECONDS", 60, minimum=0)
COVEL_SUSPENSION_CLAIM_SECONDS = env_int("COVEL_SUSPENSION_CLAIM_SECONDS", 600, minimum=1)
# plugin-rpc action handlers (spec 004 §插件 RPC 通道: 时限 30 秒): past this, 504 handler_timeout, the
# lock is released and the handler's later store calls are refused (tests set a fraction of a second).
COVEL_RPC_HANDLER_TIMEOUT_SECONDS = env_int("COVEL_RPC_HANDLER_TIMEOUT_SECONDS", 30, minimum=1, maximum=600)
# Plugin fault breaker (spec 004 §会话插件管理 resume-fault, plugin.fault.*): a plugin whose own code
# fails this many executions in a row is paused in that session until the player resumes it.
COVEL_PLUGIN_FAULT_THRESHOLD = env_int("COVEL_PLUGIN_FAULT_THRESHOLD", 3, minimum=1, maximum=100)
# Dev hot reload of one community plugin (spec 004 POST /api/plugins/:id/reload): off unless set
# (or COVEL_DEBUG); 403 plugin_reload_disabled otherwise.
COVEL_PLUGIN_RELOAD_ENABLED = env_bool("COVEL_PLUGIN_RELOAD_ENABLED", DEBUG)
# Session DELETE (spec 004 删除按这个顺序进行 step 2): how long to wait for the session's claimed /
# running / committing runtime jobs to drain before the delete fails retryably (503 session_busy).
COVEL_SESSION_DELETE_DRAIN_SECONDS = env_int("COVEL_SESSION_DELETE_DRAIN_SECONDS", 60, minimum=0, maximum=3600)

# Model provider used when COVEL_HOME/llm.toml is absent.
COVEL_DEFAULT_MODEL_PROVIDER = "scripted"
COVEL_LLM_TOML = env_str("COVEL_LLM_TOML")
# Memory index (spec 004 §向量配置): "database" keeps embeddings in this server's database (exact
# cosine per session, turns.engine.memory_index); "none" turns the semantic side off.
VECTOR_BACKEND = env_choice("VECTOR_BACKEND", "database", ("database", "none"))
# Model database refresh (jobs/model_db.py, spec 004 §模型数据库): LiteLLM's model list.
COVEL_MODEL_DB_URL = env_str(
    "COVEL_MODEL_DB_URL", "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json")
COVEL_MODEL_DB_TIMEOUT_SECONDS = env_int("COVEL_MODEL_DB_TIMEOUT_SECONDS", 30, minimum=1, maximum=600)


# Outbound requests (covel/outbound.py). COVEL_PROVIDER_ORIGINS: the origins each provider's server
# key ({PROVIDER}_API_KEY) may be sent to (spec 004 POST /api/ai/models: 服务端环境里的密钥只发往
# 该服务商的可信同源地址), as comma-separated ``provider=origin`` pairs; a provider named there gets
# exactly the listed origins instead of its default. A provider absent from the table trusts the
# baseUrl the operator wrote for it in llm.toml. COVEL_OUTBOUND_ALLOW: CIDRs, addresses or host
# names of the operator's own model servers that request-supplied targets may reach in the shared
# tiers (loopback and private addresses are refused there otherwise, spec 004 §本地模型中继).
def _provider_origins(raw: list[str]) -> dict[str, tuple[str, ...]]:
    from urllib.parse import urlsplit

    table: dict[str, tuple[str, ...]] = {"openai": ("https://api.openai.com",)}
    given: dict[str, list[str]] = {}
    for item in raw:
        provider, sep, origin = item.partition("=")
        provider, origin = provider.strip(), origin.strip().rstrip("/")
        try:
            parts = urlsplit(origin)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = None
        if not sep or not provider or parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
                or parts.path or parts.query or parts.fragment or parts.username is not None:
            raise ImproperlyConfigured(
                f"COVEL_PROVIDER_ORIGINS entries must be provider=scheme://host[:port], got {item!r}")
        given.setdefault(provider, []).append(origin)
    table.update({provider: tuple(origins) for provider, origins in given.items()})
    return table


def _outbound_allow(raw: list[str]) -> tuple[str, ...]:
    import ipaddress
    import re

    for item in raw:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?", item):
                raise ImproperlyConfigured(f"COVEL_OUTBOUND_ALLOW entries must be CIDRs, addresses or host names, got {item!r}")
    return tuple(raw)


COVEL_PROVIDER_ORIGINS = _provider_origins(env_list("COVEL_PROVIDER_ORIGINS"))
COVEL_OUTBOUND_ALLOW = _outbound_allow(env_list("COVEL_OUTBOUND_ALLOW"))

# Local model relay (covel/model_relay.py, spec 004 §本地模型中继): served in the shared tiers
# (demo/commercial) unless COVEL_MODEL_RELAY=0; a relayed model call fails when the player's browser
# sends no part of its answer for COVEL_MODEL_RELAY_TIMEOUT_SECONDS; at most
# COVEL_MODEL_RELAY_MAX_CHANNELS relay streams are open per web process (503 model_relay_busy).
COVEL_MODEL_RELAY = env_bool("COVEL_MODEL_RELAY", True)
COVEL_MODEL_RELAY_TIMEOUT_SECONDS = env_int("COVEL_MODEL_RELAY_TIMEOUT_SECONDS", 60, minimum=1, maximum=3600)
COVEL_MODEL_RELAY_MAX_CHANNELS = env_int("COVEL_MODEL_RELAY_MAX_CHANNELS", 512, minimum=1)

# Structured request logs: one JSON line per request (hosted), plain otherwise.
COVEL_JSON_LOGS = env_bool("COVEL_JSON_LOGS", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "covel.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
    },
}

NINJA_PAGINATION_PER_PAGE = 50

# Install/validation endpoints (spec 004 §插件与世界安装): off switch, and extra directories a
# `{kind: "path"}` validation may read from (comma-separated).
COVEL_INSTALL_API_ENABLED = env_bool("COVEL_INSTALL_API_ENABLED", True)
COVEL_PACKAGE_ROOTS = env_list("COVEL_PACKAGE_ROOTS")
# GitHub installs (spec 004 插件与世界安装: GitHub 链接): where the API and the source archives are
# fetched (tests point both at a local fake), and the per-request read timeout / answer deadline.
COVEL_GITHUB_API_URL = env_str("COVEL_GITHUB_API_URL") or "https://api.github.com"
COVEL_GITHUB_ARCHIVE_URL = env_str("COVEL_GITHUB_ARCHIVE_URL") or "https://codeload.github.com"
COVEL_GITHUB_TIMEOUT_SECONDS = env_int("COVEL_GITHUB_TIMEOUT_SECONDS", 30, minimum=1, maximum=300)
# Desktop GET /api/app-update/latest: the GitHub releases API (base URL and owner/repo) it asks for
# the latest stable release, through the outbound proxy; tests point it at a local fake.
COVEL_APP_UPDATE_API_URL = env_str("COVEL_APP_UPDATE_API_URL") or COVEL_GITHUB_API_URL
COVEL_APP_UPDATE_REPOSITORY = env_str("COVEL_APP_UPDATE_REPOSITORY") or "covel-app/covel"
COVEL_APP_UPDATE_TIMEOUT_SECONDS = env_int("COVEL_APP_UPDATE_TIMEOUT_SECONDS", 10, minimum=1, maximum=120)

# Server settings fixed by the operator (spec 004 "Server settings"): when set, they win over the
# value saved through PUT /api/config/server-settings. Trace retention in days (0 keeps all);
# trusted sources: comma-separated GitHub owners or owner/repo.
COVEL_TRACE_RETENTION_DAYS = env_int("COVEL_TRACE_RETENTION_DAYS", None, minimum=0)  # type: ignore[arg-type]
COVEL_TRUSTED_SOURCES = env_str("COVEL_TRUSTED_SOURCES")
if DEPLOYMENT_TIER in ("demo", "commercial") and not COVEL_MEDIA_TOKEN_SECRET:
    # Spec 004 §存储模式说明: hosted tiers refuse to start without the media token secret.
    raise ImproperlyConfigured(f"DEPLOYMENT_TIER={DEPLOYMENT_TIER} requires COVEL_MEDIA_TOKEN_SECRET.")

# Abort/steer: how long the web process waits for the worker running the turn to acknowledge.
COVEL_CONTROL_ACK_SECONDS = float(env_int("COVEL_CONTROL_ACK_SECONDS", 2, minimum=1, maximum=60))

# Turn executions: worker heartbeat, and how long silence means the worker died (→ interrupted).
COVEL_EXECUTION_HEARTBEAT_SECONDS = 5
COVEL_EXECUTION_STALE_SECONDS = env_int("COVEL_EXECUTION_STALE_SECONDS", 30, minimum=5)
COVEL_EXECUTION_QUEUED_STALE_SECONDS = env_int("COVEL_EXECUTION_QUEUED_STALE_SECONDS", 600, minimum=30)

# Where builtin content is read from (None: the folders shipped in the project). Tests point these
# at fixture packages.
COVEL_BUILTIN_WORLDS_DIR = None
COVEL_BUILTIN_PLUGINS_DIR = None
