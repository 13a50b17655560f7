"""Checks and background machinery started with the web process."""
from __future__ import annotations

import logging

from django.conf import settings

logger = logging.getLogger("covel.startup")


def on_asgi_startup() -> None:
    """Log the shape we run in; start the in-process timers (beat schedule) when configured.

    Raises RuntimeError in the hosted shape when Redis is unreachable: we refuse to start rather
    than silently degrade (spec 004 §多实例能力边界).
    """
    if settings.REDIS_URL and settings.STORE_BACKEND == "pg":
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
        except Exception as exc:
            raise RuntimeError(f"Redis at REDIS_URL is unreachable ({exc}); refusing to start.") from exc
        from covel import eventbus

        # The event fan-out subscription must be live before we serve (covel/eventbus.py).
        eventbus.start()
    from covel import inprocess

    # No beat in the embedded shape: its schedule (reapers, the execution re-sender) runs here.
    timers = inprocess.timers_start()
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
