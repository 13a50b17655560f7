"""sessions.catalog.world_resolve: file worlds are parsed once per change; default results are
private copies, ``shared=True`` results are the cached read-only objects."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from sessions.catalog import world_resolve

pytestmark = pytest.mark.django_db


def _world(name: str, summary: str) -> Path:
    root = Path(settings.COVEL_HOME) / "worlds" / "cache-probe"
    root.mkdir(parents=True, exist_ok=True)
    (root / "world.yaml").write_text(
        f'schemaVersion: "1.0"\nid: cache-probe\nname: {name}\nsummary: {summary}\ndefaultLocale: en-US\n',
        encoding="utf-8")
    (root / "WORLD.md").write_text(f"# {name}\n", encoding="utf-8")
    return root


def test_default_results_are_private_copies():
    first = world_resolve("hollow-reach-light")
    first.metadata["pluginPolicy"] = "mutated"
    first.contents[first.default_locale]["characters"].clear()
    again = world_resolve("hollow-reach-light")
    assert again.metadata.get("pluginPolicy") != "mutated"
    assert again.contents[again.default_locale]["characters"]


def test_shared_results_are_reused_until_a_file_changes():
    root = _world("Probe", "First summary.")
    shared = world_resolve("cache-probe", shared=True)
    assert shared.name == "Probe" and world_resolve("cache-probe", shared=True).metadata is shared.metadata
    _world("Probe Two", "Second summary.")
    stamp = (root / "world.yaml").stat().st_mtime + 5
    os.utime(root / "world.yaml", (stamp, stamp))
    changed = world_resolve("cache-probe", shared=True)
    assert changed.name == "Probe Two" and changed.metadata is not shared.metadata
