"""Start-up steps of the community plugin directory (spec 004 DELETE /api/plugins/:id: 清理失败 …
下次启动重试清理; staged GitHub updates promoted before discovery). Called once per process by the
registry (plugins_app.registry.registry_get) before it discovers plugins; imports neither the
registry nor the installers, so both can use it.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)

TRASH_PREFIX = ".trash-"
UPDATES_DIR = ".covel-updates"


def install_dir_start(community: Path) -> bool:
    """Start-up steps of the community plugin directory (called once per process by the registry,
    before discovery): remove packages left in `.trash-*` by an uninstall whose cleanup failed, and
    promote updates staged in `.covel-updates/<id>/` (see ``plugin_update_promote``). Returns True
    when an update was promoted (the caller bumps the registry generation)."""
    promoted = False
    if not community.is_dir():
        return promoted
    for child in community.iterdir():
        if child.name.startswith(TRASH_PREFIX) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
    updates = community / UPDATES_DIR
    if updates.is_dir():
        for staged in sorted(updates.iterdir()):
            if staged.name.startswith(TRASH_PREFIX):
                shutil.rmtree(staged, ignore_errors=True)
            elif staged.is_dir() and not staged.name.startswith("."):
                promoted = plugin_update_promote(community, staged.name) or promoted
    return promoted


def plugin_update_promote(community: Path, plugin_id: str) -> bool:
    """Replace plugins/<id> with the update staged in `.covel-updates/<id>/pkg` (start-up only).

    The old package moves into `.covel-updates/<id>/backup` first; if promoting the new one fails,
    the backup goes back and `update.json` records the error (shown as pendingUpdate.error). A
    start interrupted in between finds the backup and restores it. The old package must still
    match its receipt (integrity verified): local changes block the replacement. Returns True when
    the update was applied."""
    from plugins_app.trust import INTEGRITY_VERIFIED, receipt_read

    staged = community / UPDATES_DIR / plugin_id
    meta_path = staged / "update.json"
    new_pkg, backup, target = staged / "pkg", staged / "backup", community / plugin_id

    def fail(message: str) -> bool:
        try:
            data = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        data["error"] = message
        meta_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        logger.warning("plugin update of %s not applied: %s", plugin_id, message)
        return False

    if backup.is_dir() and not target.exists():
        os.replace(backup, target)  # an interrupted promotion: the old package comes back
        return fail("the previous start was interrupted; the installed version was restored")
    if not new_pkg.is_dir():
        return fail("the staged update is incomplete") if meta_path.exists() else False
    if target.is_dir() and receipt_read(target)[1] != INTEGRITY_VERIFIED:
        return fail("the installed package has local changes; back them up and uninstall it first")
    try:
        if target.is_dir():
            os.replace(target, backup)
        os.replace(new_pkg, target)
    except OSError as exc:
        if backup.is_dir() and not target.exists():
            os.replace(backup, target)
        return fail(f"could not replace the package: {exc.strerror or exc}")
    shutil.rmtree(staged, ignore_errors=True)
    logger.info("plugin update of %s applied", plugin_id)
    return True



__all__ = ["TRASH_PREFIX", "UPDATES_DIR", "install_dir_start", "plugin_update_promote"]
