"""Benchmark: the per-process catalogue caches (issue 18: plugin resolution, world packages and prompt
files read once per process, invalidated on install/reload), cold vs warm, beside anchors measured
in the same run.

Prints, each as the median of READS runs in one process (embedded test shape, throw-away home with
the three upstream fixture worlds installed as user worlds next to the builtin ones):

- plugin registry: a build with nothing cached (``registry_reset(builtin_records=True)``), a build
  after ``registry_reset()`` (what a test fixture or a new COVEL_HOME costs: builtin records are
  shared), and a cached read (``plugin_registry()``: one stat of the generation marker);
  anchor: reading and YAML-parsing every builtin PLUGIN.md's front matter (libyaml, bare);
- world packages: ``world_package_load`` of every package folder cold (cache dropped before each
  run) and warm; anchor: a bare read of every file of those folders (``Path.read_bytes``);
- GET /api/worlds through the Django test client, cold and warm; anchor: GET /api/ai/protocols (a
  bare request through the same middleware that reads no database);
- a runtime's prompt file: found and read (``prompt_file_find`` + ``read_text``) vs the manifest memo
  (``PluginManifest.package_text_memo``); anchor: a bare ``json.loads`` of a 1 KB document.

Run: .venv/bin/python tests/bench/catalogue_cache.py [--reads 20]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test")

READS = 20


def _median_ms(action, reads: int, before=None) -> float:
    times = []
    for _ in range(reads):
        if before is not None:
            before()
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _line(label: str, cold: float, warm: float, anchor: float, anchor_label: str) -> str:
    return (f"{label:<28} cold {cold:9.2f} ms | warm {warm:8.3f} ms ({cold / warm if warm else float('inf'):7.1f}x faster) | "
            f"anchor {anchor_label} {anchor:7.3f} ms (warm = {warm / anchor if anchor else 0:5.2f}x anchor)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=READS)
    reads = parser.parse_args().reads

    import logging

    import django

    django.setup()
    logging.disable(logging.INFO)  # no request log line per read
    from django.conf import settings

    class _NoMigrations(dict):
        # Like pytest --nomigrations: build tables straight from models.py.
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)

    import yaml

    from plugins_app.registry import plugin_registry, registry_reset
    from sessions import world_packages as wp
    from sessions.world_selectors import builtin_worlds_dir
    from tests.shared_paths import FIXTURES_DIR
    from turns.engine.prompt import prompt_file_find

    user_worlds = wp.user_worlds_dir(settings.COVEL_HOME)
    user_worlds.mkdir(parents=True, exist_ok=True)
    for folder in sorted((FIXTURES_DIR / "upstream" / "worlds").iterdir()):
        if folder.is_dir() and not (user_worlds / folder.name).exists():
            shutil.copytree(folder, user_worlds / folder.name)
    old = time.time() - 60  # older than the racy window: the cache may keep them
    for path in user_worlds.rglob("*"):
        os.utime(path, (old, old))
    time.sleep(wp.RACY_SECONDS + 0.1)  # ctime too (utime sets it to now)

    # Plugin registry.
    registry = plugin_registry()
    builtin_manifests = [r.manifest.root / "PLUGIN.md" for r in registry.all() if r.source == "builtin"]

    def parse_manifests():
        for path in builtin_manifests:
            text = path.read_text(encoding="utf-8")
            yaml.load(text.split("---", 2)[1], Loader=yaml.CSafeLoader) if text.startswith("---") else None  # noqa: S506

    nothing_cached = _median_ms(plugin_registry, max(3, reads // 4), before=lambda: registry_reset(builtin_records=True))
    after_reset = _median_ms(plugin_registry, reads, before=registry_reset)
    cached = _median_ms(plugin_registry, reads)
    anchor_manifests = _median_ms(parse_manifests, reads)
    print(f"plugin registry: {len(registry.all())} plugins ({len(builtin_manifests)} builtin)")
    print(_line("registry build (reset)", nothing_cached, after_reset, anchor_manifests, "parse builtin PLUGIN.md"))
    print(_line("registry read (cached)", nothing_cached, cached, anchor_manifests, "parse builtin PLUGIN.md"))

    # World packages.
    folders = [(p, wp.SOURCE_FILE) for p in sorted(builtin_worlds_dir().iterdir()) if (p / wp.WORLD_FILE).is_file()]
    folders += [(p, wp.SOURCE_USER) for p in sorted(user_worlds.iterdir()) if (p / wp.WORLD_FILE).is_file()]
    files = [f for folder, _ in folders for f in folder.rglob("*") if f.is_file()]

    def load_all():
        for folder, source in folders:
            assert wp.world_package_load(folder, source=source, expected_id=folder.name).ok, folder

    def read_all():
        for path in files:
            path.read_bytes()

    cold = _median_ms(load_all, reads, before=wp.world_packages_forget)
    warm = _median_ms(load_all, reads)
    anchor_files = _median_ms(read_all, reads)
    size_kb = sum(f.stat().st_size for f in files) / 1024
    print(f"world packages: {len(folders)} packages, {len(files)} files, {size_kb:.0f} KiB")
    print(_line("world_package_load (all)", cold, warm, anchor_files, "read every file"))

    client = Client(HTTP_HOST="127.0.0.1")

    def get(url: str):
        def run():
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"GET {url}: {response.status_code} {response.content[:200]!r}")
            return response
        return run

    listed = get("/api/worlds")().json()
    count = len(listed["items"] if isinstance(listed, dict) else listed)
    cold = _median_ms(get("/api/worlds"), reads, before=wp.world_packages_forget)
    warm = _median_ms(get("/api/worlds"), reads)
    anchor_request = _median_ms(get("/api/ai/protocols"), reads)
    print(f"GET /api/worlds: {count} worlds")
    print(_line("GET /api/worlds", cold, warm, anchor_request, "GET /api/ai/protocols"))

    # Prompt files.
    runtimes = [(r.manifest, rt.local_id or rt.plugin_id) for r in registry.loaded() for rt in r.manifest.runtimes
                if r.source == "builtin"]
    with_file = [(m, name) for m, name in runtimes if prompt_file_find(m.root, name, "zh-CN") is not None]

    def find_and_read():
        for manifest, name in with_file:
            prompt_file_find(manifest.root, name, "zh-CN").read_text(encoding="utf-8")

    def memo():
        for manifest, name in with_file:
            manifest.package_text_memo(("bench-prompt", name, "zh-CN"), lambda m=manifest, n=name: prompt_file_find(
                m.root, n, "zh-CN").read_text(encoding="utf-8"))

    document = json.dumps({f"k{i}": "v" * 8 for i in range(64)})
    cold = _median_ms(find_and_read, reads)
    warm = _median_ms(memo, reads)
    anchor_json = _median_ms(lambda: [json.loads(document) for _ in with_file], reads)
    print(f"prompt files: {len(with_file)} runtimes with a prompt file (of {len(runtimes)} builtin runtimes)")
    print(_line("prompt files (per turn)", cold, warm, anchor_json, f"{len(with_file)} x json.loads 1 KB"))


if __name__ == "__main__":
    main()
