"""Benchmark: GET /api/sessions/:id/messages/page latency near the newest message (message 10) and
deep in history (message 10,000). Keyset pagination keeps both flat; OFFSET would grow with depth.

Run: .venv/bin/python tests/bench/messages_page.py   (SQLite, covel.settings.test)
     DJANGO_SETTINGS_MODULE=covel.settings.test_hosted .venv/bin/python tests/bench/messages_page.py
Prints the median of 50 requests for each position, in milliseconds.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test")

MESSAGES = 20_000
SAMPLES = 50


def main() -> None:
    import django

    django.setup()
    from django.conf import settings

    class _NoMigrations(dict):
        # Like pytest --nomigrations: build tables straight from models.py.
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    from django.test.utils import setup_test_environment, teardown_test_environment
    from django.db import connection
    from django.test import Client

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        from sessions.models import ChatMessage
        from sessions.selectors import cursor_encode
        from sessions.services import session_create

        session = session_create(locale="en-US").session
        base = datetime(2025, 1, 1, tzinfo=dt_timezone.utc)
        ChatMessage.objects.bulk_create([
            ChatMessage(session=session, message_id=f"m{i}", role="user", content=f"message {i}",
                        created_at=base + timedelta(milliseconds=i)) for i in range(MESSAGES)
        ], batch_size=5000)
        client = Client()

        def cursor_before(n_from_newest: int) -> str:
            row = ChatMessage.objects.filter(session=session).order_by("-created_at", "-id")[n_from_newest]
            return cursor_encode(row.created_at, row.id)

        for position in (10, 10_000):
            cursor = cursor_before(position)
            url = f"/api/sessions/{session.id}/messages/page?limit=80&cursor={cursor}"
            assert client.get(url).status_code == 200
            timings = []
            for _ in range(SAMPLES):
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200 and len(response.json()["items"]) == 80
            print(f"messages/page at message {position:>6,} of {MESSAGES:,}: median {statistics.median(timings):.2f} ms "
                  f"(p90 {sorted(timings)[int(SAMPLES * 0.9)]:.2f} ms, {connection.vendor})")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


if __name__ == "__main__":
    main()
