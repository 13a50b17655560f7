"""GET /api/health (spec 004 §健康检查): liveness plus what storage the server really runs on."""
from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from ninja import Router

from covel.auth import deployment_form
from covel.model_relay import relay_served
from covel.openapi import Wire, contract
from covel.times import wire_timestamp
from covel.workers import QUEUES, queue_consumers

router = Router(tags=["health"])


class HealthOut(Wire):
    """GET /api/health: 200 ok, or 503 degraded with ``error`` / ``code: service_degraded`` beside the fields."""

    status: str
    version: str
    boot_id: str
    timestamp: str
    operator_token_required: bool
    deployment: dict[str, Any]
    storage: dict[str, Any]
    vector: dict[str, Any]
    checks: dict[str, dict[str, Any]]
    error: str | None = None
    code: str | None = None


def _database_ok() -> tuple[bool, str | None]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True, None
    except Exception as exc:  # any driver error means "not healthy", reported, not raised
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _redis_ok() -> tuple[bool | None, str | None]:
    if not settings.REDIS_URL:
        return None, None
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        client.close()
        return True, None
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _pending_migrations() -> list[str]:
    """Names of migrations on disk that the database has not applied (empty when up to date)."""
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        return [f"unknown ({type(exc).__name__})"]
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def _applied_migrations() -> list[dict]:
    from django.db.migrations.recorder import MigrationRecorder

    try:
        recorder = MigrationRecorder(connection)
        applied = recorder.applied_migrations()
    except Exception:
        return []
    latest: dict[str, str] = {}
    for app_label, name in applied:
        if app_label in {"covel_sessions", "turns", "plugins_app", "jobs", "media"}:
            latest[app_label] = max(latest.get(app_label, ""), name)
    return [
        {
            "id": f"server:{settings.STORE_BACKEND}:{app}",
            "domain": "server",
            "backend": settings.STORE_BACKEND,
            "version": int(name.split("_", 1)[0]) if name[:4].isdigit() else 0,
            "status": "applied",
            "description": f"Django migrations of {app} (latest {name})",
        }
        for app, name in sorted(latest.items())
    ]


def _workers_check() -> dict[str, Any] | None:
    """Hosted shape only (Celery workers, not the in-process pool): which workers consume each
    queue (covel.workers: ``celery inspect active_queues``, cached briefly). ``ok`` is False when a
    queue has none: its work would wait forever."""
    if settings.COVEL_INPROCESS_WORKER:
        return None
    consumers = queue_consumers()
    missing = [queue for queue in QUEUES if not consumers.has_consumer(queue)]
    check: dict[str, Any] = {"ok": not missing, "queues": {q: consumers.queues.get(q, []) for q in QUEUES},
                             "checkedAt": _wire_timestamp_of(consumers.checked_at)}
    if missing:
        check["missing"] = missing
    if consumers.error:
        check["error"] = consumers.error
    return check


#: The memory index's status (``turns.engine.memory_index.vector_status``), installed by the turns
#: app at start-up: covel sits below the apps and cannot import them (.importlinter).
_vector_status: Any = None
VECTOR_OFF = {"capable": False, "driver": "none", "modelCount": 0, "tableCount": 0}


def vector_status_install(status: Any) -> None:
    """Install the callable that answers the ``vector`` section of GET /api/health."""
    global _vector_status
    _vector_status = status


def _vector_section(db_ok: bool) -> dict[str, Any]:
    """spec 004 §健康检查 vector: capable / driver / modelCount / tableCount of the real memory
    index (``none`` under VECTOR_BACKEND=none, without the index module, or with the database down)."""
    if _vector_status is None or not db_ok:
        return dict(VECTOR_OFF)
    try:
        return dict(_vector_status())
    except Exception:  # a broken probe must not take the health check down with it
        return dict(VECTOR_OFF)


def _wire_timestamp_of(seconds: float) -> str:
    return wire_timestamp(dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc))


@router.get("/health", operation_id="health")
@contract(ok={200: HealthOut, 503: HealthOut})
def health(request):
    """Status ok (200) or degraded (503) with the failing dependency under ``checks``."""
    db_ok, db_error = _database_ok()
    redis_ok, redis_error = _redis_ok()
    pending = _pending_migrations() if db_ok else []
    # Asking the workers goes through Redis: with Redis down the redis check already says why.
    workers = _workers_check() if redis_ok is not False else None
    healthy = db_ok and redis_ok is not False and not pending and (workers is None or workers["ok"])
    vector = _vector_section(db_ok)
    body = {
        "status": "ok" if healthy else "degraded",
        "version": settings.COVEL_VERSION,
        "bootId": settings.COVEL_BOOT_ID,
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
        # Every form but personal checks the operator token on management requests (spec 004 §健康检查).
        "operatorTokenRequired": deployment_form() != "personal",
        "deployment": {
            "form": deployment_form(),
            # True exactly when the /api/model-relay routes answer (spec 004 §本地模型中继).
            "modelRelay": relay_served(),
        },
        "storage": {
            "data": {"backend": settings.STORE_BACKEND, "durable": settings.STORE_BACKEND != "memory",
                     # browser-private: the save lives in the browser's BrowserVault (spec 004 §存储模式说明).
                     "frontendMode": "local" if settings.STORE_BACKEND == "memory" else "remote"},
            "media": {
                "backend": "local",
                "configuredBackend": "local",
                "enabled": True,
                "durable": True,
            },
            "vector": vector,
            "migrations": _applied_migrations() if db_ok else [],
        },
        "vector": vector,
        "checks": {
            "database": {"ok": db_ok, **({"error": db_error} if db_error else {})},
            "migrations": {"ok": not pending, **({"pending": pending} if pending else {})},
            **({"redis": {"ok": redis_ok, **({"error": redis_error} if redis_error else {})}} if redis_ok is not None else {}),
            **({"workers": workers} if workers is not None else {}),
        },
    }
    if not healthy:
        broken = [name for name, ok in (("database", db_ok), ("redis", redis_ok)) if ok is False]
        # Non-2xx bodies carry the envelope's ``error`` next to the health fields.
        if broken:
            body["error"] = f"Service degraded: {', '.join(broken)} unreachable"
        elif pending:
            body["error"] = "Service degraded: database schema is behind; run `manage.py migrate`"
        else:
            body["error"] = f"Service degraded: no worker consumes queue(s) {', '.join(workers['missing'])}"
        body["code"] = "service_degraded"
    return JsonResponse(body, status=200 if healthy else 503)
