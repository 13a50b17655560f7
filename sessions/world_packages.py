"""World packages: load a world folder into a `WorldPackage` (pure Python, no Django models).

Layout (spec 004 世界管理/世界目录; upstream docs/reference/world-data.md, schema/world-manifest.md):

    world.yaml, WORLD.md                         manifest + lore in `defaultLocale` (both required)
    world.<locale>.yaml, WORLD.<locale>.md       per-locale overlays (either one adds the locale)
    characters/*.json, data/**/*.yaml|json       content; `*.<locale>.<ext>` files are overlays
    dimensions/<id>.yaml                         split dimension files
    media/*.json                                 media manifests (gallery, portraits, presence)
    data/world.data.yaml                         optional world data descriptor (`worldData:`)

Overlays hold translated text only; structure and ids come from the base file. Merge rule:
objects merge key by key; lists of objects with `id` merge by id when the ids overlap (base
order, new ids appended), otherwise the overlay list is that locale's list; other values are
replaced. Overlay-only top-level keys of world.yaml and dimension files are ignored (warning).

The manifest format is the published JSON Schema plugins_app/schemas/world.json (world.yaml; its
`$defs/worldData` is the world data descriptor), served at GET /api/framework/schemas/world.json.
Schema violations become issues by one rule (plugins_app.validation.schema_issues): unknown
fields → warning `unknown-field`, missing required fields → error `missing-field`, other
violations → error `invalid-field`. What a schema cannot express is checked in Python beside it:
sessions.worldpkg.manifest (ids, locales, media paths, legacy conversions), .sources (descriptor
targets, paths, `after`), .content (files, overlays, dimensions), .dimensions (definitions).

Severity contract: every real upstream world loads with no `error` issue. Older upstream
formats (static dimension blocks, `requiredPlugins`, `characterAttributes`, pluginPolicy
`preset`/`preferTags`) are read through documented conversions with warnings.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import threading
import time
from pathlib import Path

from plugins_app.validation import (
    CODE_IDENTITY_INVALID,
    CODE_INVALID_FIELD,
    CODE_MANIFEST_INVALID,
    CODE_MANIFEST_MISSING,
    Issue,
    PackageValidationReport,
    error,
    report_build,
)
from sessions.worldpkg.content import package_files_scan, world_dimensions_assemble, world_locales_build
from sessions.worldpkg.files import locale_split, overlay_merge, parse_file, rel_path, str_list, text_for
from sessions.worldpkg.manifest import world_manifest_apply
from sessions.worldpkg.model import (
    ATTRIBUTE_TYPES,
    DESCRIPTOR_DEFAULT,
    DIMENSIONS_TARGET,
    IMAGE_SUFFIXES,
    INSTALL_MARKER,
    LEGACY_POLICY_FIELDS,
    LEGACY_WORLD_FIELDS,
    LOCALE_RE,
    LORE_FILE,
    MUSIC_SUFFIXES,
    PACK_FIELDS,
    POLICY_FIELDS,
    SCHEMA_URI_RE,
    SOURCE_FIELDS,
    SOURCE_FILE,
    SOURCE_GENERATED,
    SOURCE_KINDS,
    SOURCE_USER,
    SOURCE_VISIBILITIES,
    TARGET_RE,
    VIEW_MODES,
    WORLD_FIELDS,
    WORLD_FILE,
    WORLD_ID_RE,
    PackSpec,
    PluginPolicy,
    WorldDataSource,
    WorldLocaleContent,
    WorldPackage,
)
from sessions.worldpkg.sources import world_sources_load

__all__ = [
    "ATTRIBUTE_TYPES", "BUILTIN_WORLDS_DIR", "DESCRIPTOR_DEFAULT", "DIMENSIONS_TARGET", "IMAGE_SUFFIXES",
    "INSTALL_MARKER", "LEGACY_POLICY_FIELDS", "LEGACY_WORLD_FIELDS", "LOCALE_RE", "LORE_FILE",
    "MUSIC_SUFFIXES", "PACK_FIELDS", "POLICY_FIELDS", "SCHEMA_URI_RE", "SOURCE_FIELDS", "SOURCE_FILE",
    "SOURCE_GENERATED", "SOURCE_KINDS", "SOURCE_USER", "SOURCE_VISIBILITIES", "TARGET_RE", "VIEW_MODES",
    "WORLD_FIELDS", "WORLD_FILE", "WORLD_ID_RE", "PackSpec", "PluginPolicy", "WorldDataSource",
    "WorldLocaleContent", "WorldPackage", "locale_split", "overlay_merge", "packs_catalog_load",
    "text_for", "user_worlds_dir", "world_package_load", "world_packages_discover",
    "world_packages_forget", "world_validation_report",
]

# --------------------------------------------------------------------------------------------
# Per-process cache of loaded packages
# --------------------------------------------------------------------------------------------
# Loading a package parses every file and hashes the whole tree (50-200 ms for a builtin world),
# and GET /api/worlds, world reads and session creation load every package again. A loaded
# package is kept per process, keyed by (root, source, expected id), and reused while the tree's
# stamp is unchanged: every file and folder as (relative path, size, mtime, ctime, inode), one
# os.scandir walk (~0.1 ms per file). Any write, rename, new or removed file changes it, in this
# process or another one (hosted web processes and workers share the folder), so no restart or
# message is needed. A tree touched within RACY_SECONDS of the read is not cached: file
# timestamps are coarse (Linux stamps files from the kernel's tick clock, at most 10 ms behind),
# so an edit in the same tick as the read could keep its old stamp — the way git treats "racily
# clean" index entries; ctime cannot be set back by a writer. Installs, updates and deletes also
# drop the entry explicitly (world_packages_forget). Hand-rolled because it is 50 lines and keyed
# on file-system state that no caching library models.

#: A tree whose newest ctime/mtime is younger than this is loaded fresh on every read (25× the
#: coarsest Linux timestamp tick; a file system with coarser timestamps, FAT's 2 s, would need more).
RACY_SECONDS = 0.25
#: At most this many packages are kept (staging folders of installs come and go); the oldest go first.
CACHE_ENTRIES = 256
#: (root, source, expected id) → (tree stamp, the WorldPackage, the same pickled). A default read
#: gets its own copy (unpickling is 3–10× cheaper than copy.deepcopy); ``shared=True`` reads get the
#: cached object itself.
_cache: dict[tuple[str, str, str | None], tuple[tuple, WorldPackage, bytes]] = {}
_cache_lock = threading.Lock()


def _tree_stamp(root: Path) -> tuple[tuple, float] | None:
    """(stamp, newest ctime/mtime in seconds) of the tree at ``root``; None when it cannot be read."""
    entries: list[tuple] = []
    newest = 0.0
    pending = [(str(root), "")]
    try:
        while pending:
            folder, prefix = pending.pop()
            with os.scandir(folder) as scan:
                for entry in scan:
                    try:
                        info = entry.stat()  # a symlinked file: its target's stamp
                    except OSError:
                        info = entry.stat(follow_symlinks=False)  # a dangling link
                    rel = prefix + entry.name
                    entries.append((rel, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode))
                    newest = max(newest, info.st_mtime_ns, info.st_ctime_ns)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, rel + "/"))
            folder_info = os.stat(folder)
            entries.append((prefix, folder_info.st_mtime_ns, folder_info.st_ctime_ns, folder_info.st_ino))
            newest = max(newest, folder_info.st_mtime_ns, folder_info.st_ctime_ns)
    except OSError:
        return None
    entries.sort()
    return tuple(entries), newest / 1e9


def world_packages_forget(root: Path | str | None = None) -> None:
    """Drop cached packages: the one(s) at ``root`` (any source), or all when root is None. Called
    after a world is installed, updated, replaced or deleted; reads re-check the tree anyway."""
    with _cache_lock:
        if root is None:
            _cache.clear()
            return
        key_root = str(Path(root).resolve())
        for key in [k for k in _cache if k[0] == key_root]:
            del _cache[key]


def world_package_load(root: Path | str, *, source: str = SOURCE_FILE, expected_id: str | None = None,
                       shared: bool = False) -> WorldPackage:
    """Load and validate the world package at `root`. Never raises for bad content.

    Cached per process while the package's files are unchanged (see "Per-process cache" above).
    Every call returns its own copy, so callers may change it — except with ``shared=True``: then
    the cached object itself, which callers must treat as read-only (listings).

    source: metadata.source ("file" for builtin worlds, "user-file" for COVEL_HOME/worlds;
    a user world holding INSTALL_MARKER is reported as "generated-file").
    expected_id: when given (folder-based discovery), a different `id` in world.yaml is an
    `id-mismatch` error. Returns a WorldPackage; check `.ok` / `.issues` (package-relative files,
    dotted fields; codes in the modules named above) before using it.
    """
    root = Path(root).resolve()
    key = (str(root), source, expected_id)
    stamped = _tree_stamp(root)
    if stamped is not None:
        with _cache_lock:
            cached = _cache.get(key)
        if cached is not None and cached[0] == stamped[0]:
            return cached[1] if shared else pickle.loads(cached[2])
    world = _world_package_read(root, source=source, expected_id=expected_id)
    if stamped is not None and stamped[1] < time.time() - RACY_SECONDS:
        blob = pickle.dumps(world, protocol=pickle.HIGHEST_PROTOCOL)
        kept = pickle.loads(blob) if not shared else world  # the caller may change its own copy
        with _cache_lock:
            _cache.pop(key, None)
            _cache[key] = (stamped[0], kept, blob)
            while len(_cache) > CACHE_ENTRIES:
                del _cache[next(iter(_cache))]
    return world


def _world_package_read(root: Path, *, source: str, expected_id: str | None) -> WorldPackage:
    """world_package_load without the cache: parse, validate and hash the tree at ``root``."""
    if source == SOURCE_USER and (root / INSTALL_MARKER).is_file():
        source = SOURCE_GENERATED
    issues: list[Issue] = []
    world = WorldPackage(id=expected_id or root.name, root=root, source=source, issues=issues)
    manifest_path = root / WORLD_FILE
    if not manifest_path.is_file():
        issues.append(error(CODE_MANIFEST_MISSING, "world.yaml is missing", WORLD_FILE))
        return world
    parse_issues: list[Issue] = []
    manifest = parse_file(manifest_path, WORLD_FILE, parse_issues)
    # A broken manifest is `manifest-invalid` (spec 004 应用内校验), not a plain file-invalid.
    issues.extend(Issue(i.severity, CODE_MANIFEST_INVALID, i.message, i.file, i.field) for i in parse_issues)
    if manifest is None:
        if not parse_issues:
            issues.append(error(CODE_MANIFEST_INVALID, "world.yaml is empty", WORLD_FILE))
        return world
    if not isinstance(manifest, dict):
        issues.append(error(CODE_MANIFEST_INVALID, "world.yaml must be a mapping", WORLD_FILE))
        return world
    world.manifest = manifest

    manifest = world_manifest_apply(world, manifest, expected_id=expected_id, issues=issues)
    world.data_sources = sources = world_sources_load(root, manifest, issues)[0]
    base_files, overlay_files = package_files_scan(root, world.supported_locales, issues)
    world.data_files = base_files
    dims_by_locale = world_dimensions_assemble(root, manifest, sources, base_files, overlay_files,
                                               world.supported_locales, world.default_locale, issues)
    world.dimensions = dims_by_locale[world.default_locale]
    world_locales_build(world, manifest, sources, base_files, overlay_files, dims_by_locale, issues)

    default = world.locales[world.default_locale]
    world.name, world.summary, world.lore = default.name, default.summary, default.lore
    hasher = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        hasher.update(rel_path(root, path).encode())
        hasher.update(path.read_bytes())
    world.digest = "sha256:" + hasher.hexdigest()
    return world


# --------------------------------------------------------------------------------------------
# Discovery and reports
# --------------------------------------------------------------------------------------------

BUILTIN_WORLDS_DIR = Path(__file__).resolve().parent / "worlds"


def user_worlds_dir(covel_home: Path | str) -> Path:
    """`$COVEL_HOME/worlds` (user-installed and generated world packages)."""
    return Path(covel_home) / "worlds"


def world_packages_discover(*, builtin_dir: Path | None = None, user_dir: Path | None = None,
                            shared: bool = False) -> list[WorldPackage]:
    """Load every package folder (one holding world.yaml) in builtin_dir (source "file") and
    user_dir (source "user-file"). Folder name = world id. A user world reusing a builtin id gets
    an `id-conflict` error. Broken packages are returned too (check `.ok`). ``shared``: the cached
    read-only packages (see world_package_load)."""
    out: list[WorldPackage] = []
    seen: set[str] = set()
    for directory, source in ((builtin_dir if builtin_dir is not None else BUILTIN_WORLDS_DIR, SOURCE_FILE), (user_dir, SOURCE_USER)):
        if directory is None or not Path(directory).is_dir():
            continue
        for child in sorted(Path(directory).iterdir(), key=lambda p: p.name):
            if not child.is_dir() or child.name.startswith((".", "_")) or not (child / WORLD_FILE).is_file():
                continue
            world = world_package_load(child, source=source, expected_id=child.name, shared=shared)
            if world.id in seen:
                conflict = error("id-conflict", f"world id {world.id!r} is already provided by another package", WORLD_FILE, "id")
                if shared:  # never change the cached package: a shallow copy with its own issue list
                    world = copy.copy(world)
                    world.issues = [*world.issues, conflict]
                else:
                    world.issues.append(conflict)
            seen.add(world.id)
            out.append(world)
    return out


def world_validation_report(world: WorldPackage) -> PackageValidationReport:
    """PackageValidationReport for a loaded world (counts: characters, loreEntries, dimensions, locales)."""
    default = world.locales.get(world.default_locale)
    counts = {
        "characters": len(default.characters) if default else 0,
        "loreEntries": len(default.lorebook) if default else 0,
        "dimensions": len(world.dimensions),
        "locales": len(world.supported_locales),
    }
    identity_ok = not any(i.code == CODE_IDENTITY_INVALID for i in world.issues) and (world.root / WORLD_FILE).is_file()
    return report_build(kind="world", package_id=world.id if identity_ok else None, issues=world.issues, extra_counts=counts)


def packs_catalog_load(path: Path | str) -> tuple[list[PackSpec], list[Issue]]:
    """Read the builtin pack catalogue (`packs/builtin.yaml` format: a list of packs)."""
    issues: list[Issue] = []
    path = Path(path)
    raw = parse_file(path, path.name, issues) if path.is_file() else None
    packs: list[PackSpec] = []
    if not isinstance(raw, list):
        if path.is_file() and not issues:
            issues.append(error(CODE_INVALID_FIELD, "the pack catalogue is a list of packs", path.name))
        return packs, issues
    for index, pack in enumerate(raw):
        if not isinstance(pack, dict) or not isinstance(pack.get("id"), str):
            issues.append(error(CODE_INVALID_FIELD, "a pack needs a string id", path.name, str(index)))
            continue
        packs.append(PackSpec(id=pack["id"], label=pack.get("label"), description=pack.get("description"),
                              requested=str_list(pack.get("requested")), recommended=str_list(pack.get("recommended")),
                              tags=str_list(pack.get("tags")),
                              default_view_mode=pack.get("defaultViewMode") if isinstance(pack.get("defaultViewMode"), str) else None))
    return packs, issues
