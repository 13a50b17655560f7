"""Plugin UI declarations (spec 004 GET /api/ui-specs) and the published files of plugin views
(GET /plugin-assets/:pluginId/:digest/*).

Pure Python (no Django). The catalogue is built lazily from the registry snapshot, once per
registry (a rebuilt registry, e.g. after an install, rebuilds it): GET requests never rediscover
plugins or re-read PLUGIN.md; they read the declared ui/*.json files and view folders once.

Each declared file is checked with the published schema ui-spec.json plus the slot rules below; a
failing spec is left out of its slot and described in ``diagnostics`` (the rest of the response is
unaffected):

- ``specVersion`` may be omitted (1); above CURRENT_UI_SPEC_VERSION it is refused.
- right / message / left specs need ``view`` or ``webview``; ``webview.root`` is for views only.
- segment templates need ``match`` and may not carry panel fields (webview, dataSource, group,
  icon) or ``on`` / ``watch``.
- ``dataSource.pluginId``, when written, is the declaring plugin (a spec renders its own data).
- a view id repeated within one plugin keeps the first view.

Webviews. ``webview: {entry}`` is one HTML file, returned inline as ``webview: {html, height?}``.
``webview: {root, entry}`` publishes every file under ``root`` (hidden names, links and files past
the limits are not published) and returns ``webview: {url, height?}``, the URL naming the digest of
all published files: ``/plugin-assets/<pluginId>/<digest>/<entry>``. A new registry rebuilds the
index; a digest that no longer matches is a 404.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Sequence
from urllib.parse import quote

__all__ = ["CURRENT_UI_SPEC_VERSION", "DIGEST_RE", "PLUGIN_ID_RE", "UI_SLOTS", "AssetIndex", "PublishedFile",
           "UiCatalog", "asset_index_get", "published_file_read", "ui_catalog", "ui_catalog_build", "ui_specs"]

from plugins_app.manifest_files import package_path_resolve
from plugins_app.manifest_types import PLUGIN_ID_RE
from plugins_app.registry import HOST_ERROR
from plugins_app.validation import schema_issues

CURRENT_UI_SPEC_VERSION = 1
UI_SLOTS = ("right", "message", "view", "segment", "left")
SLOT_VIEW, SLOT_SEGMENT = "view", "segment"
SCHEMA_REF = "ui-spec.json"
ASSET_URL_PREFIX = "/plugin-assets/"

# Issue codes of diagnostics[].issues[] (a file that cannot be read is always "invalid").
CODE_INVALID = "invalid"
CODE_UNSUPPORTED_VERSION = "unsupported-spec-version"
CODE_NOT_ALLOWED = "field-not-allowed"
CODE_DUPLICATE_ID = "duplicate-id"
CODE_MISSING_FIELD = "missing-field"

MAX_SPEC_BYTES = 256 * 1024
MAX_INLINE_HTML_BYTES = 512 * 1024
MAX_ASSET_FILES = 2000
MAX_ASSET_FILE_BYTES = 20 * 1024 * 1024
MAX_ASSET_TOTAL_BYTES = 100 * 1024 * 1024
DIGEST_HEX_CHARS = 32
_SEGMENT_FORBIDDEN = ("webview", "dataSource", "group", "icon", "on", "watch")
_HTML_SUFFIXES = (".html", ".htm")
ASSET_MIME = {
    ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".json": "application/json", ".map": "application/json",
    ".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8",
    ".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
    ".gif": "image/gif", ".webp": "image/webp", ".avif": "image/avif", ".ico": "image/x-icon",
    ".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf",
    ".wasm": "application/wasm", ".mp3": "audio/mpeg", ".ogg": "audio/ogg", ".wav": "audio/wav",
    ".mp4": "video/mp4", ".webm": "video/webm",
}
DEFAULT_ASSET_MIME = "application/octet-stream"


@dataclass(frozen=True)
class PublishedFile:
    """One file of a view folder: path relative to the folder (POSIX), size, SHA-256 hex, MIME."""

    path: str
    size_bytes: int
    sha256: str
    mime: str


@dataclass(frozen=True)
class AssetIndex:
    """The published files of one plugin view folder, addressed by ``digest``.

    root: the folder (resolved, inside the plugin package); entries: the entry HTML paths the
    plugin's views name (served with the host bridge and no-cache).
    """

    plugin_id: str
    digest: str
    root: Path
    files: dict[str, PublishedFile]
    entries: frozenset[str]


@dataclass
class UiCatalog:
    """Every non-error plugin's checked UI specs by slot, the diagnostics and the asset indexes."""

    plugin_order: list[str] = field(default_factory=list)
    slots: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # plugin → slot → specs
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    assets: dict[tuple[str, str], AssetIndex] = field(default_factory=dict)

    def response(self, plugin_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """GET /api/ui-specs body: ``{right, message, view, segment, left, diagnostics}``; each slot
        a list of ``{pluginId, specs}`` in registry order, only plugins in ``plugin_ids`` when given."""
        wanted = None if plugin_ids is None else set(plugin_ids)
        out: dict[str, Any] = {slot: [] for slot in UI_SLOTS}
        for plugin_id in self.plugin_order:
            if wanted is not None and plugin_id not in wanted:
                continue
            for slot, specs in self.slots.get(plugin_id, {}).items():
                if specs:
                    out[slot].append({"pluginId": plugin_id, "specs": json.loads(json.dumps(specs))})
        out["diagnostics"] = [dict(d) for d in self.diagnostics if wanted is None or d["pluginId"] in wanted]
        return out


_cache: dict[str, Any] = {}
_cache_lock = threading.Lock()


def ui_catalog(registry: Any) -> UiCatalog:
    """The catalogue of ``registry`` (built on first use, then cached for that registry object)."""
    with _cache_lock:
        if _cache.get("registry") is registry and _cache.get("generation") == registry.generation:
            return _cache["catalog"]
    catalog = ui_catalog_build(registry)
    with _cache_lock:
        _cache.update(registry=registry, generation=registry.generation, catalog=catalog)
    return catalog


def ui_specs(registry: Any, plugin_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """GET /api/ui-specs: the catalogue's response, limited to ``plugin_ids`` when given."""
    return ui_catalog(registry).response(plugin_ids)


def asset_index_get(registry: Any, plugin_id: str, digest: str) -> AssetIndex | None:
    """The published folder ``digest`` of ``plugin_id`` in the current registry, or None (unknown
    plugin, an error plugin, a digest from an older registry)."""
    return ui_catalog(registry).assets.get((plugin_id, digest))


# ---------------------------------------------------------------------------------------------
# Building


def ui_catalog_build(registry: Any) -> UiCatalog:
    """Read and check every declared UI file of every non-error plugin (never raises for bad files)."""
    catalog = UiCatalog()
    for record in registry.all():
        if record.host_state == HOST_ERROR:
            continue
        catalog.plugin_order.append(record.id)
        _plugin_specs(catalog, record.id, record.manifest.root, record.manifest.contributes.ui)
    return catalog


def _issue(path: str, message: str, code: str) -> dict[str, str]:
    return {"path": path, "message": message, "code": code}


def _plugin_specs(catalog: UiCatalog, plugin_id: str, root: Path, declared: dict[str, list[str]]) -> None:
    by_slot: dict[str, list[dict[str, Any]]] = {}
    view_ids: set[str] = set()
    for slot in UI_SLOTS:
        for index, declared_path in enumerate(declared.get(slot) or []):
            spec, issues = _spec_load(root, declared_path)
            if spec is not None:
                issues = _spec_check(spec, slot=slot, plugin_id=plugin_id)
            if spec is not None and not issues:
                spec, issues = _webview_publish(catalog, spec, plugin_id=plugin_id, root=root)
            spec_id = spec.get("id") if isinstance(spec, dict) and isinstance(spec.get("id"), str) else None
            if not issues and slot == SLOT_VIEW and spec_id is not None:
                if spec_id in view_ids:
                    issues = [_issue("id", f"view id {spec_id!r} is declared twice; the first is kept", CODE_DUPLICATE_ID)]
                view_ids.add(spec_id)
            if issues:
                diagnostic: dict[str, Any] = {"pluginId": plugin_id, "runtimeId": None, "slot": slot, "specIndex": index,
                                              "declaredPath": declared_path}
                if spec_id is not None:
                    diagnostic["specId"] = spec_id
                diagnostic["issues"] = issues
                catalog.diagnostics.append(diagnostic)
                continue
            by_slot.setdefault(slot, []).append(spec)
    catalog.slots[plugin_id] = by_slot


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _spec_load(root: Path, declared_path: str) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    path = package_path_resolve(root, declared_path)
    if path is None:
        return None, [_issue("", "the path leaves the plugin package", CODE_INVALID)]
    if not path.is_file():
        return None, [_issue("", "file not found", CODE_INVALID)]
    if path.stat().st_size > MAX_SPEC_BYTES:
        return None, [_issue("", f"file exceeds {MAX_SPEC_BYTES} bytes", CODE_INVALID)]
    try:
        spec = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, [_issue("", f"not a JSON file: {exc.__class__.__name__}", CODE_INVALID)]
    if not isinstance(spec, dict):
        return None, [_issue("", "a UI spec is a JSON object", CODE_INVALID)]
    return spec, []


def _spec_check(spec: dict[str, Any], *, slot: str, plugin_id: str) -> list[dict[str, str]]:
    issues = [_issue(i.field or "", i.message, i.code) for i in schema_issues(spec, SCHEMA_REF, file=None) if i.is_error]
    version = spec.get("specVersion", 1)
    if isinstance(version, int) and not isinstance(version, bool) and version > CURRENT_UI_SPEC_VERSION:
        issues.append(_issue("specVersion", f"specVersion {version} is newer than this server supports "
                                            f"({CURRENT_UI_SPEC_VERSION})", CODE_UNSUPPORTED_VERSION))
    webview = spec.get("webview") if isinstance(spec.get("webview"), dict) else None
    if slot == SLOT_SEGMENT:
        if "match" not in spec:
            issues.append(_issue("match", "a segment template needs match", CODE_MISSING_FIELD))
        for name in _SEGMENT_FORBIDDEN:
            if name in spec:
                issues.append(_issue(name, f"{name} is not allowed in a segment template", CODE_NOT_ALLOWED))
    elif "view" not in spec and webview is None:
        issues.append(_issue("view", "a spec needs view or webview", CODE_MISSING_FIELD))
    if webview is not None and "root" in webview and slot != SLOT_VIEW:
        issues.append(_issue("webview.root", "only views publish a folder (webview.root)", CODE_NOT_ALLOWED))
    source = spec.get("dataSource")
    if isinstance(source, dict) and "pluginId" in source and source["pluginId"] != plugin_id:
        issues.append(_issue("dataSource.pluginId", f"a spec renders its own plugin's data ({plugin_id})", CODE_NOT_ALLOWED))
    return issues


def _webview_publish(catalog: UiCatalog, spec: dict[str, Any], *, plugin_id: str, root: Path
                     ) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The spec as served: specVersion filled in, a webview replaced by ``{html}`` or ``{url}``."""
    out = {**spec, "specVersion": spec.get("specVersion", 1)}
    webview = spec.get("webview")
    if not isinstance(webview, dict):
        return out, []
    served: dict[str, Any] = {}
    if "root" not in webview:
        path = package_path_resolve(root, webview["entry"])
        if path is None or not path.is_file() or not path.name.lower().endswith(_HTML_SUFFIXES):
            return out, [_issue("webview.entry", "the entry is not an HTML file of the package", CODE_INVALID)]
        if path.stat().st_size > MAX_INLINE_HTML_BYTES:
            return out, [_issue("webview.entry", f"a single-file webview is at most {MAX_INLINE_HTML_BYTES} bytes", CODE_INVALID)]
        try:
            served["html"] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return out, [_issue("webview.entry", "the entry is not UTF-8 text", CODE_INVALID)]
    else:
        folder = package_path_resolve(root, webview["root"])
        if folder is None or not folder.is_dir():
            return out, [_issue("webview.root", "the root is not a folder of the package", CODE_INVALID)]
        entry = PurePosixPath(webview["entry"].removeprefix("./")).as_posix()
        index = _folder_index(plugin_id, folder)
        if entry not in index.files or not entry.lower().endswith(_HTML_SUFFIXES):
            return out, [_issue("webview.entry", "the entry is not a published HTML file of the root", CODE_INVALID)]
        key = (plugin_id, index.digest)
        known = catalog.assets.get(key)
        entries = (known.entries if known else frozenset()) | {entry}
        catalog.assets[key] = AssetIndex(plugin_id, index.digest, index.root, index.files, entries)
        served["url"] = f"{ASSET_URL_PREFIX}{quote(plugin_id)}/{index.digest}/{quote(entry)}"
    if "height" in webview:
        served["height"] = webview["height"]
    out["webview"] = served
    return out, []


def asset_name_is_published(name: str) -> bool:
    """A folder member may be published: no hidden segment, no empty or dot segment, no backslash,
    NUL or control character."""
    if not name or "\\" in name or any(ord(ch) < 32 for ch in name):
        return False
    return all(part and part not in (".", "..") and not part.startswith(".") for part in name.split("/"))


def _folder_index(plugin_id: str, folder: Path) -> AssetIndex:
    files: dict[str, PublishedFile] = {}
    total = 0
    base = folder.resolve()
    for directory, subdirs, names in os.walk(base, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and not os.path.islink(os.path.join(directory, d)))
        for name in sorted(names):
            path = Path(directory) / name
            relative = path.relative_to(base).as_posix()
            if not asset_name_is_published(relative) or path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            if size > MAX_ASSET_FILE_BYTES or total + size > MAX_ASSET_TOTAL_BYTES or len(files) >= MAX_ASSET_FILES:
                continue
            total += size
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files[relative] = PublishedFile(relative, size, digest, ASSET_MIME.get(path.suffix.lower(), DEFAULT_ASSET_MIME))
    listing = "".join(f"{f.path}\0{f.size_bytes}\0{f.sha256}\n" for f in sorted(files.values(), key=lambda f: f.path))
    folder_digest = hashlib.sha256(listing.encode("utf-8")).hexdigest()[:DIGEST_HEX_CHARS]
    return AssetIndex(plugin_id, folder_digest, base, files, frozenset())


# ---------------------------------------------------------------------------------------------
# Serving (the checks at read time)

DIGEST_RE = re.compile(rf"^[0-9a-f]{{{DIGEST_HEX_CHARS}}}$")


def published_file_read(index: AssetIndex, name: str) -> tuple[PublishedFile, bytes] | None:
    """The bytes of published file ``name`` of ``index``, or None when anything does not match at
    read time: a name the index does not publish, a path whose real location leaves the folder (a
    link put there since), a file whose size or content changed since it was published."""
    published = index.files.get(name)
    if published is None or not asset_name_is_published(name):
        return None
    path = index.root / name
    try:
        if path.is_symlink() or any(parent.is_symlink() for parent in path.parents if index.root in parent.parents):
            return None
        real = path.resolve(strict=True)
        real.relative_to(index.root)
        if real.stat().st_size != published.size_bytes:
            return None
        data = real.read_bytes()
    except (OSError, ValueError):
        return None
    if len(data) != published.size_bytes or hashlib.sha256(data).hexdigest() != published.sha256:
        return None
    return published, data
