"""Checks and background machinery started with the web process."""
from __future__ import annotations

import logging

from django.conf import settings

logger = logging.getLogger("covel.startup")


#: The SECRET_KEY every process uses when DJANGO_SECRET_KEY is unset (covel.settings.base).
_DEV_SECRET_PREFIX = "covel-embedded-not-secret-"


def secrets_warn() -> list[str]:
    """Hosted shape: log a warning for each secret left at its development default (web at start,
    each Celery worker when ready); returns the warnings. DJANGO_SECRET_KEY signs admin sessions and
    derives the key that encrypts provider keys in Redis; COVEL_MEDIA_TOKEN_SECRET signs media
    download links (demo/commercial refuse to start without it, covel.settings.base)."""
    if settings.STORE_BACKEND != "pg":
        return []
    warnings = []
    if settings.SECRET_KEY.startswith(_DEV_SECRET_PREFIX):
        warnings.append("DJANGO_SECRET_KEY is not set: this server uses the public development key; "
                        "set the same random value on every web and worker process")
    if not settings.COVEL_MEDIA_TOKEN_SECRET:
        warnings.append("COVEL_MEDIA_TOKEN_SECRET is not set: media download links are signed with "
                        "DJANGO_SECRET_KEY; set its own random value on every web and worker process")
    for line in warnings:
        logger.warning(line)
    return warnings


def on_asgi_startup() -> None:
    """Log the shape we run in; start the in-process timers (beat schedule) when configured.

    Raises RuntimeError in the hosted shape when Redis is unreachable: we refuse to start rather
    than silently degrade (spec 004 §多实例能力边界). The browser-private profile (STORE_BACKEND=memory)
    builds its in-memory database first (covel.memory_store).
    """
    from covel.memory_store import memory_store_open

    memory_store_open()
    if settings.REDIS_URL and settings.STORE_BACKEND == "pg":
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
        except Exception as exc:
            raise RuntimeError(f"Redis at REDIS_URL is unreachable ({exc}); refusing to start.") from exc
        from covel import eventbus

        # The event fan-out subscription must be live before we serve (covel/eventbus.py).
        eventbus.start()
    secrets_warn()
    from covel import inprocess

    # No beat in the embedded shape: its schedule (reapers, the execution re-sender) runs here.
    timers = inprocess.timers_start()
    if timers and settings.STORE_BACKEND != "pg":
        from covel.taskqueue import task_send

        # The one process of the embedded shape: resume claims of a previous run are all stale.
        task_send("turns.release_suspension_claims")
    lock = "pg-advisory" if settings.STORE_BACKEND == "pg" else "in-process"
    logger.info(
        "covel %s: store=%s tier=%s session lock: %s worker=%s timers=%s",
        settings.COVEL_VERSION,
        settings.STORE_BACKEND,
        settings.DEPLOYMENT_TIER,
        lock,
        "in-process" if settings.COVEL_INPROCESS_WORKER else "celery",
        "in-process" if timers else "beat/off",
    )
