"""Where sessions find worlds and plugins: one seam over the world packages and the plugin registry.

``world_resolve(world_id)`` returns a ``ResolvedWorld`` — the world's record metadata (the shape of
WorldRecord.metadata: supportedLocales, defaultLocale, characterSchema, dimensions, pluginPolicy,
embeddedCharacters, embeddedLorebook ...) plus per-locale content — from, in order:
a store ``World`` row (``metadata.source == "store"``), then the world packages (builtin
``sessions/worlds`` or ``COVEL_BUILTIN_WORLDS_DIR``, and ``COVEL_HOME/worlds``).

The plugin registry is ``plugins_app.registry.plugin_registry()``.
"""
from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings


@dataclass
class ResolvedWorld:
    """A world as session creation needs it.

    metadata: WorldRecord.metadata shape. is_deleting: a delete is in progress (409 world_deleting).
    contents: locale → {"characters", "lorebook", "lore", "name", "summary"?, "data"?: {sourceId: content},
    "dimensions"?: {dimId: definition in that locale}}
    (the default locale always present).
    """

    id: str
    name: str
    metadata: dict[str, Any]
    default_locale: str
    supported_locales: list[str]
    is_deleting: bool = False
    contents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def content(self, locale: str) -> dict[str, Any]:
        """Content for ``locale`` (exact, then same language, then the default locale)."""
        if locale in self.contents:
            return self.contents[locale]
        language = locale.split("-", 1)[0]
        for tag, content in self.contents.items():
            if tag.split("-", 1)[0] == language:
                return content
        return self.contents[self.default_locale]

    @property
    def dimensions(self) -> dict[str, Any]:
        dims = self.metadata.get("dimensions")
        return dims if isinstance(dims, dict) else {}

    @property
    def character_schema(self) -> dict[str, Any] | None:
        schema = self.metadata.get("characterSchema")
        return schema if isinstance(schema, dict) else None

    @property
    def plugin_policy(self) -> dict[str, Any]:
        policy = self.metadata.get("pluginPolicy")
        return policy if isinstance(policy, dict) else {}


_package_cache: dict[str, tuple[float, Any]] = {}
#: id(WorldPackage) → (package, its ResolvedWorld); see _package_resolved.
_resolved_cache: dict[int, tuple[Any, ResolvedWorld]] = {}
_package_lock = threading.Lock()


def _builtin_worlds_dir() -> Path | None:
    configured = settings.COVEL_BUILTIN_WORLDS_DIR
    return Path(configured) if configured else None


def _package_find(world_id: str):
    """The loaded WorldPackage for ``world_id`` (builtin first, then user worlds), or None."""
    from sessions import world_packages as wp

    builtin = _builtin_worlds_dir() or wp.BUILTIN_WORLDS_DIR
    for directory, source in ((builtin, wp.SOURCE_FILE), (wp.user_worlds_dir(settings.COVEL_HOME), wp.SOURCE_USER)):
        root = Path(directory) / world_id
        if not (root / wp.WORLD_FILE).is_file():
            continue
        stamp = max((p.stat().st_mtime for p in root.rglob("*") if p.is_file()), default=0.0)
        key = str(root)
        with _package_lock:
            cached = _package_cache.get(key)
            if cached and cached[0] == stamp:
                return cached[1]
        package = wp.world_package_load(root, source=source, expected_id=world_id)
        if not package.ok:
            return None
        with _package_lock:
            _package_cache[key] = (stamp, package)
        return package
    return None


def _package_resolved(package) -> ResolvedWorld:
    """The ResolvedWorld of a loaded package, built once per loaded package (the package cache
    already reloads a package whose files changed) and shared: callers copy or treat it read-only."""
    with _package_lock:
        cached = _resolved_cache.get(id(package))
        if cached is not None and cached[0] is package:
            return cached[1]
    content = {}
    for tag, loc in package.locales.items():
        content[tag] = {"characters": loc.characters, "lorebook": loc.lorebook, "lore": loc.lore, "name": loc.name,
                        "summary": loc.summary, "data": loc.data, "dimensions": loc.dimensions}
    resolved = ResolvedWorld(
        id=package.id, name=package.name, metadata=package.record_metadata(),
        default_locale=package.default_locale, supported_locales=list(package.supported_locales), contents=content,
    )
    with _package_lock:
        # Keep only live packages: an entry whose package was replaced in _package_cache is dropped.
        live = {id(p) for _stamp, p in _package_cache.values()}
        for stale in [k for k in _resolved_cache if k not in live]:
            del _resolved_cache[stale]
        _resolved_cache[id(package)] = (package, resolved)
    return resolved


_ROW_UNREAD = object()


def world_resolve(world_id: str, *, shared: bool = False, row: Any = _ROW_UNREAD) -> ResolvedWorld | None:
    """The world ``world_id`` or None when no source has it (spec 004 §会话管理: 404 world_not_found).

    A ``World`` row in state "deleting" marks any world (store or file) as being deleted.
    ``shared=True`` (read-only callers such as the turn engine's per-turn world context): a file
    world's metadata and contents are the cached objects themselves, not deep copies — do not
    mutate them. By default every call returns private copies. ``row``: the World row (or None
    when there is none) when the caller read it already (the turn's session snapshot does, with
    its other reads); default: read here.
    """
    from sessions.models import World

    if row is _ROW_UNREAD:
        row = World.objects.filter(pk=world_id).first()
    is_deleting = bool(row and row.state == World.STATE_DELETING)
    package = _package_find(world_id)
    if package is not None:
        template = _package_resolved(package)
        if row is not None and (row.metadata or {}).get("packageModified"):
            return _edited_package_world(template, row, is_deleting)
        if shared:
            return replace(template, is_deleting=is_deleting)
        return replace(template, metadata=copy.deepcopy(template.metadata),
                       supported_locales=list(template.supported_locales), is_deleting=is_deleting,
                       contents=copy.deepcopy(template.contents))
    if row is None:
        return None
    meta = copy.deepcopy(row.metadata or {})
    default_locale = meta.get("defaultLocale") or meta.get("locale") or "zh-CN"
    supported = [loc for loc in meta.get("supportedLocales") or [] if isinstance(loc, str)] or [default_locale]
    if default_locale not in supported:
        supported.insert(0, default_locale)
    contents = {default_locale: {
        "characters": [c for c in meta.get("embeddedCharacters") or [] if isinstance(c, dict)],
        "lorebook": [e for e in meta.get("embeddedLorebook") or [] if isinstance(e, dict)],
        "lore": (row.package or {}).get("lore", ""), "name": row.name,
    }}
    return ResolvedWorld(id=row.id, name=row.name, metadata=meta, default_locale=default_locale,
                         supported_locales=supported, is_deleting=is_deleting, contents=contents)


def _edited_package_world(template: ResolvedWorld, row, is_deleting: bool) -> ResolvedWorld:
    """A package world edited in the app (PATCH, dimension import: metadata.packageModified): new
    sessions, preflight and sync read the record's metadata (dimensions, characterSchema,
    pluginPolicy ...), name and default-locale lore; other world data still comes from the
    package's data/ files (spec 004 PATCH /api/worlds/:id)."""
    meta = copy.deepcopy(template.metadata)
    meta.update(copy.deepcopy(row.metadata or {}))
    contents = copy.deepcopy(template.contents)
    default = contents.get(template.default_locale)
    package = row.package or {}
    if default is not None:
        default["name"] = row.name or default.get("name")
        if package.get("lore"):
            default["lore"] = package["lore"]
        if package.get("description") is not None:
            default["summary"] = package["description"]
    return replace(template, name=row.name or template.name, metadata=meta, supported_locales=list(template.supported_locales),
                   is_deleting=is_deleting, contents=contents)
