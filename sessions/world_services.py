"""World writes and derived views for the world endpoints (spec 004 世界管理). Owned by the packages
issue; the sessions app's own services stay in sessions/services.py.

Deleting a world deletes its sessions with the ORM (`Session` rows and, through CASCADE foreign
keys, every row hanging off them). The full per-session deletion flow (hooks, media references,
in-process state) belongs to the sessions services; call it from here once it exists.
"""
from __future__ import annotations

import copy
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from covel.errors import ApiError
from plugins_app.validation import Issue
from sessions import world_packages as wp
from sessions import world_selectors as selectors
from sessions.errors import WorldDeleting, WorldNotFound
from sessions.models import Session, World
from sessions.world_data_sync import world_dimensions_changed_notify
from sessions.worldpkg.dimensions import dimensions_import, dimensions_validate

CODE_WORLD_ALREADY_EXISTS = "world_already_exists"
CODE_WORLD_READ_ONLY = "world_read_only"
CODE_INVALID_DIMENSIONS = "invalid_dimensions"
SERVER_MANAGED_METADATA = ("worldDeletion", "source", "storage", "packageManaged")
PACKS_CATALOG = Path(__file__).resolve().parent.parent / "plugins_app" / "packs" / "builtin.yaml"
GALLERY_LIMIT = 60


def _issues_details(issues: list[Issue]) -> dict[str, Any]:
    return {"issues": [i.as_dict() for i in issues]}


def _invalid_dimensions(issues: list[Issue]) -> ApiError:
    return ApiError(422, CODE_INVALID_DIMENSIONS, "World dimensions are invalid", _issues_details(issues))


def _require(world_id: str) -> selectors.WorldView:
    view = selectors.world_get(world_id)
    if view is None:
        raise WorldNotFound(world_id)
    return view


def _row_for_edit(view: selectors.WorldView) -> World:
    """The row holding a world's editable record; package worlds get one marked packageModified
    (spec 004 PATCH: later package loads keep the edited record)."""
    if view.row is not None and (view.package is None or (view.row.metadata or {}).get("packageModified")):
        return view.row
    record = view.record
    meta = copy.deepcopy(record["metadata"])
    meta["packageModified"] = True
    row, _ = World.objects.update_or_create(pk=view.id, defaults={
        "name": record["name"], "metadata": meta,
        "package": {"description": record["description"], "locale": record["locale"], "lore": record.get("lore", "")},
    })
    return row


def world_create(*, payload: dict[str, Any]) -> dict[str, Any]:
    """POST /api/worlds. payload: {id?, name, description?, locale?, lore?, metadata?, dimensions?}.

    Returns the WorldRecord. 409 world_already_exists when the id is a package or row;
    422 invalid_dimensions when metadata.dimensions / dimensions fail validation.
    """
    world_id = payload.get("id") or f"world-{uuid.uuid4().hex[:8]}"
    if not wp.WORLD_ID_RE.match(world_id):
        raise ApiError(400, "invalid_world_id", "id: lowercase letters, digits and hyphens, starting with a letter")
    metadata = {k: v for k, v in (payload.get("metadata") or {}).items() if k not in SERVER_MANAGED_METADATA}
    if payload.get("dimensions") is not None:
        metadata["dimensions"] = payload["dimensions"]
    if "dimensions" in metadata:
        issues = dimensions_validate(metadata["dimensions"])
        if issues:
            raise _invalid_dimensions(issues)
    locale = payload.get("locale") or "en-US"
    metadata.update({"source": "store", "storage": "database", "defaultLocale": locale})
    metadata.setdefault("supportedLocales", [locale])
    with transaction.atomic():
        if selectors.world_package_get(world_id) is not None or World.objects.filter(pk=world_id).exists():
            raise ApiError(409, CODE_WORLD_ALREADY_EXISTS, f"World already exists: {world_id}")
        row = World.objects.create(id=world_id, name=payload.get("name") or world_id, metadata=metadata, package={
            "description": payload.get("description") or "", "locale": locale, "lore": payload.get("lore") or ""})
    return selectors.row_record(row)


def world_update(*, world_id: str, patch: dict[str, Any]) -> dict[str, Any]:
    """PATCH /api/worlds/:id: name/description/locale/lore replace; metadata merges key by key;
    top-level dimensions replace metadata.dimensions. Package worlds become packageModified.
    Raises 404 world_not_found, 409 world_deleting, 422 invalid_dimensions."""
    view = _require(world_id)
    if view.is_deleting:
        raise WorldDeleting(world_id)
    metadata_patch = {k: v for k, v in (patch.get("metadata") or {}).items() if k not in SERVER_MANAGED_METADATA}
    if patch.get("dimensions") is not None:
        metadata_patch["dimensions"] = patch["dimensions"]
    if "dimensions" in metadata_patch:
        issues = dimensions_validate(metadata_patch["dimensions"])
        if issues:
            raise _invalid_dimensions(issues)
    with transaction.atomic():
        row = _row_for_edit(view)
        row = World.objects.select_for_update().get(pk=row.pk)
        if row.state == World.STATE_DELETING:
            raise WorldDeleting(world_id)
        meta = dict(row.metadata or {})
        meta.update(metadata_patch)
        package = dict(row.package or {})
        for key in ("description", "locale", "lore"):
            if patch.get(key) is not None:
                package[key] = patch[key]
        if patch.get("name"):
            row.name = patch["name"]
        dimensions_changed = "dimensions" in metadata_patch and (view.record["metadata"].get("dimensions") or {}) != metadata_patch["dimensions"]
        row.metadata, row.package = meta, package
        row.save()
    if dimensions_changed:
        # Active sessions are told the author's source changed; their values are not reset.
        world_dimensions_changed_notify(world_id, reason="world-edited")
    return selectors.world_get(world_id).record


def world_dimensions_replace(*, world_id: str, payload: Any) -> dict[str, Any]:
    """POST /api/worlds/:id/dimensions/import: replace every definition (no coercion, no defaults).
    Raises 400 (no object `dimensions`), 404, 409 world_deleting, 422 invalid_dimensions."""
    view = _require(world_id)
    if view.is_deleting:
        raise WorldDeleting(world_id)
    dimensions, issues = dimensions_import(payload)
    if dimensions is None:
        if issues and issues[0].code == "invalid-request":
            raise ApiError(400, "invalid_request", "Body must contain an object `dimensions`")
        raise _invalid_dimensions(issues)
    return world_update(world_id=world_id, patch={"dimensions": dimensions})


WORLD_DELETE_LEASE_SECONDS = 600  # spec 004 删除世界: a lease left by a dead process is taken over after 10 minutes


def _deletion_mark(row: World) -> dict[str, Any]:
    mark = (row.metadata or {}).get("worldDeletion")
    return mark if isinstance(mark, dict) else {}


def world_delete(*, world_id: str) -> dict[str, Any]:
    """DELETE /api/worlds/:id (spec 004 删除世界). 403 world_read_only for builtin (source "file") worlds.

    1. Briefly under the world row lock: write the deletion mark (state "deleting",
       metadata.worldDeletion = {state, startedAt, leaseUntil}); reads still work, writes and new
       sessions get 409 world_deleting. A second DELETE while the lease (10 min) runs is 409
       world_deleting; a lease left by a dead process, or a retryable mark, is taken over.
    2. Without the world lock, every session goes through the full session delete
       (sessions.services.session_delete: drain, SessionEnd once, media references). A failure
       (409 session_lifecycle_busy, 503 session_busy ...) leaves the sessions already deleted
       deleted and marks the world retryable (worldDeletion.state "failed"); the error is raised.
    3. The package folder (user packages) is moved out of the load directory first, then the row
       is deleted, then the moved folder. Returns {ok, id, deletedSessions}.
    """
    import time

    from sessions.services import session_delete

    view = _require(world_id)
    if view.source == wp.SOURCE_FILE and view.package is not None and view.package.source == wp.SOURCE_FILE:
        raise ApiError(403, CODE_WORLD_READ_ONLY, "Builtin worlds cannot be deleted")
    now = time.time()
    with transaction.atomic():
        row, _ = World.objects.get_or_create(pk=world_id, defaults={"name": view.record["name"], "metadata": {
            "source": view.source}, "package": {}})
        row = World.objects.select_for_update().get(pk=world_id)
        mark = _deletion_mark(row)
        if row.state == World.STATE_DELETING and mark.get("state") != "failed" and float(mark.get("leaseUntil") or 0) > now:
            raise WorldDeleting(world_id)
        row.state = World.STATE_DELETING
        row.metadata = {**(row.metadata or {}), "worldDeletion": {
            "state": "deleting", "startedAt": now, "leaseUntil": now + WORLD_DELETE_LEASE_SECONDS,
            "deletedSessions": int(mark.get("deletedSessions") or 0)}}
        row.save(update_fields=["state", "metadata", "updated_at"])
    deleted = 0
    for session_id in list(Session.objects.filter(world_id=world_id).order_by("created_at").values_list("id", flat=True)):
        try:
            session_delete(session_id)
        except Exception as exc:
            if getattr(exc, "status", None) == 404 or type(exc).__name__ == "SessionNotFound":
                continue  # deleted meanwhile
            World.objects.filter(pk=world_id).update(metadata={**(World.objects.get(pk=world_id).metadata or {}), "worldDeletion": {
                "state": "failed", "retryable": True, "startedAt": now, "leaseUntil": 0,
                "deletedSessions": int(mark.get("deletedSessions") or 0) + deleted}})
            raise
        deleted += 1
    package = view.package
    if package is not None and package.source in (wp.SOURCE_USER, wp.SOURCE_GENERATED) and package.root.is_dir():
        trash = package.root.with_name(f".deleting-{world_id}-{uuid.uuid4().hex[:6]}")
        package.root.rename(trash)  # out of the load directory before the record goes
        wp.world_packages_forget(package.root)
        World.objects.filter(pk=world_id).delete()
        shutil.rmtree(trash, ignore_errors=True)
    else:
        World.objects.filter(pk=world_id).delete()
    return {"ok": True, "id": world_id, "deletedSessions": deleted}


def world_restore_package(*, world_id: str) -> dict[str, Any]:
    """POST /api/worlds/:id/restore-package: the record follows the package files again.

    The edited row (packageModified) is dropped, so the record is the package's (its digest, its
    dimensions); source, storage and creation time are the package's as before. Sessions keep their
    data; when the dimension definitions change, active sessions get world.dimensions.changed.
    Errors: 404 world_not_found, 409 world_not_from_package, world_package_missing, world_deleting,
    422 world_package_invalid (the edited record stays as it is).
    """
    view = _require(world_id)
    if view.is_deleting:
        raise WorldDeleting(world_id)
    meta = view.record["metadata"]
    from_package = view.package is not None or meta.get("packageManaged") or meta.get("source") in (
        wp.SOURCE_FILE, wp.SOURCE_USER, wp.SOURCE_GENERATED)
    if not from_package:
        raise ApiError(409, "world_not_from_package", "This world does not come from a world package")
    if view.package is None:
        broken = selectors.world_package_broken(world_id)
        if broken is not None:
            raise ApiError(422, "world_package_invalid", "The world package does not load; the record is kept",
                           {"diagnostics": selectors.package_errors(broken)})
        raise ApiError(409, "world_package_missing", "The world directory has no package for this world")
    before = meta.get("dimensions") or {}
    with transaction.atomic():
        row = World.objects.select_for_update().filter(pk=world_id).first()
        if row is not None:
            if row.state == World.STATE_DELETING:
                raise WorldDeleting(world_id)
            row.delete()  # the row held only the in-app edits
    restored = selectors.world_get(world_id)
    if (restored.record["metadata"].get("dimensions") or {}) != before:
        world_dimensions_changed_notify(world_id, reason="package-restored")
    return restored.record


def world_dimensions_get(*, world_id: str) -> dict[str, Any]:
    view = _require(world_id)
    dims = view.record["metadata"].get("dimensions")
    return dims if isinstance(dims, dict) else {}


# ------------------------------------------------------------------------------- plugin plan


def world_plugin_plan(*, world_id: str, registry) -> dict[str, Any]:
    """WorldPluginPlan (spec 004 GET /api/worlds/:id/plugin-plan).

    {worldId, policy: {preset?, plus, requires}, packs[], selectedPackId, defaultPluginIds,
    missing: [{pluginId, packId?}]}. Plugin id lists keep only installed (non-error) plugins.
    """
    view = _require(world_id)
    policy = view.record["metadata"].get("pluginPolicy") or {}
    installed = {r.id for r in registry.all() if r.host_state != "error"}
    catalog, _ = wp.packs_catalog_load(PACKS_CATALOG)
    builtin = {p.id: p for p in catalog}
    world_packs = [p for p in policy.get("packs") or [] if isinstance(p, dict) and isinstance(p.get("id"), str)]
    preset = policy.get("preset") or policy.get("presetId")
    plus = [p for p in policy.get("plus") or policy.get("requested") or [] if isinstance(p, str)]
    missing: list[dict[str, Any]] = []

    def pack_out(pack: dict[str, Any], source: str) -> dict[str, Any]:
        out = {k: copy.deepcopy(pack.get(k)) for k in ("id", "label", "description", "tags", "reason", "defaultViewMode") if pack.get(k) is not None}
        for key in ("requested", "recommended"):
            ids = [p for p in pack.get(key) or [] if isinstance(p, str)]
            out[key] = [p for p in ids if p in installed]
            missing.extend({"pluginId": p, "packId": pack["id"]} for p in ids if p not in installed)
        out["source"] = source
        return out

    packs: list[dict[str, Any]] = []
    world_by_id = {p["id"]: p for p in world_packs}
    if preset in builtin:
        base = builtin[preset].as_dict()
        pitch = world_by_id.get(preset)
        if pitch:
            base.update({k: pitch[k] for k in ("label", "description", "reason") if k in pitch})
        packs.append(pack_out(base, "world" if pitch else "builtin"))
    elif preset in world_by_id:
        packs.append(pack_out(world_by_id[preset], "world"))
    others = [p for p in world_packs if p["id"] != preset] if world_packs else [p.as_dict() for p in catalog if p.id != preset]
    packs.extend(pack_out(p, "world" if world_packs else "builtin") for p in others)
    preset_pack = packs[0] if packs and packs[0]["id"] == preset else None
    default_ids = list(preset_pack["requested"]) if preset_pack else []
    for plugin_id in plus:
        if plugin_id in installed and plugin_id not in default_ids:
            default_ids.append(plugin_id)
    missing.extend({"pluginId": p} for p in plus if p not in installed)
    seen = set()
    unique_missing = []
    for item in missing:
        key = (item["pluginId"], item.get("packId"))
        if key not in seen:
            seen.add(key)
            unique_missing.append(item)
    from sessions.world_data_import import contract_sources_unreceived

    unreceived = contract_sources_unreceived(view.record["metadata"], registry, None)
    unreceived_ids = {u["sourceId"] for u in unreceived}
    by_default = [{**u, "code": "receiver-not-selected", "message": f"no default plugin receives {u['contract']}; "
                   f"source {u['sourceId']} is imported only when a receiving plugin is enabled"}
                  for u in contract_sources_unreceived(view.record["metadata"], registry, default_ids)
                  if u["sourceId"] not in unreceived_ids]
    return {
        "worldId": world_id,
        # World data no installed plugin accepts (issue 21: reported, not dropped quietly).
        "unmetRequirements": unreceived,
        "diagnostics": [{"level": "warning", **u} for u in unreceived + by_default],
        "policy": {**({"preset": preset} if preset else {}), "plus": [p for p in plus if p in installed],
                   "requires": list(policy.get("requires") or [])},
        "packs": packs,
        "selectedPackId": preset,
        "defaultPluginIds": default_ids,
        "missing": unique_missing,
    }


# ------------------------------------------------------------------------------- gallery


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) read from a PNG, JPEG or WebP header; None when unreadable."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64 * 1024)
    except OSError:
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        return struct.unpack(">II", head[16:24])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        chunk = head[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
        if chunk == b"VP8 " and len(head) >= 30:
            w, h = struct.unpack("<HH", head[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L" and len(head) >= 25:
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        return None
    if head[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(head):
            if head[i] != 0xFF:
                return None
            marker = head[i + 1]
            length = struct.unpack(">H", head[i + 2:i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                h, w = struct.unpack(">HH", head[i + 5:i + 9])
                return w, h
            i += 2 + length
    return None


def _version(path: Path) -> str:
    stat = path.stat()
    return f"{int(stat.st_mtime * 1000):x}-{stat.st_size:x}"


def _safe_child(directory: Path, name: str) -> Path | None:
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        return None
    path = directory / name
    if path.is_symlink() or not path.is_file():
        return None
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return None
    return path


def world_gallery(*, world_id: str) -> dict[str, Any]:
    """GET /api/worlds/:id/gallery → {items[], themeMusic?}; items carry an internal `_path`
    (stripped by the endpoint) so the file endpoint can serve exactly what is listed."""
    view = _require(world_id)
    package = view.package
    items: list[dict[str, Any]] = []
    if package is None:
        return {"items": []}
    media = package.root / "media"
    manifest = package.data_files.get("media/gallery.json")
    entries: list[tuple[str, str, dict[str, Any]]] = []  # (source, file, meta)
    if isinstance(manifest, dict) and isinstance(manifest.get("images"), list):
        localized = {loc: (c.media.get("gallery") or {}) for loc, c in package.locales.items()}
        for image in manifest["images"]:
            if not isinstance(image, dict) or image.get("spoilerLevel") not in (None, "opening"):
                continue
            rel = image.get("webFilename") or image.get("filename")
            parts = rel.split("/") if isinstance(rel, str) else []
            if len(parts) != 2:
                continue
            meta: dict[str, Any] = {"id": image.get("id"), "kind": image.get("kind")}
            for key in ("name", "description", "background", "location"):
                values = {}
                for loc, content in localized.items():
                    match = next((i for i in content.get("images") or [] if isinstance(i, dict) and i.get("id") == image.get("id")), None)
                    if match and isinstance(match.get(key), str):
                        values[loc] = match[key]
                if values:
                    meta[key] = values
            entries.append((parts[0], parts[1], meta))
    else:
        for source in package.data_sources:
            if source.kind != "media" or source.is_hidden or not source.is_enabled:
                continue
            directory = package.root / source.path
            if directory.is_dir():
                for child in sorted(directory.iterdir()):
                    entries.append((source.id, child.name, {"id": child.stem}))
    for source_name, file_name, meta in entries:
        if len(items) >= GALLERY_LIMIT:
            break
        directory = _gallery_dir(package, source_name)
        path = _safe_child(directory, file_name) if directory else None
        if path is None or path.suffix.lower() not in wp.IMAGE_SUFFIXES:
            continue
        size = image_size(path)
        if size is None:
            continue
        item = {k: v for k, v in meta.items() if v is not None}
        item.update({"source": source_name, "url": f"/api/worlds/{world_id}/gallery/{source_name}/{file_name}?v={_version(path)}",
                     "width": size[0], "height": size[1], "_path": path})
        items.append(item)
    out: dict[str, Any] = {"items": items}
    if package.theme_music:
        _, directory, name = package.theme_music.split("/")
        path = _safe_child(media / directory, name)
        if path is not None:
            mime = "audio/mpeg" if name.lower().endswith(".mp3") else "audio/wav"
            out["themeMusic"] = {"url": f"/api/worlds/{world_id}/gallery/{directory}/{name}?v={_version(path)}", "mime": mime, "_path": path}
    return out


def _gallery_dir(package: wp.WorldPackage, source_name: str) -> Path | None:
    manifest = package.data_files.get("media/gallery.json")
    if isinstance(manifest, dict) and isinstance(manifest.get("images"), list):
        return package.root / "media" / source_name
    source = next((s for s in package.data_sources if s.id == source_name and s.kind == "media"), None)
    return package.root / source.path if source else None


def world_gallery_file(*, world_id: str, source: str, file: str) -> tuple[Path, str]:
    """The file behind a gallery URL → (path, version). Only listed images, the cover and the
    theme music resolve; anything else (.., links, unlisted) raises 404 not_found."""
    gallery = world_gallery(world_id=world_id)
    candidates = [(i["source"], i["_path"]) for i in gallery["items"]]
    view = selectors.world_get(world_id)
    package = view.package if view else None
    if package is not None and package.cover:
        _, directory, name = package.cover.split("/")
        path = _safe_child(package.root / "media", directory) and _safe_child(package.root / "media" / directory, name)
        if path is not None:
            candidates.append((directory, path))
    if "themeMusic" in gallery:
        candidates.append((gallery["themeMusic"]["url"].split("/")[-2], gallery["themeMusic"]["_path"]))
    for source_name, path in candidates:
        if source_name == source and path.name == file:
            return path, _version(path)
    raise ApiError(404, "not_found", "File not found")
