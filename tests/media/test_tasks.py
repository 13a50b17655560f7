"""The media.cleanup_orphans Celery task (queue ``media``): dry run by default, confirmation for deletion."""
from __future__ import annotations

import pytest

from media.errors import MediaRequestInvalid
from media.tasks import cleanup_orphans
from tests.sessions.support import session_create

pytestmark = pytest.mark.django_db

GIF = b"GIF89a" + b"\x02" * 40


def _orphan(client) -> str:
    scratch = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    media_id = client.post(f"/api/media?sessionId={scratch['id']}", data=GIF, content_type="image/gif").json()["id"]
    client.delete(f"/api/sessions/{scratch['id']}")
    return media_id


def test_task_is_routed_to_the_media_queue():
    from covel.celery import app

    assert cleanup_orphans.name == "media.cleanup_orphans"
    assert app.amqp.router.route({}, cleanup_orphans.name)["queue"].name == "media"


def test_task_reports_by_default_and_deletes_only_when_confirmed(client, catalog, media_root):
    media_id = _orphan(client)
    path = media_root / media_id[:2] / media_id

    dry = cleanup_orphans()
    assert dry["policy"]["dryRun"] is True and dry["result"]["deletedIds"] == [media_id] and path.exists()

    with pytest.raises(MediaRequestInvalid):
        cleanup_orphans(dry_run=False)
    assert path.exists()

    real = cleanup_orphans(dry_run=False, confirm="yes")
    assert real["result"]["deletedIds"] == [media_id] and not path.exists()
