"""World data sources: the descriptor (`worldData:`, data/world.data.yaml) or the convention files,
and the records of list-shaped sources (upstream docs/reference/world-data.md).

The descriptor's shape is `$defs/worldData` of plugins_app/schemas/world.json (types, kinds,
visibility, required kind/path/to, unknown fields). What stays here is what needs the package
or the other sources: target syntax (`source-target-invalid`), schema references, paths leaving
the package, missing files, `after` references and cycles.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from plugins_app.validation import (
    CODE_FILE_MISSING,
    CODE_INVALID_FIELD,
    CODE_PATH_OUTSIDE_PACKAGE,
    Issue,
    error,
    schema_issues,
    warning,
)
from sessions.worldpkg.files import parse_file, rel_path, safe_path, str_list
from sessions.worldpkg.model import (
    DIMENSIONS_TARGET,
    SCHEMA_URI_RE,
    SOURCE_KINDS,
    SOURCE_VISIBILITIES,
    TARGET_RE,
    WORLD_FILE,
    WorldDataSource,
)

DESCRIPTOR_SCHEMA_REF = "world.json#/$defs/worldData"
# Read when world.yaml names no descriptor: (source id, kind, path, target).
CONVENTION_SOURCES = (
    ("dimensions", "yaml", "data/dimensions.yaml", DIMENSIONS_TARGET),
    ("lore", "yaml", "data/lorebook.yaml", "lorebook"),
    ("characters", "json", "characters/characters.json", "characters"),
)


def world_sources_load(root: Path, manifest: dict[str, Any], issues: list[Issue]) -> tuple[list[WorldDataSource], str | None]:
    """The world's data sources: from the descriptor world.yaml's `worldData` names, else the
    convention files that exist. Returns (sources in load order, descriptor rel path or None).

    Issues: path-outside-package / file-missing for `worldData`; on the descriptor, invalid-field
    without a `sources` map, then its schema issues, source-target-invalid, invalid-field for an
    unknown schema reference, path-outside-package, source-missing (media-missing warning for a
    media directory), source-after-unknown, source-cycle. A source with an invalid kind, path or
    target is left out.
    """
    declared = manifest.get("worldData")
    sources: list[WorldDataSource] = []
    if declared is None:
        for sid, kind, path, target in CONVENTION_SOURCES:
            if (root / path).is_file():
                sources.append(WorldDataSource(id=sid, kind=kind, path=path, target=target, key="id", order=len(sources)))
        return sources, None
    if not isinstance(declared, str):
        return sources, None  # the schema reported the type
    path = safe_path(root, declared)
    if path is None:
        issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "worldData path leaves the package", WORLD_FILE, "worldData"))
        return sources, None
    rel = rel_path(root, path)
    if not path.is_file():
        issues.append(error(CODE_FILE_MISSING, f"world data descriptor {rel} not found", WORLD_FILE, "worldData"))
        return sources, rel
    raw = parse_file(path, rel, issues)
    if raw is None:
        return sources, rel
    if not isinstance(raw, dict) or not isinstance(raw.get("sources"), dict):
        # Nothing else of such a file can be read, so it is one issue rather than the schema's.
        issues.append(error(CODE_INVALID_FIELD, "descriptor needs a `sources` map", rel, "sources"))
        return sources, rel
    issues.extend(schema_issues(raw, DESCRIPTOR_SCHEMA_REF, file=rel))
    for order, (sid, entry) in enumerate(raw["sources"].items()):
        if not isinstance(entry, dict):
            continue
        source = _source_read(root, rel, str(sid), entry, order, issues)
        if source is not None:
            sources.append(source)
    _after_check(sources, raw["sources"], rel, issues)
    return sources, rel


def _source_read(root: Path, rel: str, sid: str, entry: dict[str, Any], order: int, issues: list[Issue]) -> WorldDataSource | None:
    fpath = f"sources.{sid}"
    kind, spath, target = entry.get("kind"), entry.get("path"), entry.get("to")
    usable = isinstance(kind, str) and kind in SOURCE_KINDS and isinstance(spath, str) and isinstance(target, str)
    if isinstance(target, str) and not TARGET_RE.match(target):
        issues.append(error("source-target-invalid", f"unknown target {target!r}", rel, f"{fpath}.to"))
        usable = False
    schema = entry.get("schema")
    if isinstance(schema, str) and not (SCHEMA_URI_RE.match(schema) or safe_path(root, schema)):
        issues.append(error(CODE_INVALID_FIELD, f"unknown schema {schema!r}", rel, f"{fpath}.schema"))
    if not usable:
        return None
    resolved = safe_path(root, spath)
    if resolved is None:
        issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "source path leaves the package", rel, f"{fpath}.path"))
        return None
    if kind == "media":
        if not resolved.is_dir():
            issues.append(warning("media-missing", f"media directory {spath} not found", rel, f"{fpath}.path"))
    elif not resolved.is_file():
        issues.append(error("source-missing", f"source file {spath} not found", rel, f"{fpath}.path"))
        return None
    after = entry.get("after")
    visibility = entry.get("visibility", "public")
    digest = "sha256:" + hashlib.sha256(resolved.read_bytes()).hexdigest() if resolved.is_file() else None
    return WorldDataSource(
        id=sid, kind=kind, path=rel_path(root, resolved), target=target,
        schema=schema if isinstance(schema, str) else None,
        key=entry.get("key") if isinstance(entry.get("key"), str) else None,
        after=[after] if isinstance(after, str) else str_list(after),
        visibility=visibility if visibility in SOURCE_VISIBILITIES else "public",
        index_to=entry.get("indexTo") if isinstance(entry.get("indexTo"), str) else None,
        is_enabled=entry.get("enabled", True) is not False, order=order, digest=digest,
        locale_array_keys=str_list(entry.get("localeArrayKeys")),
    )


def _after_check(sources: list[WorldDataSource], declared: dict[Any, Any], rel: str, issues: list[Issue]) -> None:
    """`after` must name a declared source, and the loaded ones must not form a cycle."""
    ids = {s.id for s in sources}
    for source in sources:
        for dep in source.after:
            if dep not in ids and dep not in declared:
                issues.append(error("source-after-unknown", f"after refers to unknown source {dep!r}", rel, f"sources.{source.id}.after"))
    graph = {s.id: [d for d in s.after if d in ids] for s in sources}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str) -> bool:
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1 or (state.get(nxt) is None and visit(nxt)):
                return True
        state[node] = 2
        return False

    for node in graph:
        if state.get(node) is None and visit(node):
            issues.append(error("source-cycle", f"sources form an `after` cycle through {node!r}", rel, "sources"))
            break


def source_records(value: Any, src: WorldDataSource, issues: list[Issue], *, require: tuple[str, ...], report: bool) -> list[dict[str, Any]]:
    """Records of a list-shaped source; invalid items are reported (when `report`: the default
    locale) as record-invalid / record-duplicate and skipped."""
    if not isinstance(value, list):
        if report:
            issues.append(error(CODE_INVALID_FIELD, f"source {src.id!r} must be a list of records", src.path))
        return []
    out = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        missing = [k for k in require if not (isinstance(item, dict) and isinstance(item.get(k), str) and item.get(k))]
        if missing:
            if report:
                issues.append(error("record-invalid", f"record needs {', '.join(missing)}", src.path, str(index)))
            continue
        if item["id"] in seen:
            if report:
                issues.append(error("record-duplicate", f"duplicate id {item['id']!r}", src.path, f"{index}.id"))
            continue
        seen.add(item["id"])
        out.append(item)
    return out
