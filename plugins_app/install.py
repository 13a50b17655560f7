"""Installing packages (spec 004 插件与世界安装 / ZIP 激活前的校验 / 目标目录已存在): the staging
steps every package kind shares, and plugin installs. World installs and SillyTavern imports build on
the shared steps in ``sessions.world_install``.

Every install is staged in a hidden folder next to its target (`COVEL_HOME/worlds/.staging-*`,
`COVEL_HOME/plugins/.staging-*`; discovery skips dot folders), validated there with the package
loaders, and published with one rename:

1. the target folder is claimed with `mkdir` (atomic: a concurrent install of the same id gets 409);
2. the staged package is renamed onto the claimed (empty) folder;
3. worlds are activated: read back through the world selectors exactly as GET /api/worlds does.
   If that fails, only the folder this request created is removed (retry is safe).

Plugins answer `restartRequired: true` (spec): code a process already imported stays until it
restarts. Their listing does not wait for one: every install, update and uninstall bumps the
registry generation marker (``plugins_app.registry.registry_generation_bump``), and each process
(web or worker) rebuilds its registry at its next read.

Uninstall (spec 004 DELETE /api/plugins/:id) renames the package out of the load directory first
(`plugins/.trash-<id>-<hex>`, skipped by discovery), then removes it; a removal that fails is
retried at the next start (``install_dir_start``). Operations on one package id (install, update,
cancel, uninstall) exclude each other through a lock folder `plugins/.locks/<id>` (mkdir is atomic
across processes; a lock older than LOCK_STALE_SECONDS is taken over).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from django.conf import settings

from covel.errors import ApiError
from plugins_app import manifests as mf
from plugins_app.discovery import BUILTIN_DIR as BUILTIN_PLUGINS_DIR, community_plugins_dir
from plugins_app.errors import CODE_INSTALL_FAILED, CODE_PAYLOAD_TOO_LARGE, CODE_PLUGIN_RESERVED_ID, PackageInvalid, TargetExists
from plugins_app.trust import RECEIPT_FILE, receipt_write
from plugins_app.validation import (
    CODE_IDENTITY_INVALID, CODE_MANIFEST_MISSING, CODE_ZIP_TOO_LARGE, error, package_root_find, report_build,
    zip_extract_safe,
)

ORIGIN_ZIP = "zip"
ORIGIN_PATH = "path"
ORIGIN_ST_IMPORT = "st-import"
ORIGIN_GITHUB = "github"

logger = logging.getLogger(__name__)

from plugins_app.install_dir import TRASH_PREFIX, UPDATES_DIR, install_dir_start, plugin_update_promote  # noqa: E402,F401

LOCKS_DIR = ".locks"
LOCK_STALE_SECONDS = 600
CODE_PACKAGE_BUSY = "package_busy"
CODE_RECEIPT_NOT_ALLOWED = "receipt-not-allowed"


# ------------------------------------------------------------------------------- shared


def allowed_package_roots() -> list[Path]:
    """Directories a `{source: {kind: "path"}}` request may read: COVEL_HOME/plugins, /worlds and
    settings.COVEL_PACKAGE_ROOTS (same rule as the validate endpoints)."""
    home = Path(settings.COVEL_HOME)
    return [home / "plugins", home / "worlds", *[Path(p) for p in settings.COVEL_PACKAGE_ROOTS]]


def package_staging(parent: Path) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))


def package_extract(data: bytes, staging: Path, kind: str, marker: str) -> Path:
    """Extract a zip into staging/pkg and return the package root (the folder holding `marker`).
    Raises 413 payload_too_large, 400 package_invalid (zip-slip, links, case-colliding names, not a
    zip, no marker)."""
    from plugins_app.github import archive_case_check

    archive_case_check(data, kind=kind)
    issues = zip_extract_safe(data, staging / "pkg")
    if any(i.code == CODE_ZIP_TOO_LARGE for i in issues):
        raise ApiError(413, CODE_PAYLOAD_TOO_LARGE, issues[0].message)
    if issues:
        raise PackageInvalid("The archive cannot be installed", report_build(kind=kind, package_id=None, issues=issues).as_dict())  # type: ignore[arg-type]
    root = package_root_find(staging / "pkg", marker)
    if root is None:
        issue = error(CODE_MANIFEST_MISSING, f"{marker} not found at the archive root or in its single top folder", marker)
        raise PackageInvalid(f"{marker} not found", report_build(kind=kind, package_id=None, issues=[issue]).as_dict())  # type: ignore[arg-type]
    return root


def package_copy_from_path(raw: Any, staging: Path, kind: str, marker: str) -> Path:
    """Copy a directory package (desktop directory import) into staging/<folder name>.

    Raises 400 invalid_request, 403 path-outside-roots, 404 package_not_found, 400 package_invalid
    (a symbolic link inside, or the install directory inside the source).
    """
    if not isinstance(raw, str) or not raw:
        raise ApiError(400, "invalid_request", "source.path is required")
    source = Path(raw).resolve()
    roots = [r.resolve() for r in allowed_package_roots()]
    if not any(source == r or r in source.parents for r in roots):
        raise ApiError(403, "path-outside-roots", "The directory is outside the allowed package roots")
    if not source.is_dir() or not (source / marker).is_file():
        raise ApiError(404, "package_not_found", f"No {marker} in that directory")
    if source == staging.parent or source in staging.parents:
        raise ApiError(400, "invalid_request", "The install directory is inside the source directory")
    for path in source.rglob("*"):
        if path.is_symlink():
            issue = error("symlink-not-allowed", "symbolic links are not installed", path.relative_to(source).as_posix())
            raise PackageInvalid("The package contains a symbolic link", report_build(kind=kind, package_id=None, issues=[issue]).as_dict())  # type: ignore[arg-type]
    target = staging / source.name
    shutil.copytree(source, target, symlinks=True)
    return target


def package_claim(target: Path, package_id: str, *, code: str) -> None:
    """Create the (empty) target folder or raise 409 — the one atomic step deciding the id."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        target.mkdir()
    except FileExistsError:
        raise TargetExists(package_id, code=code) from None


def package_publish(staged_root: Path, target: Path) -> None:
    """Rename the staged package onto its claimed empty folder; on failure release the claim."""
    try:
        os.replace(staged_root, target)
    except OSError as exc:
        try:
            target.rmdir()
        except OSError:
            pass
        raise ApiError(500, CODE_INSTALL_FAILED, f"Could not publish the package: {exc.strerror or exc}") from None


# ------------------------------------------------------------------------------- plugins


def plugin_install_id(root: Path, *, extracted: Path | None) -> str | None:
    """The install id (spec 004 插件身份): PLUGIN.md `id`, else the package folder name (when the
    package sits in a folder), else package.json `name` without scope and without an exact
    `plugin-` prefix. None when none of them yields a valid id."""
    meta, _body, _issues = mf.frontmatter_read(root / mf.PLUGIN_FILE, mf.PLUGIN_FILE)
    declared = meta.get("id") if isinstance(meta, dict) else None
    if isinstance(declared, str):
        return declared if mf.PLUGIN_ID_RE.match(declared) else None
    if extracted is None or root != extracted:
        return root.name if mf.PLUGIN_ID_RE.match(root.name) else None
    package_json = root / "package.json"
    if package_json.is_file():
        try:
            name = json.loads(package_json.read_text(encoding="utf-8")).get("name")
        except (OSError, ValueError, AttributeError, RecursionError):
            name = None
        if isinstance(name, str):
            name = name.rsplit("/", 1)[-1]
            if name.startswith("plugin-"):
                name = name[len("plugin-"):]
            return name if mf.PLUGIN_ID_RE.match(name) else None
    return None


def _builtin_plugin_ids() -> set[str]:
    configured = settings.COVEL_BUILTIN_PLUGINS_DIR
    directory = Path(configured) if configured else BUILTIN_PLUGINS_DIR
    return {c.name for c in directory.iterdir() if c.is_dir() and (c / mf.PLUGIN_FILE).is_file()} if directory.is_dir() else set()


def _plugin_install(root: Path, *, extracted: Path | None, receipt: dict[str, Any] | None = None,
                    expected_id: str | None = None) -> dict[str, Any]:
    plugin_id = plugin_check(root, extracted=extracted, expected_id=expected_id)
    has_server_code = plugin_has_server_code(root, plugin_id)
    target = community_plugins_dir(settings.COVEL_HOME) / plugin_id
    with package_lock(community_plugins_dir(settings.COVEL_HOME), plugin_id):
        if receipt is not None:
            receipt_record(root, receipt)
        package_claim(target, plugin_id, code="plugin_already_exists")
        package_publish(root, target)
    registry_refresh()
    return {"ok": True, "kind": "plugin", "id": plugin_id, "restartRequired": True, "hasServerCode": has_server_code}


def plugin_check(root: Path, *, extracted: Path | None, expected_id: str | None = None) -> str:
    """The install id of the plugin package at ``root`` after every pre-publish check (identity,
    reserved id, forged receipt, manifest errors). Raises 400 package_invalid, 409
    plugin_reserved_id; with ``expected_id`` (a signed preview) 409 preview_changed when it differs."""
    plugin_id = plugin_install_id(root, extracted=extracted)
    if plugin_id is None:
        issue = error(CODE_IDENTITY_INVALID, "cannot derive a plugin id (PLUGIN.md id, folder name or package.json name)", mf.PLUGIN_FILE, "id")
        raise PackageInvalid("The plugin has no valid id", report_build(kind="plugin", package_id=None, issues=[issue]).as_dict())
    if expected_id is not None and plugin_id != expected_id:
        raise ApiError(409, "preview_changed", f"The package id changed from {expected_id} to {plugin_id}; preview again")
    if plugin_id in builtin_plugin_ids():
        raise ApiError(409, CODE_PLUGIN_RESERVED_ID, f"{plugin_id} is a builtin plugin id", details={"id": plugin_id})
    if (root / RECEIPT_FILE).exists():
        # The receipt is the installer's record of where a package came from; a package that brings
        # its own could claim a trusted source (spec: 插件包不能自带该文件).
        issue = error(CODE_RECEIPT_NOT_ALLOWED, f"{RECEIPT_FILE} is written by the installer, not shipped in a package", RECEIPT_FILE)
        raise PackageInvalid(f"The package contains {RECEIPT_FILE}", report_build(kind="plugin", package_id=plugin_id, issues=[issue]).as_dict())
    manifest = mf.plugin_manifest_load(root, expected_id=plugin_id)
    if manifest.has_errors:
        report = report_build(kind="plugin", package_id=plugin_id, issues=manifest.issues,
                              extra_counts={"runtimes": len(manifest.runtimes), "tools": len(manifest.contributes.tools)})
        raise PackageInvalid("The plugin manifest has errors", report.as_dict())
    return plugin_id


def plugin_has_server_code(root: Path, plugin_id: str) -> bool:
    """True when the package declares an entry module or a function handler (a manifest scan, not an audit)."""
    manifest = mf.plugin_manifest_load(root, expected_id=plugin_id)
    return bool(manifest.entry) or any(r.function is not None and r.function.handler for r in manifest.runtimes)


def builtin_plugin_ids() -> set[str]:
    """Ids of the builtin plugins (reserved: never installed, never uninstalled)."""
    return _builtin_plugin_ids()


def registry_refresh() -> None:
    """Bump the registry generation: this and every other process rebuilds its registry at its
    next read (see ``plugins_app.registry.registry_get``)."""
    from plugins_app.registry import registry_generation_bump

    registry_generation_bump(settings.COVEL_HOME)


def receipt_record(root: Path, receipt: dict[str, Any]) -> None:
    """Write the install receipt into a staged package (``.covel-install.json``: source, the digest
    of every file and the installer's record ``receipt``; see plugins_app.trust)."""
    receipt_write(root, receipt.get("source"))
    path = root / RECEIPT_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update({k: v for k, v in receipt.items() if k not in ("files",)})
    data.setdefault("installedAt", datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"))
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def receipt_data(root: Path) -> dict[str, Any] | None:
    """The installer's record of the package at ``root`` (None without a readable receipt)."""
    try:
        data = json.loads((Path(root) / RECEIPT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def package_lock(directory: Path, package_id: str) -> Iterator[None]:
    """Hold the operation lock of ``package_id`` in ``directory`` (install, update, cancel and
    uninstall of one package exclude each other, across processes). Raises 409 package_busy when
    another operation holds it; a lock older than LOCK_STALE_SECONDS (a crashed holder) is taken over."""
    lock = directory / LOCKS_DIR / package_id
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock.mkdir()
    except FileExistsError:
        try:
            age = time.time() - lock.stat().st_mtime
        except OSError:
            age = 0.0
        if age < LOCK_STALE_SECONDS:
            raise ApiError(409, CODE_PACKAGE_BUSY, f"Another install, update or uninstall of {package_id} is running; retry",
                           details={"id": package_id}) from None
        os.utime(lock)
    try:
        yield
    finally:
        try:
            lock.rmdir()
        except OSError:
            pass


def package_move_out(target: Path) -> Path:
    """Rename an installed package out of its load directory (``.trash-<id>-<hex>`` next to it) and
    return the new path. Raises 500 install_failed when the rename fails (the package stays whole)."""
    trash = target.parent / f"{TRASH_PREFIX}{target.name}-{uuid.uuid4().hex[:12]}"
    try:
        os.replace(target, trash)
    except OSError as exc:
        raise ApiError(500, CODE_INSTALL_FAILED, f"Could not move {target.name} out of the install directory: "
                       f"{exc.strerror or exc}") from None
    return trash


def trash_remove(trash: Path) -> None:
    """Remove a moved-out package; a failure is logged and retried at the next start."""
    try:
        shutil.rmtree(trash)
    except OSError:
        logger.warning("could not remove %s; retried at the next start", trash, exc_info=True)


# ------------------------------------------------------------------------------- uninstall, listing


def plugin_uninstall(plugin_id: Any) -> dict[str, Any]:
    """DELETE /api/plugins/:id (spec 004 全局插件): remove COVEL_HOME/plugins/<id> and any update
    staged for it. Returns {ok, id, restartRequired: true} — code a process already imported stays
    until it restarts; every registry drops the plugin at its next read. Session data the plugin
    saved is kept.

    Raises 400 invalid_plugin_id, 409 plugin_builtin (a builtin id), 404 plugin_not_installed,
    409 package_busy (another operation on this id), 500 install_failed (the rename failed; the
    package is untouched). A cleanup failure after the rename still succeeds (logged, retried at start).
    """
    if not isinstance(plugin_id, str) or not mf.PLUGIN_ID_RE.match(plugin_id):
        raise ApiError(400, "invalid_plugin_id", "The plugin id is not valid")
    if plugin_id in builtin_plugin_ids():
        raise ApiError(409, "plugin_builtin", f"{plugin_id} is a builtin plugin and cannot be uninstalled", details={"id": plugin_id})
    community = community_plugins_dir(settings.COVEL_HOME)
    target = community / plugin_id
    with package_lock(community, plugin_id):
        staged_update = community / UPDATES_DIR / plugin_id
        if not target.is_dir():
            raise ApiError(404, "plugin_not_installed", f"{plugin_id} is not installed")
        trash = package_move_out(target)
        if staged_update.exists():
            trash_remove(package_move_out(staged_update))
    registry_refresh()
    trash_remove(trash)
    return {"ok": True, "id": plugin_id, "restartRequired": True}


def pending_update_read(community: Path, plugin_id: str) -> dict[str, Any] | None:
    """``pendingUpdate`` of GET /api/install/plugins: {version, source, error} or None."""
    path = community / UPDATES_DIR / plugin_id / "update.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {"version": data.get("version"), "source": data.get("source"), "error": data.get("error")}


def installed_package_entry(root: Path, *, package_id: str, version: Any, sources: list[str]) -> dict[str, Any]:
    """One item of GET /api/install/{plugins,worlds}: {id, version, source, integrity,
    trustedSource, tracking, commit} from the install receipt (source null without one)."""
    from plugins_app.trust import receipt_read, source_is_trusted

    source, integrity = receipt_read(root)
    record = receipt_data(root) or {}
    return {"id": package_id, "version": version if isinstance(version, str) else None, "source": source,
            "integrity": integrity, "trustedSource": source_is_trusted(source, sources),
            "tracking": record.get("tracking") if source else None, "commit": record.get("commit") if source else None}


def plugins_installed_list(registry_lookup: Callable[[str], Any]) -> list[dict[str, Any]]:
    """GET /api/install/plugins: every package folder in COVEL_HOME/plugins — loaded or not yet
    (a new install this process has not read, one that failed to load) — with its receipt.

    registry_lookup(id) → the PluginRecord of this process or None; an item adds ``hostState``
    (the record's, or "not-loaded"), ``error`` and ``pendingUpdate``.
    """
    from plugins_app.trust import trusted_sources

    community = community_plugins_dir(settings.COVEL_HOME)
    if not community.is_dir():
        return []
    sources = trusted_sources()
    items = []
    for child in sorted(community.iterdir(), key=lambda p: p.name):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        meta, _body, _issues = mf.frontmatter_read(child / mf.PLUGIN_FILE, mf.PLUGIN_FILE)
        version = meta.get("version") if isinstance(meta, dict) else None
        item = installed_package_entry(child, package_id=child.name, version=version, sources=sources)
        record = registry_lookup(child.name)
        item["hostState"] = record.host_state if record is not None else "not-loaded"
        item["error"] = getattr(record, "error", None) if record is not None else (
            None if (child / mf.PLUGIN_FILE).is_file() else f"{mf.PLUGIN_FILE} is missing")
        item["pendingUpdate"] = pending_update_read(community, child.name)
        items.append(item)
    return items


def plugin_install_upload(data: bytes) -> dict[str, Any]:
    """POST /api/install/plugin (multipart `file`): a .zip with PLUGIN.md at its root or in its
    single top folder → COVEL_HOME/plugins/<id>.

    Returns {ok, kind: "plugin", id, restartRequired: true, hasServerCode} (201). The entry code is
    not executed. Raises 400 package_invalid (unsafe archive, no id, manifest errors, a shipped
    install receipt), 409 plugin_reserved_id (builtin id), 409 plugin_already_exists ("target
    already exists: <id>"), 409 package_busy, 413 payload_too_large.
    """
    staging = package_staging(community_plugins_dir(settings.COVEL_HOME))
    try:
        root = package_extract(data, staging, "plugin", mf.PLUGIN_FILE)
        return _plugin_install(root, extracted=staging / "pkg")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plugin_install_path(raw_path: Any) -> dict[str, Any]:
    """POST /api/install/plugin with JSON {source: {kind: "path", path}} (see world_install_path)."""
    staging = package_staging(community_plugins_dir(settings.COVEL_HOME))
    try:
        root = package_copy_from_path(raw_path, staging, "plugin", mf.PLUGIN_FILE)
        return _plugin_install(root, extracted=None)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plugin_install_staged(root: Path, *, receipt: dict[str, Any] | None, expected_id: str) -> dict[str, Any]:
    """Install a plugin package already staged under COVEL_HOME/plugins/.staging-* (GitHub
    installs, batches, collections): the same checks and publish step as a zip, plus the install
    receipt when given (None: no source is recorded, as for a zip).
    ``root`` is consumed (renamed into place). Errors as plugin_install_upload, plus 409 preview_changed."""
    return _plugin_install(root, extracted=None, receipt=receipt, expected_id=expected_id)


__all__ = [
    "ORIGIN_GITHUB", "ORIGIN_PATH", "ORIGIN_ST_IMPORT", "ORIGIN_ZIP", "allowed_package_roots", "builtin_plugin_ids",
    "install_dir_start", "installed_package_entry", "package_claim", "package_copy_from_path", "package_extract",
    "package_lock", "package_move_out", "package_publish", "package_staging", "pending_update_read", "plugin_check",
    "plugin_has_server_code", "plugin_install_id", "plugin_install_path", "plugin_install_staged",
    "plugin_install_upload", "plugin_uninstall", "plugin_update_promote", "plugins_installed_list", "receipt_data",
    "receipt_record", "registry_refresh", "trash_remove",
]
