from __future__ import annotations

import pytest

from tests.sessions.support import catalog, session  # noqa: F401


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """A store of its own for each test (inventory-based results stay exact); no reused library scan."""
    from media.selectors import media_scan_cache_clear

    settings.MEDIA_ROOT = tmp_path / "media"
    media_scan_cache_clear()
    yield settings.MEDIA_ROOT
    media_scan_cache_clear()
