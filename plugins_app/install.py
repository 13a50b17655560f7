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

Plugins need a restart (`restartRequired: true`): the process registry is not rebuilt here.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from covel.errors import ApiError
from plugins_app import manifests as mf
from plugins_app.discovery import BUILTIN_DIR as BUILTIN_PLUGINS_DIR, community_plugins_dir
from plugins_app.errors import CODE_INSTALL_FAILED, CODE_PAYLOAD_TOO_LARGE, CODE_PLUGIN_RESERVED_ID, PackageInvalid, TargetExists
from plugins_app.validation import (
    CODE_IDENTITY_INVALID, CODE_MANIFEST_MISSING, CODE_ZIP_TOO_LARGE, error, package_root_find, report_build,
    zip_extract_safe,
)

ORIGIN_ZIP = "zip"
ORIGIN_PATH = "path"
ORIGIN_ST_IMPORT = "st-import"


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
    Raises 413 payload_too_large, 400 package_invalid (zip-slip, not a zip, no marker)."""
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


def _plugin_install(root: Path, *, extracted: Path | None) -> dict[str, Any]:
    plugin_id = plugin_install_id(root, extracted=extracted)
    if plugin_id is None:
        issue = error(CODE_IDENTITY_INVALID, "cannot derive a plugin id (PLUGIN.md id, folder name or package.json name)", mf.PLUGIN_FILE, "id")
        raise PackageInvalid("The plugin has no valid id", report_build(kind="plugin", package_id=None, issues=[issue]).as_dict())
    if plugin_id in _builtin_plugin_ids():
        raise ApiError(409, CODE_PLUGIN_RESERVED_ID, f"{plugin_id} is a builtin plugin id", details={"id": plugin_id})
    manifest = mf.plugin_manifest_load(root, expected_id=plugin_id)
    if manifest.has_errors:
        report = report_build(kind="plugin", package_id=plugin_id, issues=manifest.issues,
                              extra_counts={"runtimes": len(manifest.runtimes), "tools": len(manifest.contributes.tools)})
        raise PackageInvalid("The plugin manifest has errors", report.as_dict())
    has_server_code = bool(manifest.entry) or any(r.function is not None and r.function.handler for r in manifest.runtimes)
    target = community_plugins_dir(settings.COVEL_HOME) / plugin_id
    package_claim(target, plugin_id, code="plugin_already_exists")
    package_publish(root, target)
    return {"ok": True, "kind": "plugin", "id": plugin_id, "restartRequired": True, "hasServerCode": has_server_code}


def plugin_install_upload(data: bytes) -> dict[str, Any]:
    """POST /api/install/plugin (multipart `file`): a .zip with PLUGIN.md at its root or in its
    single top folder → COVEL_HOME/plugins/<id>.

    Returns {ok, kind: "plugin", id, restartRequired: true, hasServerCode} (201). The entry code is
    not executed; the plugin is discovered at the next start. Raises 400 package_invalid
    (unsafe archive, no id, manifest errors), 409 plugin_reserved_id (builtin id),
    409 plugin_already_exists ("target already exists: <id>"), 413 payload_too_large.
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


__all__ = [
    "ORIGIN_PATH", "ORIGIN_ST_IMPORT", "ORIGIN_ZIP", "allowed_package_roots", "package_claim", "package_copy_from_path",
    "package_extract", "package_publish", "package_staging", "plugin_install_id", "plugin_install_path",
    "plugin_install_upload",
]
