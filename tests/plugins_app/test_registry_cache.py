"""Plugin resolution cached per process (issue 18): builtin records are built once and shared by
every registry of the process (each COVEL_HOME, and again after registry_reset), a changed builtin
folder is read again, and a runtime's prompt file is read once per manifest — a dev reload of the
plugin reads it again."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from plugins_app import registry as reg
from turns.engine.agent import prompt_source

PLUGIN = ("---\nid: probe\nkind: plugin\ndescription: {description}\nruntime:\n  type: agent\n"
          "  schedule: {{stage: post-turn, trigger: {{type: auto}}}}\n---\nBody prompt.\n")


def _builtin(tmp_path: Path, description: str) -> Path:
    root = tmp_path / "builtin" / "probe"
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(PLUGIN.format(description=description), encoding="utf-8")
    return tmp_path / "builtin"


def _settled() -> None:
    time.sleep(reg.BUILTIN_RACY_SECONDS + 0.05)  # files written just now are not reused


def test_builtin_records_are_shared_across_homes_and_resets_until_their_folder_changes(tmp_path):
    builtin = _builtin(tmp_path, "First.")
    _settled()
    try:
        first = reg.registry_get(covel_home=tmp_path / "home-a", builtin_dir=builtin).get("probe")
        assert first.is_loaded and first.manifest.description == "First."
        other_home = reg.registry_get(covel_home=tmp_path / "home-b", builtin_dir=builtin)
        assert other_home.get("probe") is first
        reg.registry_reset()
        assert reg.registry_get(covel_home=tmp_path / "home-a", builtin_dir=builtin).get("probe") is first

        _builtin(tmp_path, "Other.")  # same length, in place
        reg.registry_reset()
        changed = reg.registry_get(covel_home=tmp_path / "home-a", builtin_dir=builtin).get("probe")
        assert changed is not first and changed.manifest.description == "Other."

        reg.registry_reset(builtin_records=True)
        _settled()
        rebuilt = reg.registry_get(covel_home=tmp_path / "home-a", builtin_dir=builtin).get("probe")
        assert rebuilt is not changed and rebuilt.manifest.description == "Other."
    finally:
        reg.registry_reset()


def test_a_prompt_file_is_read_once_per_manifest_and_again_after_a_reload(tmp_path):
    home = tmp_path / "home"
    root = home / "plugins" / "probe"
    root.mkdir(parents=True)
    (root / "PLUGIN.md").write_text(PLUGIN.format(description="Community."), encoding="utf-8")
    (root / "prompts").mkdir()
    prompt = root / "prompts" / "probe.en-US.md"
    prompt.write_text("Version one.", encoding="utf-8")
    builtin = tmp_path / "no-builtin"
    builtin.mkdir()
    try:
        registry = reg.registry_get(covel_home=home, builtin_dir=builtin)
        record = registry.get("probe")
        runtime = record.manifest.runtimes[0]

        def env_of(rec):
            return SimpleNamespace(manifest=lambda plugin_id: rec.manifest, snapshot=SimpleNamespace(locale="en-US"))

        assert prompt_source(env_of(record), runtime) == "Version one."
        prompt.write_text("Version two.", encoding="utf-8")
        # the same manifest keeps what it read (no glob, no read per turn) ...
        assert prompt_source(env_of(record), runtime) == "Version one."
        # ... and a dev reload (a new manifest) reads the file again
        fresh = registry.plugin_reload("probe", import_entry=False)
        assert prompt_source(env_of(fresh), fresh.manifest.runtimes[0]) == "Version two."
        # a locale without its own file falls back to en-US, remembered per locale
        zh = SimpleNamespace(manifest=lambda plugin_id: fresh.manifest, snapshot=SimpleNamespace(locale="zh-CN"))
        assert prompt_source(zh, fresh.manifest.runtimes[0]) == "Version two."
    finally:
        reg.registry_reset()
