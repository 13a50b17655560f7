"""World installs, world package validation and SillyTavern imports (spec 004 插件与世界安装 / 安装世界 /
ZIP 激活前的校验 / 目标目录已存在), on the staging steps of ``plugins_app.install``.

A world is staged next to its target (``COVEL_HOME/worlds/.staging-*``), validated there with the
world package loader, published into ``COVEL_HOME/worlds/<id>`` with one rename and activated: read
back through the world selectors exactly as GET /api/worlds does. If that fails, only the folder this
request created is removed (retry is safe). Installed worlds carry the marker file
``.covel-install.json``; world_package_load reports them with metadata.source "generated-file"
(bound to the user world directory, so DELETE works at once).
"""
from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from django.conf import settings

from covel.errors import ApiError
from covel.jsonbody import unstorable_json_problem
from plugins_app.errors import (
    CODE_ST_IMPORT_ID_EXHAUSTED, CODE_WORLD_ACTIVATION_FAILED, CODE_WORLD_ALREADY_EXISTS, PackageInvalid, TargetExists,
)
from plugins_app.install import (
    ORIGIN_GITHUB, ORIGIN_PATH, ORIGIN_ST_IMPORT, ORIGIN_ZIP, package_claim, package_copy_from_path, package_extract, package_publish,
    package_staging,
)
from plugins_app.plugin_services import package_validate_source, package_validate_upload
from plugins_app.validation import CODE_IDENTITY_INVALID, PackageValidationReport, error, report_build
from sessions import st_import
from sessions import world_packages as wp
from sessions import world_selectors
from sessions.models import World
from sessions.services import DEFAULT_LOCALE

ID_CANDIDATES = 50  # st-import: <base>, <base>-2 ... <base>-50, then 409


def _marker_write(root: Path, *, kind: str, package_id: str, origin: str, receipt: dict[str, Any] | None = None) -> None:
    """Write the install marker. With ``receipt`` (a GitHub install) it also records repository,
    commit, path, digest, tracking, version and the sha256 of every file (for ``integrity``)."""
    marker: dict[str, Any] = {"kind": kind, "id": package_id, "source": wp.SOURCE_GENERATED, "origin": origin,
                              "installedAt": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
    if receipt:
        from plugins_app.github import package_file_digests

        marker.update({k: receipt.get(k) for k in ("repository", "commit", "path", "digest", "tracking", "version")})
        marker["files"] = package_file_digests(root)
    (root / wp.INSTALL_MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")


def _world_id_taken(world_id: str) -> bool:
    user_dir = wp.user_worlds_dir(settings.COVEL_HOME)
    return ((world_selectors.builtin_worlds_dir() / world_id).exists() or (user_dir / world_id).exists()
            or World.objects.filter(pk=world_id).exists())


def world_id_taken(world_id: str) -> bool:
    """True when a builtin, user or store world already has ``world_id``."""
    return _world_id_taken(world_id)


def world_stage_check(staged_root: Path, *, expected_id: str | None = None) -> str:
    """The world id of a staged package after the install checks (ZIP 激活前的校验). Raises 400
    package_invalid; with ``expected_id`` 409 preview_changed when the id differs."""
    return world_stage_load(staged_root, expected_id=expected_id).manifest["id"]


def _world_checked(world: wp.WorldPackage, *, expected_id: str | None) -> None:
    declared = world.manifest.get("id")
    if not isinstance(declared, str) or not wp.WORLD_ID_RE.match(declared):
        issues = [i for i in world.issues if i.is_error] or [
            error(CODE_IDENTITY_INVALID, "world.yaml needs an id: lowercase letters, digits and hyphens", wp.WORLD_FILE, "id")]
        raise PackageInvalid("The world package has no valid id", report_build(kind="world", package_id=None, issues=issues).as_dict())
    if expected_id is not None and declared != expected_id:
        raise ApiError(409, "preview_changed", f"The world id changed from {expected_id} to {declared}; preview again")
    if not world.ok:
        raise PackageInvalid("The world package has errors", wp.world_validation_report(world).as_dict())


def world_stage_load(staged_root: Path, *, expected_id: str | None = None) -> wp.WorldPackage:
    """world_stage_check, returning the loaded package (its id is ``.manifest["id"]``)."""
    world = wp.world_package_load(staged_root, source=wp.SOURCE_USER)
    _world_checked(world, expected_id=expected_id)
    return world


def world_install_staged(staged_root: Path, world_id: str, *, origin: str, receipt: dict[str, Any] | None = None) -> dict[str, Any]:
    """Activate a world package staged under COVEL_HOME/worlds/.staging-* that passed
    world_stage_check (GitHub installs, batches, collections); ``staged_root`` is consumed.
    Errors as _world_activate."""
    return _world_activate(staged_root, world_id, origin=origin, receipt=receipt, is_checked=True)


def _world_activate(staged_root: Path, world_id: str, *, origin: str, receipt: dict[str, Any] | None = None,
                    is_checked: bool = False) -> dict[str, Any]:
    """Validate the staged world (unless ``is_checked``), claim COVEL_HOME/worlds/<id>, publish and activate it.

    Raises 400 package_invalid (error diagnostics: nothing written), 409 world_already_exists
    (builtin/store/user world with this id, or a concurrent install), 500 world_activation_failed
    (the new folder is removed again).
    """
    # A marker the package brought along is overwritten: it is the installer's record.
    _marker_write(staged_root, kind="world", package_id=world_id, origin=origin, receipt=receipt)
    if not is_checked:
        world = wp.world_package_load(staged_root, source=wp.SOURCE_USER, expected_id=world_id)
        if not world.ok:
            raise PackageInvalid("The world package has errors", wp.world_validation_report(world).as_dict())
    if _world_id_taken(world_id):
        raise TargetExists(world_id, code=CODE_WORLD_ALREADY_EXISTS)
    target = wp.user_worlds_dir(settings.COVEL_HOME) / world_id
    package_claim(target, world_id, code=CODE_WORLD_ALREADY_EXISTS)
    package_publish(staged_root, target)
    wp.world_packages_forget(target)
    view = world_selectors.world_get(world_id)
    if view is None or view.package is None or view.package.root != target.resolve():
        shutil.rmtree(target, ignore_errors=True)
        raise ApiError(500, CODE_WORLD_ACTIVATION_FAILED, f"World {world_id} could not be activated; retry the install")
    return {"ok": True, "kind": "world", "id": world_id, "restartRequired": False}


def world_replace_staged(staged_root: Path, world_id: str, *, receipt: dict[str, Any]) -> None:
    """Replace the installed user world ``world_id`` with a staged package that passed
    world_stage_check (a GitHub update): the old folder is renamed out, the new one in, and read back as GET /api/worlds does;
    if that fails the old folder comes back (500 world_activation_failed). ``staged_root`` is consumed."""
    from plugins_app.install import package_move_out, trash_remove

    _marker_write(staged_root, kind="world", package_id=world_id, origin=ORIGIN_GITHUB, receipt=receipt)
    target = wp.user_worlds_dir(settings.COVEL_HOME) / world_id
    old = package_move_out(target)
    try:
        os.replace(staged_root, target)
        wp.world_packages_forget(target)
        view = world_selectors.world_get(world_id)
        if view is None or view.package is None or view.package.root != target.resolve():
            raise OSError("the new package did not activate")
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)
        os.replace(old, target)
        wp.world_packages_forget(target)
        raise ApiError(500, CODE_WORLD_ACTIVATION_FAILED, f"World {world_id} could not be updated ({exc}); "
                       "the installed version stays") from None
    trash_remove(old)


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
    staging = package_staging(wp.user_worlds_dir(settings.COVEL_HOME))
    try:
        root = package_extract(data, staging, "world", wp.WORLD_FILE)
        return _world_install(root, origin=ORIGIN_ZIP)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_install_path(raw_path: Any) -> dict[str, Any]:
    """POST /api/install/world with JSON {source: {kind: "path", path}}: copy a world folder from an
    allowed root (403 path-outside-roots; links rejected) and install it like an upload."""
    staging = package_staging(wp.user_worlds_dir(settings.COVEL_HOME))
    try:
        root = package_copy_from_path(raw_path, staging, "world", wp.WORLD_FILE)
        return _world_install(root, origin=ORIGIN_PATH)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_validate_dir(root: Path, *, package_id: str | None = None) -> PackageValidationReport:
    """Statically validate a world folder (report counts: characters, loreEntries, dimensions, locales)."""
    world = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=package_id)
    return wp.world_validation_report(world)


def world_validate_upload(data: bytes) -> PackageValidationReport:
    """POST /api/install/validate/world with a .zip: checked before anything is activated."""
    return package_validate_upload("world", data, marker=wp.WORLD_FILE, validate_dir=world_validate_dir)


def world_validate_source(source: Any, *, allowed_roots: list[Path]) -> PackageValidationReport:
    """POST /api/install/validate/world with JSON {source}: a builtin/user world id or a folder."""
    def installed_root(world_id: str) -> Path | None:
        for directory in (world_selectors.builtin_worlds_dir(), wp.user_worlds_dir(settings.COVEL_HOME)):
            root = Path(directory) / world_id
            if root.is_dir():
                return root
        return None

    return package_validate_source("world", source, installed_root=installed_root, validate_dir=world_validate_dir,
                                   allowed_roots=allowed_roots)


def st_import_run(files: list[tuple[str, bytes]], *, locale: Any = None, name: Any = None, is_preview: bool = False) -> dict[str, Any]:
    """POST /api/install/st-import: convert SillyTavern cards / World Info into one world.

    files: (name, bytes) per multipart `file`; locale: BCP 47 (default sessions DEFAULT_LOCALE),
    normalized; name: optional world name. Returns {ok, preview, kind: "world", id,
    restartRequired: false, report} — nothing written when is_preview. The id is the first free
    candidate of st_import.world_id_base(name). Raises StImportError 400/413 (details.code),
    400 invalid_locale / invalid_name, 409 st_import_id_exhausted, 409 world_already_exists (a
    concurrent install took the id: retry), 400 package_invalid (generated package failed checks).
    """
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
    staging = package_staging(wp.user_worlds_dir(settings.COVEL_HOME))
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
