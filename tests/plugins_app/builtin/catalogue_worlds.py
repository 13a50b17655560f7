"""World packages for the catalogue plugins' tests (issue 20): a builtin world copied into
COVEL_HOME/worlds/ under a new id with extra data files and world data sources, and the upstream
fixture worlds installed the way a user installs them."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from tests.shared_paths import FIXTURES_DIR

BUILTIN_WORLDS = Path(__file__).resolve().parents[3] / "sessions" / "worlds"
UPSTREAM_WORLDS = FIXTURES_DIR / "upstream" / "worlds"


def world_variant(new_id: str, *, base: str = "hollow-reach-light", files: dict[str, Any] | None = None,
                  sources: dict[str, dict[str, Any]] | None = None, manifest: dict[str, Any] | None = None) -> Path:
    """Copy builtin world ``base`` to COVEL_HOME/worlds/``new_id``: ``files`` (package path → YAML
    value) are written, ``sources`` added to data/world.data.yaml, ``manifest`` keys set in
    world.yaml. Returns the folder (the caller removes it)."""
    target = Path(settings.COVEL_HOME) / "worlds" / new_id
    shutil.copytree(BUILTIN_WORLDS / base, target)
    body = yaml.safe_load((target / "world.yaml").read_text(encoding="utf-8"))
    body.update(manifest or {})
    body["id"] = new_id
    (target / "world.yaml").write_text(yaml.safe_dump(body, allow_unicode=True, sort_keys=False), encoding="utf-8")
    for rel, value in (files or {}).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(value, allow_unicode=True, sort_keys=False), encoding="utf-8")
    if sources:
        descriptor_path = target / "data" / "world.data.yaml"
        descriptor = yaml.safe_load(descriptor_path.read_text(encoding="utf-8"))
        descriptor["sources"].update(sources)
        descriptor_path.write_text(yaml.safe_dump(descriptor, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return target


def upstream_world(world_id: str) -> Path:
    """Install the upstream fixture world ``world_id`` under COVEL_HOME/worlds/ (caller removes it)."""
    target = Path(settings.COVEL_HOME) / "worlds" / world_id
    shutil.copytree(UPSTREAM_WORLDS / world_id, target)
    return target
