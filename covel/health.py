"""GET /api/health (spec 004 §健康检查): liveness plus what storage the server really runs on."""
from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from ninja import Router

router = Router(tags=["health"])


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


@router.get("/health", operation_id="health")
def health(request):
    """Status ok (200) or degraded (503) with the failing dependency under ``checks``."""
    db_ok, db_error = _database_ok()
    redis_ok, redis_error = _redis_ok()
    pending = _pending_migrations() if db_ok else []
    healthy = db_ok and redis_ok is not False and not pending
    vector = {"capable": False, "driver": "none", "modelCount": 0, "tableCount": 0}
    body = {
        "status": "ok" if healthy else "degraded",
        "version": settings.COVEL_VERSION,
        "bootId": settings.COVEL_BOOT_ID,
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
        "operatorTokenRequired": settings.DEPLOYMENT_TIER != "self",
        "deployment": {
            "form": "personal" if settings.DEPLOYMENT_TIER == "self" else "hosted",
            "modelRelay": settings.DEPLOYMENT_TIER != "self",
        },
        "storage": {
            "data": {"backend": settings.STORE_BACKEND, "durable": settings.STORE_BACKEND != "memory", "frontendMode": "remote"},
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
        },
    }
    if not healthy:
        broken = [name for name, ok in (("database", db_ok), ("redis", redis_ok)) if ok is False]
        # Non-2xx bodies carry the envelope's ``error`` next to the health fields.
        if broken:
            body["error"] = f"Service degraded: {', '.join(broken)} unreachable"
        else:
            body["error"] = "Service degraded: database schema is behind; run `manage.py migrate`"
        body["code"] = "service_degraded"
    return JsonResponse(body, status=200 if healthy else 503)
