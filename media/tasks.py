"""Background work of the media app (queue ``media``, routed by the ``media.*`` task names)."""
from __future__ import annotations

from celery import shared_task

from media import services


@shared_task(name="media.cleanup_orphans", ignore_result=False)
def cleanup_orphans(dry_run: bool = True, confirm: str = "", max_bytes: int = 0, max_age_ms: int = 0,
                    keep_recent_bytes: int = 0, scan_limit: int = 1000) -> dict:
    """Remove store files no session uses; a dry run unless ``dry_run=False`` and ``confirm="yes"``
    (the task's form of the X-Confirm-Cleanup header). Returns the cleanup body ``{ok, policy, result}``."""
    policy = services.CleanupPolicy(dry_run=dry_run, max_bytes=max_bytes, max_age_ms=max_age_ms,
                                    keep_recent_bytes=keep_recent_bytes, scan_limit=scan_limit)
    return services.media_cleanup(policy, is_confirmed=confirm == "yes")
