"""Installing plugin and world packages, and SillyTavern imports (spec 004 插件与世界安装 /
安装世界 / ZIP 激活前的校验 / 目标目录已存在).

Every install is staged in a hidden folder next to its target (`COVEL_HOME/worlds/.staging-*`,
`COVEL_HOME/plugins/.staging-*`; discovery skips dot folders), validated there with the package
loaders, and published with one rename:

1. the target folder is claimed with `mkdir` (atomic: a concurrent install of the same id gets 409);
2. the staged package is renamed onto the claimed (empty) folder;
3. worlds are activated: read back through the world selectors exactly as GET /api/worlds does.
   If that fails, only the folder this request created is removed (retry is safe).

Installed worlds carry the marker file `.covel-install.json`; world_package_load reports them with
metadata.source "generated-file" (bound to the user world directory, so DELETE works at once).
Plugins need a restart (`restartRequired: true`): the process registry is not rebuilt here.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from django.conf import settings

from covel.errors import ApiError
from covel.jsonbody import unstorable_json_problem
from plugins_app import manifests as mf
from plugins_app import st_import
from plugins_app.discovery import BUILTIN_DIR as BUILTIN_PLUGINS_DIR, community_plugins_dir
from plugins_app.errors import (
    CODE_INSTALL_FAILED, CODE_PAYLOAD_TOO_LARGE, CODE_PLUGIN_RESERVED_ID, CODE_ST_IMPORT_ID_EXHAUSTED,
    CODE_WORLD_ACTIVATION_FAILED, CODE_WORLD_ALREADY_EXISTS, PackageInvalid, StImportError, TargetExists,
)
from plugins_app.validation import (
    CODE_IDENTITY_INVALID, CODE_MANIFEST_MISSING, CODE_ZIP_TOO_LARGE, error, package_root_find, report_build,
    zip_extract_safe,
)
from sessions import world_packages as wp
from sessions import world_selectors

ORIGIN_ZIP = "zip"
ORIGIN_PATH = "path"
ORIGIN_ST_IMPORT = "st-import"
ID_CANDIDATES = 50  # st-import: <base>, <base>-2 ... <base>-50, then 409


# ------------------------------------------------------------------------------- shared


def allowed_package_roots() -> list[Path]:
    """Directories a `{source: {kind: "path"}}` request may read: COVEL_HOME/plugins, /worlds and
    settings.COVEL_PACKAGE_ROOTS (same rule as the validate endpoints)."""
    home = Path(settings.COVEL_HOME)
    return [home / "plugins", home / "worlds", *[Path(p) for p in settings.COVEL_PACKAGE_ROOTS]]


def _staging(parent: Path) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))


def _extract(data: bytes, staging: Path, kind: str, marker: str) -> Path:
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


def _copy_from_path(raw: Any, staging: Path, kind: str, marker: str) -> Path:
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


def _claim(target: Path, package_id: str, *, code: str) -> None:
    """Create the (empty) target folder or raise 409 — the one atomic step deciding the id."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        target.mkdir()
    except FileExistsError:
        raise TargetExists(package_id, code=code) from None


def _publish(staged_root: Path, target: Path) -> None:
    """Rename the staged package onto its claimed empty folder; on failure release the claim."""
    try:
        os.replace(staged_root, target)
    except OSError as exc:
        try:
            target.rmdir()
        except OSError:
            pass
        raise ApiError(500, CODE_INSTALL_FAILED, f"Could not publish the package: {exc.strerror or exc}") from None


def _marker_write(root: Path, *, kind: str, package_id: str, origin: str) -> None:
    marker = {"kind": kind, "id": package_id, "source": wp.SOURCE_GENERATED, "origin": origin,
              "installedAt": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
    (root / wp.INSTALL_MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")


# ------------------------------------------------------------------------------- worlds


def _world_id_taken(world_id: str) -> bool:
    from sessions.models import World

    user_dir = wp.user_worlds_dir(settings.COVEL_HOME)
    return ((world_selectors.builtin_worlds_dir() / world_id).exists() or (user_dir / world_id).exists()
            or World.objects.filter(pk=world_id).exists())


def _world_activate(staged_root: Path, world_id: str, *, origin: str) -> dict[str, Any]:
    """Validate the staged world, claim COVEL_HOME/worlds/<id>, publish and activate it.

    Raises 400 package_invalid (error diagnostics: nothing written), 409 world_already_exists
    (builtin/store/user world with this id, or a concurrent install), 500 world_activation_failed
    (the new folder is removed again).
    """
    _marker_write(staged_root, kind="world", package_id=world_id, origin=origin)
    world = wp.world_package_load(staged_root, source=wp.SOURCE_USER, expected_id=world_id)
    if not world.ok:
        raise PackageInvalid("The world package has errors", wp.world_validation_report(world).as_dict())
    if _world_id_taken(world_id):
        raise TargetExists(world_id, code=CODE_WORLD_ALREADY_EXISTS)
    target = wp.user_worlds_dir(settings.COVEL_HOME) / world_id
    _claim(target, world_id, code=CODE_WORLD_ALREADY_EXISTS)
    _publish(staged_root, target)
    view = world_selectors.world_get(world_id)
    if view is None or view.package is None or view.package.root != target.resolve():
        shutil.rmtree(target, ignore_errors=True)
        raise ApiError(500, CODE_WORLD_ACTIVATION_FAILED, f"World {world_id} could not be activated; retry the install")
    return {"ok": True, "kind": "world", "id": world_id, "restartRequired": False}


def _world_install(staged_root: Path, *, origin: str) -> dict[str, Any]:
    world = wp.world_package_load(staged_root, source=wp.SOURCE_USER)
    declared = world.manifest.get("id")
    if not isinstance(declared, str) or not wp.WORLD_ID_RE.match(declared):
        issues = [i for i in world.issues if i.is_error] or [
            error(CODE_IDENTITY_INVALID, "world.yaml needs an id: lowercase letters, digits and hyphens", wp.WORLD_FILE, "id")]
        raise PackageInvalid("The world package has no valid id", report_build(kind="world", package_id=None, issues=issues).as_dict())
    return _world_activate(staged_root, declared, origin=origin)


def world_install_upload(data: bytes) -> dict[str, Any]:
    """POST /api/install/world (multipart `file`): a .zip with world.yaml + WORLD.md at its root or
    in its single top folder → COVEL_HOME/worlds/<world.yaml id>.

    Returns {ok, kind: "world", id, restartRequired: false} (201). The world is listed by
    GET /api/worlds immediately with metadata.source "generated-file". Errors: see _world_activate,
    plus 400 package_invalid for unsafe/unreadable archives and 413 payload_too_large.
    """
    staging = _staging(wp.user_worlds_dir(settings.COVEL_HOME))
    try:
        root = _extract(data, staging, "world", wp.WORLD_FILE)
        return _world_install(root, origin=ORIGIN_ZIP)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_install_path(raw_path: Any) -> dict[str, Any]:
    """POST /api/install/world with JSON {source: {kind: "path", path}}: copy a world folder from an
    allowed root (403 path-outside-roots; links rejected) and install it like an upload."""
    staging = _staging(wp.user_worlds_dir(settings.COVEL_HOME))
    try:
        root = _copy_from_path(raw_path, staging, "world", wp.WORLD_FILE)
        return _world_install(root, origin=ORIGIN_PATH)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
    _claim(target, plugin_id, code="plugin_already_exists")
    _publish(root, target)
    return {"ok": True, "kind": "plugin", "id": plugin_id, "restartRequired": True, "hasServerCode": has_server_code}


def plugin_install_upload(data: bytes) -> dict[str, Any]:
    """POST /api/install/plugin (multipart `file`): a .zip with PLUGIN.md at its root or in its
    single top folder → COVEL_HOME/plugins/<id>.

    Returns {ok, kind: "plugin", id, restartRequired: true, hasServerCode} (201). The entry code is
    not executed; the plugin is discovered at the next start. Raises 400 package_invalid
    (unsafe archive, no id, manifest errors), 409 plugin_reserved_id (builtin id),
    409 plugin_already_exists ("target already exists: <id>"), 413 payload_too_large.
    """
    staging = _staging(community_plugins_dir(settings.COVEL_HOME))
    try:
        root = _extract(data, staging, "plugin", mf.PLUGIN_FILE)
        return _plugin_install(root, extracted=staging / "pkg")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plugin_install_path(raw_path: Any) -> dict[str, Any]:
    """POST /api/install/plugin with JSON {source: {kind: "path", path}} (see world_install_path)."""
    staging = _staging(community_plugins_dir(settings.COVEL_HOME))
    try:
        root = _copy_from_path(raw_path, staging, "plugin", mf.PLUGIN_FILE)
        return _plugin_install(root, extracted=None)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------- SillyTavern


def st_import_run(files: list[tuple[str, bytes]], *, locale: Any = None, name: Any = None, is_preview: bool = False) -> dict[str, Any]:
    """POST /api/install/st-import: convert SillyTavern cards / World Info into one world.

    files: (name, bytes) per multipart `file`; locale: BCP 47 (default sessions DEFAULT_LOCALE),
    normalized; name: optional world name. Returns {ok, preview, kind: "world", id,
    restartRequired: false, report} — nothing written when is_preview. The id is the first free
    candidate of st_import.world_id_base(name). Raises StImportError 400/413 (details.code),
    400 invalid_locale / invalid_name, 409 st_import_id_exhausted, 409 world_already_exists (a
    concurrent install took the id: retry), 400 package_invalid (generated package failed checks).
    """
    from sessions.services import DEFAULT_LOCALE

    tag = st_import.locale_normalize(locale if locale not in (None, "") else DEFAULT_LOCALE)
    if tag is None or not wp.LOCALE_RE.match(tag):
        raise ApiError(400, "invalid_locale", "locale must be a BCP 47 language tag")
    if name is not None and (not isinstance(name, str) or len(name) > st_import.MAX_NAME_CHARS
                             or unstorable_json_problem(name) is not None):
        raise ApiError(400, "invalid_name", f"name must be a string of at most {st_import.MAX_NAME_CHARS} characters, "
                       "without NUL characters or unpaired surrogates")
    conversion = st_import.st_convert(files, locale=tag, name=name)
    base = st_import.world_id_base(conversion.name)
    candidates = [base] + [f"{base[:60]}-{n}" for n in range(2, ID_CANDIDATES + 1)]
    world_id = next((c for c in candidates if not _world_id_taken(c)), None)
    if world_id is None:
        raise ApiError(409, CODE_ST_IMPORT_ID_EXHAUSTED, f"No free world id for {base!r}; pass another name", details={"code": "id-exhausted"})
    body = {"ok": True, "preview": is_preview, "kind": "world", "id": world_id, "restartRequired": False,
            "report": conversion.report(world_id)}
    if is_preview:
        return body
    staging = _staging(wp.user_worlds_dir(settings.COVEL_HOME))
    try:
        root = staging / world_id
        for rel, content in conversion.package_files(world_id).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        _world_activate(root, world_id, origin=ORIGIN_ST_IMPORT)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return body


__all__ = [
    "ORIGIN_PATH", "ORIGIN_ST_IMPORT", "ORIGIN_ZIP", "StImportError", "allowed_package_roots", "plugin_install_id",
    "plugin_install_path", "plugin_install_upload", "st_import_run", "world_install_path", "world_install_upload",
]
