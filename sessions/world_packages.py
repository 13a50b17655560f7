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

Severity contract: every real upstream world loads with no `error` issue. Older upstream
formats (static dimension blocks, `requiredPlugins`, `characterAttributes`, pluginPolicy
`preset`/`preferTags`) are read through documented conversions with warnings.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from covel.jsonbody import unstorable_json_problem
from plugins_app.validation import (
    CODE_FILE_INVALID,
    CODE_FILE_MISSING,
    CODE_ID_MISMATCH,
    CODE_IDENTITY_INVALID,
    CODE_INVALID_FIELD,
    CODE_LEGACY_LAYOUT,
    CODE_MANIFEST_INVALID,
    CODE_MANIFEST_MISSING,
    CODE_MISSING_FIELD,
    CODE_PATH_OUTSIDE_PACKAGE,
    CODE_UNKNOWN_FIELD,
    Issue,
    error,
    has_errors,
    info,
    report_build,
    PackageValidationReport,
    warning,
)
from covel.yamlio import yaml_load
from sessions.worldpkg.dimensions import (
    dimensions_validate,
    is_definition,
    legacy_dimension_convert,
)

WORLD_FILE = "world.yaml"
LORE_FILE = "WORLD.md"
DESCRIPTOR_DEFAULT = "data/world.data.yaml"
WORLD_ID_RE = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
LOCALE_RE = re.compile(r"^[a-z]{2,3}(-[A-Z][a-z]{3})?(-[A-Z]{2}|-[0-9]{3})?$")
SOURCE_FILE = "file"  # metadata.source of builtin (read-only) worlds
SOURCE_USER = "user-file"  # worlds under COVEL_HOME/worlds
SOURCE_GENERATED = "generated-file"  # user worlds installed through /api/install/* (spec 004 安装世界)
INSTALL_MARKER = ".covel-install.json"  # written by plugins_app/install.py into installed packages

WORLD_FIELDS = {
    "schemaVersion", "id", "name", "version", "summary", "defaultLocale", "supportedLocales", "tags",
    "author", "license", "homepage", "pluginPolicy", "worldData", "characterSchema", "dimensions",
    "dimensionSources", "pluginSettings", "defaultViewMode", "cover", "accentColor", "themeMusic",
}
LEGACY_WORLD_FIELDS = {"requiredPlugins", "recommendedPlugins", "excludedPlugins", "characterAttributes", "memoryBlocks"}
POLICY_FIELDS = {"presetId", "packs", "preferredTags", "avoidedTags", "requested", "recommended", "requires"}
LEGACY_POLICY_FIELDS = {"preset": "presetId", "preferTags": "preferredTags", "avoidTags": "avoidedTags", "plus": "requested"}
PACK_FIELDS = {"id", "label", "description", "requested", "recommended", "tags", "reason", "defaultViewMode"}
ATTRIBUTE_TYPES = {"string", "number", "boolean", "enum", "array", "object", "map"}
SOURCE_KINDS = {"yaml", "json", "media", "markdown"}
SOURCE_FIELDS = {"kind", "path", "schema", "to", "key", "after", "visibility", "indexTo", "enabled", "lorebook", "description"}
TARGET_RE = re.compile(r"^(lorebook|characters|media|world:metadata\.[A-Za-z0-9_.]+|contract:[a-z0-9][a-z0-9._-]*@[0-9]+(\+lorebook)?)$")
SCHEMA_URI_RE = re.compile(r"^(covel://world/dimensions|contract:[a-z0-9][a-z0-9._-]*@[0-9]+)$")
DIMENSIONS_TARGET = "world:metadata.dimensions"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
MUSIC_SUFFIXES = (".mp3", ".wav")


# --------------------------------------------------------------------------------------------
# Dataclasses
# --------------------------------------------------------------------------------------------


@dataclass
class PackSpec:
    """A play pack (world pluginPolicy.packs[] or packs/builtin.yaml)."""

    id: str
    label: Any = None
    description: Any = None
    requested: list[str] = field(default_factory=list)
    recommended: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    reason: Any = None
    default_view_mode: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "label": self.label, "description": self.description, "tags": self.tags,
               "requested": self.requested, "recommended": self.recommended}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.default_view_mode:
            out["defaultViewMode"] = self.default_view_mode
        return out


@dataclass
class PluginPolicy:
    """pluginPolicy normalized from every fixture format.

    preset: pack id seeding the selection (`presetId`, legacy `preset`); requested: plugin ids to
    enable by default (also legacy top-level `requiredPlugins`); excluded: legacy
    `excludedPlugins`; requires: contract ids the world needs.
    """

    preset: str | None = None
    packs: list[PackSpec] = field(default_factory=list)
    preferred_tags: list[str] = field(default_factory=list)
    avoided_tags: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    recommended: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "packs": [p.as_dict() for p in self.packs], "preferredTags": self.preferred_tags,
            "avoidedTags": self.avoided_tags, "requested": self.requested, "recommended": self.recommended,
            "excluded": self.excluded, "requires": self.requires, "plus": self.requested,
        }
        if self.preset:
            out["preset"] = self.preset
        return out


@dataclass
class WorldDataSource:
    """One world data source (descriptor entry or convention file). target = the descriptor's `to`."""

    id: str
    kind: str
    path: str
    target: str
    schema: str | None = None
    key: str | None = None
    after: list[str] = field(default_factory=list)
    visibility: str = "public"
    index_to: str | None = None
    is_enabled: bool = True
    order: int = 0
    digest: str | None = None

    @property
    def is_hidden(self) -> bool:
        return self.visibility == "hidden"

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "path": self.path, "target": self.target, "schema": self.schema,
                "key": self.key, "after": self.after, "visibility": self.visibility, "order": self.order,
                "digest": self.digest, "origin": "world", "enabled": self.is_enabled}


@dataclass
class WorldLocaleContent:
    """Everything text-bearing, resolved for one locale (base merged with that locale's overlays).

    characters: records of the `characters` source; lorebook: `{id, content, title?, sourceId, ...}`
    entries from `lorebook` and `…+lorebook` sources; data: source id → merged content (hidden
    sources included; check WorldDataSource.is_hidden); media: media manifest stem → content.
    """

    locale: str
    name: str
    summary: str
    lore: str
    characters: list[dict[str, Any]] = field(default_factory=list)
    character_schema: dict[str, Any] | None = None
    lorebook: list[dict[str, Any]] = field(default_factory=list)
    dimensions: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    media: dict[str, Any] = field(default_factory=dict)
    plugin_policy_packs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class WorldPackage:
    """A loaded world package. `issues` lists every diagnostic; `ok` is False with any error.

    id, name/summary/lore in default_locale; supported_locales always includes default_locale and
    every locale that has world.<loc>.yaml or WORLD.<loc>.md. dimensions: default-locale
    definitions (validated). locales: locale → WorldLocaleContent. data_files: package-relative
    path → parsed base content of every data/characters/media file (overlays excluded).
    """

    id: str
    root: Path
    source: str = SOURCE_FILE
    manifest: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    summary: str = ""
    lore: str = ""
    default_locale: str = "en-US"
    supported_locales: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    version: str | None = None
    author: dict[str, Any] | None = None
    license: str | None = None
    homepage: str | None = None
    plugin_policy: PluginPolicy = field(default_factory=PluginPolicy)
    plugin_settings: dict[str, Any] = field(default_factory=dict)
    character_schema: dict[str, Any] | None = None
    dimensions: dict[str, Any] = field(default_factory=dict)
    data_sources: list[WorldDataSource] = field(default_factory=list)
    locales: dict[str, WorldLocaleContent] = field(default_factory=dict)
    data_files: dict[str, Any] = field(default_factory=dict)
    cover: str | None = None
    accent_color: str | None = None
    theme_music: str | None = None
    default_view_mode: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # legacy fields kept verbatim (e.g. memoryBlocks)
    digest: str = ""
    issues: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not has_errors(self.issues)

    def content(self, locale: str | None = None) -> WorldLocaleContent:
        """Content for `locale` (exact, then same language, then the default locale)."""
        if locale and locale in self.locales:
            return self.locales[locale]
        if locale:
            language = locale.split("-", 1)[0]
            for tag, content in self.locales.items():
                if tag.split("-", 1)[0] == language:
                    return content
        return self.locales[self.default_locale]

    @property
    def characters(self) -> list[dict[str, Any]]:
        return self.content().characters

    @property
    def lorebook(self) -> list[dict[str, Any]]:
        return self.content().lorebook

    def localized_text(self) -> dict[str, dict[str, str]]:
        others = [loc for loc in self.supported_locales if loc != self.default_locale]
        return {
            "name": {loc: self.locales[loc].name for loc in others},
            "description": {loc: self.locales[loc].summary for loc in others},
            "lore": {loc: self.locales[loc].lore for loc in others},
        }

    def record_metadata(self) -> dict[str, Any]:
        """WorldRecord.metadata for GET /api/worlds/:id (spec 004 世界管理)."""
        default = self.content()
        meta: dict[str, Any] = {
            "source": self.source,
            "storage": "package",
            "packageManaged": True,
            "supportedLocales": list(self.supported_locales),
            "defaultLocale": self.default_locale,
            "tags": list(self.tags),
            "packageInfo": {k: v for k, v in (("version", self.version), ("author", self.author),
                                               ("license", self.license), ("homepage", self.homepage)) if v is not None},
            "localizedText": self.localized_text(),
            "dimensions": copy.deepcopy(self.dimensions),
            "characterSchema": copy.deepcopy(self.character_schema),
            "pluginPolicy": self.plugin_policy.as_dict(),
            "pluginSettings": copy.deepcopy(self.plugin_settings),
            "embeddedCharacters": copy.deepcopy(default.characters),
            "embeddedLorebook": copy.deepcopy(default.lorebook),
            "worldData": {"schemaVersion": 1, "sources": [s.as_dict() for s in self.data_sources]},
            "packageDigest": self.digest,
        }
        for key, value in (("cover", self.cover), ("accentColor", self.accent_color),
                           ("themeMusic", self.theme_music), ("defaultViewMode", self.default_view_mode)):
            if value is not None:
                meta[key] = value
        meta.update({k: copy.deepcopy(v) for k, v in self.extra.items() if k not in meta})
        return meta

    def record(self) -> dict[str, Any]:
        """`{id, name, description, locale, lore, metadata}`: the fields a World row stores."""
        return {"id": self.id, "name": self.name, "description": self.summary, "locale": self.default_locale,
                "lore": self.lore, "metadata": self.record_metadata()}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def text_for(value: Any, locale: str, default_locale: str) -> str:
    """A display string from a string or locale map: locale, its language, default, first."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        for key in (locale, default_locale):
            if isinstance(value.get(key), str):
                return value[key]
        language = locale.split("-", 1)[0]
        for key, text in value.items():
            if isinstance(text, str) and str(key).split("-", 1)[0] == language:
                return text
        first = next(iter(value.values()))
        return first if isinstance(first, str) else ""
    return ""


def overlay_merge(base: Any, overlay: Any, *, top_level_known_only: bool = False, unknown: list[str] | None = None) -> Any:
    """Merge a locale overlay onto base content (rules in the module docstring)."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            if key in base:
                out[key] = overlay_merge(base[key], value)
            elif top_level_known_only:
                if unknown is not None:
                    unknown.append(str(key))
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(overlay, list):
        if all(isinstance(i, dict) and "id" in i for i in base + overlay) and base and overlay:
            base_ids = [i["id"] for i in base]
            over = {i["id"]: i for i in overlay}
            if set(base_ids) & set(over):
                merged = [overlay_merge(i, over[i["id"]]) if i["id"] in over else copy.deepcopy(i) for i in base]
                merged += [copy.deepcopy(i) for i in overlay if i["id"] not in set(base_ids)]
                return merged
        return copy.deepcopy(overlay)
    return copy.deepcopy(overlay)


def _rel(root: Path, path: Path) -> str:
    return PurePosixPath(path.relative_to(root)).as_posix()


_UNSTORABLE_MESSAGES = {
    "text": "holds a NUL character or an unpaired UTF-16 surrogate",
    "number": "holds a non-finite number (NaN or infinity)",
    "depth": "is nested too deeply",
}


def _non_json_value_path(data: Any) -> list[str] | None:
    """Path to the first value JSON cannot hold that YAML can produce (!!set, !!binary), or None."""
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, (set, frozenset, bytes, bytearray)):
            return path
        if isinstance(value, dict):
            stack.extend((item, [*path, str(key)]) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, [*path, str(index)]) for index, item in enumerate(value))
    return None


def _parse_file(path: Path, rel: str, issues: list[Issue]) -> Any:
    """Parse YAML/JSON; on failure record `file-invalid` (with line) and return None.

    Content a session could not store is `file-invalid` too (spec 004 §响应格式约定: bad input is
    a 4xx at install, not a 500 at session creation): text with NUL or unpaired surrogates,
    non-finite numbers, nesting past covel.jsonbody.JSON_MAX_DEPTH, YAML sets and binary values.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        issues.append(error(CODE_FILE_INVALID, "file is not readable UTF-8 text", rel))
        return None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml_load(text)
    except RecursionError:
        issues.append(error(CODE_FILE_INVALID, "file is nested too deeply", rel))
        return None
    except json.JSONDecodeError as exc:
        issues.append(error(CODE_FILE_INVALID, f"invalid JSON at line {exc.lineno}: {exc.msg}", rel))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        issues.append(error(CODE_FILE_INVALID, f"invalid YAML{where}", rel))
        return None
    problem = unstorable_json_problem(data)
    if problem is not None:
        reason, at = problem
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(at) or '(root)'} {_UNSTORABLE_MESSAGES[reason]}", rel))
        return None
    non_json = _non_json_value_path(data)
    if non_json is not None:
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(non_json) or '(root)'} is not JSON data (YAML set or binary)", rel))
        return None
    return data


def locale_split(filename: str, languages: set[str]) -> tuple[str, str | None]:
    """("world.en-US.yaml") → ("world.yaml", "en-US"). A bare 2-3 letter tag counts as a locale only
    for a language the world supports (so `x.ui.json` is not mistaken for a locale file)."""
    parts = filename.split(".")
    if len(parts) >= 3 and LOCALE_RE.match(parts[-2]):
        tag = parts[-2]
        if "-" in tag or tag in languages:
            return ".".join(parts[:-2] + parts[-1:]), tag
    return filename, None


def _locale_normalize(tag: str, supported: list[str]) -> str:
    if tag in supported:
        return tag
    language = tag.split("-", 1)[0]
    return next((s for s in supported if s.split("-", 1)[0] == language), tag)


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


# --------------------------------------------------------------------------------------------
# Manifest parts
# --------------------------------------------------------------------------------------------


def _policy_normalize(manifest: dict[str, Any], issues: list[Issue]) -> PluginPolicy:
    raw = manifest.get("pluginPolicy") if isinstance(manifest.get("pluginPolicy"), dict) else {}
    if "pluginPolicy" in manifest and not isinstance(manifest["pluginPolicy"], dict):
        issues.append(error(CODE_INVALID_FIELD, "pluginPolicy must be an object", WORLD_FILE, "pluginPolicy"))
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if key in LEGACY_POLICY_FIELDS:
            issues.append(warning(CODE_LEGACY_LAYOUT, f"pluginPolicy.{key} is legacy; use {LEGACY_POLICY_FIELDS[key]}", WORLD_FILE, f"pluginPolicy.{key}"))
            data.setdefault(LEGACY_POLICY_FIELDS[key], value)
        elif key in POLICY_FIELDS:
            data[key] = value
        else:
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", WORLD_FILE, f"pluginPolicy.{key}"))
    for key in ("preferredTags", "avoidedTags", "requested", "recommended", "requires"):
        if key in data and not (isinstance(data[key], list) and all(isinstance(v, str) for v in data[key])):
            issues.append(error(CODE_INVALID_FIELD, "must be a list of strings", WORLD_FILE, f"pluginPolicy.{key}"))
    packs: list[PackSpec] = []
    raw_packs = data.get("packs") if isinstance(data.get("packs"), list) else []
    seen: set[str] = set()
    for index, pack in enumerate(raw_packs):
        path = f"pluginPolicy.packs.{index}"
        if not isinstance(pack, dict) or not isinstance(pack.get("id"), str):
            issues.append(error(CODE_INVALID_FIELD, "a pack needs a string id", WORLD_FILE, path))
            continue
        if pack["id"] in seen:
            issues.append(error(CODE_INVALID_FIELD, f"pack {pack['id']!r} is declared twice", WORLD_FILE, f"{path}.id"))
        seen.add(pack["id"])
        for key in pack:
            if key not in PACK_FIELDS:
                issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", WORLD_FILE, f"{path}.{key}"))
        packs.append(PackSpec(id=pack["id"], label=pack.get("label"), description=pack.get("description"),
                              requested=_str_list(pack.get("requested")), recommended=_str_list(pack.get("recommended")),
                              tags=_str_list(pack.get("tags")), reason=pack.get("reason"),
                              default_view_mode=pack.get("defaultViewMode") if isinstance(pack.get("defaultViewMode"), str) else None))
    requested = _str_list(data.get("requested"))
    recommended = _str_list(data.get("recommended"))
    excluded: list[str] = []
    for legacy_key, target in (("requiredPlugins", requested), ("recommendedPlugins", recommended), ("excludedPlugins", excluded)):
        if legacy_key in manifest:
            issues.append(warning(CODE_LEGACY_LAYOUT, f"{legacy_key} is legacy; use pluginPolicy", WORLD_FILE, legacy_key))
            target.extend(p for p in _str_list(manifest[legacy_key]) if p not in target)
    return PluginPolicy(
        preset=data.get("presetId") if isinstance(data.get("presetId"), str) else None,
        packs=packs, preferred_tags=_str_list(data.get("preferredTags")), avoided_tags=_str_list(data.get("avoidedTags")),
        requested=requested, recommended=recommended, excluded=excluded, requires=_str_list(data.get("requires")),
    )


def _character_schema_check(schema: Any, file: str, issues: list[Issue]) -> None:
    if not isinstance(schema, dict):
        issues.append(error(CODE_INVALID_FIELD, "characterSchema must be an object", file, "characterSchema"))
        return
    for key in schema:
        if key not in ("types", "attributes"):
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", file, f"characterSchema.{key}"))
    if "types" in schema and (not isinstance(schema["types"], list) or "player" in schema["types"]):
        issues.append(error(CODE_INVALID_FIELD, "types is a list of strings and cannot contain the reserved 'player'", file, "characterSchema.types"))
    attributes = schema.get("attributes")
    if not isinstance(attributes, list):
        issues.append(error(CODE_MISSING_FIELD, "attributes must be a list", file, "characterSchema.attributes"))
        return
    seen: set[str] = set()
    for index, attr in enumerate(attributes):
        path = f"characterSchema.attributes.{index}"
        if not isinstance(attr, dict):
            issues.append(error(CODE_INVALID_FIELD, "an attribute must be an object", file, path))
            continue
        if not isinstance(attr.get("id"), str):
            issues.append(error(CODE_MISSING_FIELD, "attribute id is required", file, f"{path}.id"))
        elif attr["id"] in seen:
            issues.append(error(CODE_INVALID_FIELD, f"attribute {attr['id']!r} is declared twice", file, f"{path}.id"))
        else:
            seen.add(attr["id"])
        if "name" not in attr:
            issues.append(error(CODE_MISSING_FIELD, "attribute name is required", file, f"{path}.name"))
        if attr.get("type") not in ATTRIBUTE_TYPES:
            issues.append(error(CODE_INVALID_FIELD, f"attribute type must be one of {sorted(ATTRIBUTE_TYPES)}", file, f"{path}.type"))


def _descriptor_load(root: Path, manifest: dict[str, Any], issues: list[Issue]) -> tuple[list[WorldDataSource], str | None]:
    """Read the world data descriptor, or build the convention sources. Returns (sources, rel path)."""
    declared = manifest.get("worldData")
    sources: list[WorldDataSource] = []
    if declared is None:
        for sid, kind, path, target in (("dimensions", "yaml", "data/dimensions.yaml", DIMENSIONS_TARGET),
                                        ("lore", "yaml", "data/lorebook.yaml", "lorebook"),
                                        ("characters", "json", "characters/characters.json", "characters")):
            if (root / path).is_file():
                sources.append(WorldDataSource(id=sid, kind=kind, path=path, target=target, key="id", order=len(sources)))
        return sources, None
    if not isinstance(declared, str):
        issues.append(error(CODE_INVALID_FIELD, "worldData must be a package-relative path", WORLD_FILE, "worldData"))
        return sources, None
    path = _safe_path(root, declared)
    if path is None:
        issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "worldData path leaves the package", WORLD_FILE, "worldData"))
        return sources, None
    rel = _rel(root, path)
    if not path.is_file():
        issues.append(error(CODE_FILE_MISSING, f"world data descriptor {rel} not found", WORLD_FILE, "worldData"))
        return sources, rel
    raw = _parse_file(path, rel, issues)
    if raw is None:
        return sources, rel
    if not isinstance(raw, dict) or not isinstance(raw.get("sources"), dict):
        issues.append(error(CODE_INVALID_FIELD, "descriptor needs a `sources` map", rel, "sources"))
        return sources, rel
    for key in raw:
        if key not in ("schemaVersion", "sources"):
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", rel, key))
    for order, (sid, entry) in enumerate(raw["sources"].items()):
        fpath = f"sources.{sid}"
        if not isinstance(entry, dict):
            issues.append(error(CODE_INVALID_FIELD, "a source must be an object", rel, fpath))
            continue
        for key in entry:
            if key not in SOURCE_FIELDS:
                issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", rel, f"{fpath}.{key}"))
        kind, spath, target = entry.get("kind"), entry.get("path"), entry.get("to")
        bad = False
        if kind not in SOURCE_KINDS:
            issues.append(error(CODE_INVALID_FIELD, f"kind must be one of {sorted(SOURCE_KINDS)}", rel, f"{fpath}.kind"))
            bad = True
        if not isinstance(spath, str):
            issues.append(error(CODE_MISSING_FIELD, "path is required", rel, f"{fpath}.path"))
            bad = True
        if not isinstance(target, str) or not TARGET_RE.match(target):
            issues.append(error("source-target-invalid", f"unknown target {target!r}", rel, f"{fpath}.to"))
            bad = True
        schema = entry.get("schema")
        if schema is not None and not (isinstance(schema, str) and (SCHEMA_URI_RE.match(schema) or _safe_path(root, schema))):
            issues.append(error(CODE_INVALID_FIELD, f"unknown schema {schema!r}", rel, f"{fpath}.schema"))
        if bad:
            continue
        resolved = _safe_path(root, spath)
        if resolved is None:
            issues.append(error(CODE_PATH_OUTSIDE_PACKAGE, "source path leaves the package", rel, f"{fpath}.path"))
            continue
        if kind == "media":
            if not resolved.is_dir():
                issues.append(warning("media-missing", f"media directory {spath} not found", rel, f"{fpath}.path"))
        elif not resolved.is_file():
            issues.append(error("source-missing", f"source file {spath} not found", rel, f"{fpath}.path"))
            continue
        after = entry.get("after")
        after_list = [after] if isinstance(after, str) else _str_list(after)
        visibility = entry.get("visibility", "public")
        if visibility not in ("public", "hidden"):
            issues.append(error(CODE_INVALID_FIELD, "visibility must be public or hidden", rel, f"{fpath}.visibility"))
        digest = None
        if resolved.is_file():
            digest = "sha256:" + hashlib.sha256(resolved.read_bytes()).hexdigest()
        sources.append(WorldDataSource(
            id=str(sid), kind=kind, path=_rel(root, resolved), target=target,
            schema=schema if isinstance(schema, str) else None,
            key=entry.get("key") if isinstance(entry.get("key"), str) else None, after=after_list,
            visibility=visibility if visibility in ("public", "hidden") else "public",
            index_to=entry.get("indexTo") if isinstance(entry.get("indexTo"), str) else None,
            is_enabled=entry.get("enabled", True) is not False, order=order, digest=digest,
        ))
    ids = {s.id for s in sources}
    for source in sources:
        for dep in source.after:
            if dep not in ids and dep not in raw["sources"]:
                issues.append(error("source-after-unknown", f"after refers to unknown source {dep!r}", rel, f"sources.{source.id}.after"))
    # cycle check over `after`
    graph = {s.id: [d for d in s.after if d in ids] for s in sources}
    state: dict[str, int] = {}

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
    return sources, rel


def _safe_path(root: Path, declared: str) -> Path | None:
    if not isinstance(declared, str) or not declared or declared.startswith("/") or "\\" in declared:
        return None
    candidate = (root / declared).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


# --------------------------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------------------------


def world_package_load(root: Path | str, *, source: str = SOURCE_FILE, expected_id: str | None = None) -> WorldPackage:
    """Load and validate the world package at `root`. Never raises for bad content.

    source: metadata.source ("file" for builtin worlds, "user-file" for COVEL_HOME/worlds;
    a user world holding INSTALL_MARKER is reported as "generated-file").
    expected_id: when given (folder-based discovery), a different `id` in world.yaml is an
    `id-mismatch` error. Returns a WorldPackage; check `.ok` / `.issues` before using it.
    """
    root = Path(root).resolve()
    if source == SOURCE_USER and (root / INSTALL_MARKER).is_file():
        source = SOURCE_GENERATED
    issues: list[Issue] = []
    world = WorldPackage(id=expected_id or root.name, root=root, source=source, issues=issues)
    manifest_path = root / WORLD_FILE
    if not manifest_path.is_file():
        issues.append(error(CODE_MANIFEST_MISSING, "world.yaml is missing", WORLD_FILE))
        return world
    parse_issues: list[Issue] = []
    manifest = _parse_file(manifest_path, WORLD_FILE, parse_issues)
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

    for key in manifest:
        if key not in WORLD_FIELDS and key not in LEGACY_WORLD_FIELDS:
            issues.append(warning(CODE_UNKNOWN_FIELD, "unknown field", WORLD_FILE, key))
    for key in ("schemaVersion", "id", "name", "summary", "defaultLocale"):
        if key not in manifest:
            issues.append(error(CODE_MISSING_FIELD, "required field is missing", WORLD_FILE, key))
    world_id = manifest.get("id")
    if isinstance(world_id, str):
        if not WORLD_ID_RE.match(world_id):
            issues.append(error(CODE_IDENTITY_INVALID, "world id: lowercase letters, digits and hyphens, starting with a letter", WORLD_FILE, "id"))
        if expected_id and world_id != expected_id:
            issues.append(error(CODE_ID_MISMATCH, f"world.yaml declares id {world_id!r} but the folder is {expected_id!r}", WORLD_FILE, "id"))
        world.id = expected_id or world_id
    elif "id" in manifest:
        issues.append(error(CODE_INVALID_FIELD, "id must be a string", WORLD_FILE, "id"))

    default_locale = manifest.get("defaultLocale") if isinstance(manifest.get("defaultLocale"), str) else "en-US"
    if "defaultLocale" in manifest and not (isinstance(manifest["defaultLocale"], str) and LOCALE_RE.match(manifest["defaultLocale"])):
        issues.append(error(CODE_INVALID_FIELD, "defaultLocale must be a BCP 47 tag", WORLD_FILE, "defaultLocale"))
    supported = [default_locale]
    for index, tag in enumerate(manifest.get("supportedLocales") or []):
        if not isinstance(tag, str) or not LOCALE_RE.match(tag):
            issues.append(error(CODE_INVALID_FIELD, "locale must be a BCP 47 tag", WORLD_FILE, f"supportedLocales.{index}"))
        elif tag not in supported:
            supported.append(tag)
    for key in ("name", "summary"):
        if key in manifest and not (isinstance(manifest[key], str) or (isinstance(manifest[key], dict) and manifest[key])):
            issues.append(error(CODE_INVALID_FIELD, "must be a string or a locale map", WORLD_FILE, key))
    if not (root / LORE_FILE).is_file():
        issues.append(error(CODE_FILE_MISSING, "WORLD.md is missing", LORE_FILE))

    # Locale overlays of world.yaml / WORLD.md add locales (spec 004 translate, step 4).
    languages = {t.split("-", 1)[0] for t in supported}
    for child in sorted(root.iterdir()):
        if child.is_file():
            base, tag = locale_split(child.name, languages | {"en", "zh", "ja", "ko", "fr", "de", "es", "ru"})
            if tag and base in (WORLD_FILE, LORE_FILE):
                normalized = _locale_normalize(tag, supported)
                if normalized not in supported:
                    supported.append(normalized)
    world.supported_locales = supported
    world.default_locale = default_locale
    languages = {t.split("-", 1)[0] for t in supported}

    world.tags = _str_list(manifest.get("tags"))
    world.version = str(manifest["version"]) if manifest.get("version") is not None else None
    world.author = manifest.get("author") if isinstance(manifest.get("author"), dict) else None
    world.license = manifest.get("license") if isinstance(manifest.get("license"), str) else None
    world.homepage = manifest.get("homepage") if isinstance(manifest.get("homepage"), str) else None
    world.plugin_policy = _policy_normalize(manifest, issues)
    settings = manifest.get("pluginSettings", {})
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        issues.append(error(CODE_INVALID_FIELD, "pluginSettings maps plugin id → setting key → value", WORLD_FILE, "pluginSettings"))
    else:
        world.plugin_settings = settings
    view_mode = manifest.get("defaultViewMode")
    if view_mode is not None and view_mode not in ("stage", "parsed"):
        issues.append(error(CODE_INVALID_FIELD, "defaultViewMode must be stage or parsed", WORLD_FILE, "defaultViewMode"))
    world.default_view_mode = view_mode if view_mode in ("stage", "parsed") else None
    for key, suffixes, attr in (("cover", IMAGE_SUFFIXES, "cover"), ("themeMusic", MUSIC_SUFFIXES, "theme_music")):
        value = manifest.get(key)
        if value is None:
            continue
        parts = value.split("/") if isinstance(value, str) else []
        if len(parts) != 3 or parts[0] != "media" or not value.lower().endswith(suffixes) or _safe_path(root, value) is None:
            issues.append(error(CODE_INVALID_FIELD, f"{key} must be a file one directory under media/ ({', '.join(suffixes)})", WORLD_FILE, key))
        else:
            setattr(world, attr, value)
    accent = manifest.get("accentColor")
    if accent is not None:
        if isinstance(accent, str) and re.match(r"^(#[0-9a-fA-F]{6}|oklch\([^)]*\))$", accent):
            world.accent_color = accent
        else:
            issues.append(error(CODE_INVALID_FIELD, "accentColor must be #rrggbb or oklch(L C H)", WORLD_FILE, "accentColor"))
    if "memoryBlocks" in manifest:
        world.extra["memoryBlocks"] = manifest["memoryBlocks"]

    # Character schema (legacy `characterAttributes` → characterSchema.attributes).
    character_schema = manifest.get("characterSchema")
    if character_schema is None and isinstance(manifest.get("characterAttributes"), list):
        issues.append(warning(CODE_LEGACY_LAYOUT, "characterAttributes is legacy; use characterSchema.attributes", WORLD_FILE, "characterAttributes"))
        character_schema = {"types": ["npc", "companion"], "attributes": manifest["characterAttributes"]}
        manifest = {**manifest, "characterSchema": character_schema}
    if character_schema is not None:
        _character_schema_check(character_schema, WORLD_FILE, issues)
        world.character_schema = copy.deepcopy(character_schema) if isinstance(character_schema, dict) else None

    # World data sources and every data/characters/media file.
    sources, _descriptor_rel = _descriptor_load(root, manifest, issues)
    world.data_sources = sources
    base_files: dict[str, Any] = {}
    overlay_files: dict[str, dict[str, Any]] = {}  # base rel → {locale: content}
    scan_dirs = [root / "data", root / "characters", root / "media", root / "dimensions"]
    for directory in scan_dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json") or path.is_symlink():
                continue
            rel = _rel(root, path)
            base_name, tag = locale_split(path.name, languages)
            content = _parse_file(path, rel, issues)
            if content is None:
                continue
            if tag is None:
                base_files[rel] = content
                continue
            normalized = _locale_normalize(tag, supported)
            if normalized != tag:
                issues.append(info("locale-short-name", f"overlay locale {tag!r} read as {normalized!r}", rel))
            if normalized not in supported:
                issues.append(warning("locale-unsupported", f"overlay for unsupported locale {tag!r} ignored", rel))
                continue
            base_rel = _rel(root, path.with_name(base_name))
            overlay_files.setdefault(base_rel, {})[normalized] = (rel, content)
    for base_rel, overlays in overlay_files.items():
        if base_rel not in base_files:
            for rel, _content in overlays.values():
                issues.append(warning("overlay-without-base", f"no base file {base_rel} for this overlay", rel))
    world.data_files = base_files

    def localized(rel: str, locale: str, *, keyed: bool = False) -> Any:
        base = base_files.get(rel)
        entry = overlay_files.get(rel, {}).get(locale)
        if base is None or locale == default_locale or entry is None:
            return copy.deepcopy(base)
        overlay_rel, overlay = entry
        if keyed and isinstance(base, dict) and isinstance(overlay, dict):
            unknown: list[str] = []
            merged = overlay_merge(base, overlay, top_level_known_only=True, unknown=unknown)
            for key in unknown:
                issues.append(warning("overlay-unknown-id", f"{key!r} is not defined in the base file; ignored", overlay_rel, key))
            return merged
        return overlay_merge(base, overlay)

    # Dimensions: inline world.yaml, descriptor/convention file, dimensionSources, split dimensions/.
    # base_dims: id → (base value, file); overlays: locale → id → (overlay value, overlay file).
    base_dims: dict[str, tuple[Any, str]] = {}
    dim_overlays: dict[str, dict[str, tuple[Any, str]]] = {loc: {} for loc in supported}
    inline_dims = manifest.get("dimensions")
    if isinstance(inline_dims, dict):
        base_dims.update({k: (v, WORLD_FILE) for k, v in inline_dims.items()})
    elif inline_dims is not None:
        issues.append(error(CODE_INVALID_FIELD, "dimensions must be a map", WORLD_FILE, "dimensions"))

    def add_dimension_file(rel: str, *, single_id: str | None = None) -> None:
        content = base_files[rel]
        entries = {single_id: content} if single_id else content
        if not isinstance(entries, dict):
            issues.append(error(CODE_INVALID_FIELD, "a dimensions file is a map keyed by dimension id", rel))
            return
        for dim_id, value in entries.items():
            if dim_id in base_dims:
                issues.append(info("dimension-duplicate-source", f"dimension {dim_id!r} is already defined in {base_dims[dim_id][1]}; ignored here", rel, None if single_id else str(dim_id)))
                continue
            base_dims[str(dim_id)] = (value, rel)
        for loc, (overlay_rel, overlay) in overlay_files.get(rel, {}).items():
            over_entries = {single_id: overlay} if single_id else overlay
            if not isinstance(over_entries, dict):
                issues.append(warning("overlay-invalid", "overlay must have the base file's shape", overlay_rel))
                continue
            for dim_id, value in over_entries.items():
                if dim_id not in entries:
                    issues.append(warning("overlay-unknown-id", f"{dim_id!r} is not defined in the base file; ignored", overlay_rel, str(dim_id)))
                elif base_dims.get(str(dim_id), (None, None))[1] == rel:
                    dim_overlays[loc][str(dim_id)] = (value, overlay_rel)

    for src in sources:
        if src.target == DIMENSIONS_TARGET and src.path in base_files:
            add_dimension_file(src.path)
    dim_sources = manifest.get("dimensionSources") or {}
    if isinstance(dim_sources, dict):
        for dim_id, rel in dim_sources.items():
            resolved = _safe_path(root, rel) if isinstance(rel, str) else None
            rel_norm = _rel(root, resolved) if resolved is not None else None
            if rel_norm is None or rel_norm not in base_files:
                issues.append(error(CODE_FILE_MISSING, f"dimension source {rel!r} not found", WORLD_FILE, f"dimensionSources.{dim_id}"))
                continue
            add_dimension_file(rel_norm, single_id=str(dim_id))
    for rel in sorted(base_files):
        if rel.startswith("dimensions/") and rel.count("/") == 1:
            stem = PurePosixPath(rel).stem
            add_dimension_file(rel, single_id=re.sub(r"-([a-z0-9])", lambda m: m.group(1).upper(), stem))

    dims_by_locale: dict[str, dict[str, Any]] = {loc: {} for loc in supported}
    for dim_id, (base_value, rel) in base_dims.items():
        legacy = not is_definition(base_value)
        if legacy:
            issues.append(warning("dimension-legacy-format", "static setting block without name/schema; read as a static dimension", rel, dim_id))
            base_def = legacy_dimension_convert(dim_id, base_value)
        else:
            base_def = copy.deepcopy(base_value)
        for loc in supported:
            over = dim_overlays[loc].get(dim_id) if loc != default_locale else None
            if over is None:
                dims_by_locale[loc][dim_id] = copy.deepcopy(base_def)
            elif not legacy:
                dims_by_locale[loc][dim_id] = overlay_merge(base_def, over[0]) if isinstance(over[0], dict) else copy.deepcopy(base_def)
            elif is_definition(over[0]) or (isinstance(over[0], dict) and "name" in over[0] and "schema" in over[0]):
                localized_def = copy.deepcopy(base_def)
                for key in ("name", "description"):
                    if key in over[0]:
                        localized_def[key] = over[0][key]
                dims_by_locale[loc][dim_id] = localized_def
            else:
                dims_by_locale[loc][dim_id] = legacy_dimension_convert(dim_id, overlay_merge(base_value, over[0]))
    for dim_id, definition in dims_by_locale[default_locale].items():
        issues.extend(dimensions_validate({dim_id: definition}, file=base_dims[dim_id][1], field_prefix=""))
    for loc in supported:
        if loc == default_locale:
            continue
        for dim_id, definition in dims_by_locale[loc].items():
            over = dim_overlays[loc].get(dim_id)
            for issue in dimensions_validate({dim_id: definition}, file=over[1] if over else base_dims[dim_id][1], field_prefix=""):
                issues.append(warning("overlay-invalid", f"[{loc}] {issue.message}", issue.file, issue.field))
    world.dimensions = dims_by_locale[default_locale]

    # Per-locale content.
    overlay_world: dict[str, dict[str, Any]] = {}
    for loc in supported:
        if loc == default_locale:
            continue
        for candidate in (root / f"world.{loc}.yaml", root / f"world.{loc.split('-', 1)[0]}.yaml"):
            if candidate.is_file():
                rel = _rel(root, candidate)
                content = _parse_file(candidate, rel, issues)
                if content is None:
                    break
                if not isinstance(content, dict):
                    issues.append(error(CODE_MANIFEST_INVALID, "a world overlay must be a mapping", rel))
                    break
                unknown: list[str] = []
                merged = overlay_merge(manifest, content, top_level_known_only=True, unknown=unknown)
                for key in unknown:
                    issues.append(warning("overlay-unknown-id", f"{key!r} is not in world.yaml; overlays only translate", rel, key))
                for key in ("name", "summary"):
                    if isinstance(content.get(key), str) and isinstance(manifest.get(key), dict):
                        merged[key] = content[key]
                overlay_world[loc] = merged
                break

    for loc in supported:
        merged_manifest = overlay_world.get(loc, manifest)
        lore = ""
        lore_candidates = [root / LORE_FILE] if loc == default_locale else [root / f"WORLD.{loc}.md", root / f"WORLD.{loc.split('-', 1)[0]}.md", root / LORE_FILE]
        for candidate in lore_candidates:
            if candidate.is_file():
                try:
                    lore = candidate.read_text(encoding="utf-8").strip()
                except (OSError, UnicodeDecodeError):
                    issues.append(error(CODE_FILE_INVALID, "file is not readable UTF-8 text", _rel(root, candidate)))
                break
        content = WorldLocaleContent(
            locale=loc,
            name=text_for(merged_manifest.get("name"), loc, default_locale),
            summary=text_for(merged_manifest.get("summary"), loc, default_locale),
            lore=lore,
            dimensions=dims_by_locale[loc],
        )
        cs = merged_manifest.get("characterSchema")
        content.character_schema = copy.deepcopy(cs) if isinstance(cs, dict) else copy.deepcopy(world.character_schema)
        policy = merged_manifest.get("pluginPolicy") if isinstance(merged_manifest.get("pluginPolicy"), dict) else {}
        content.plugin_policy_packs = [p for p in policy.get("packs") or [] if isinstance(p, dict)]
        for src in sources:
            if src.kind == "media" or src.path not in base_files:
                continue
            value = localized(src.path, loc)
            content.data[src.id] = value
            if src.target == "characters":
                content.characters = _records(value, src, issues, require=("id", "name"), report=loc == default_locale)
            elif src.target == "lorebook" or src.target.endswith("+lorebook"):
                entries = _records(value, src, issues, require=("id", "content"), report=loc == default_locale)
                content.lorebook.extend({**e, "sourceId": src.id} for e in entries if src.is_enabled)
        for rel in base_files:
            if rel.startswith("media/") and rel.count("/") == 1:
                content.media[PurePosixPath(rel).stem] = localized(rel, loc)
        world.locales[loc] = content

    default = world.locales[default_locale]
    world.name, world.summary, world.lore = default.name, default.summary, default.lore
    hasher = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        hasher.update(_rel(root, path).encode())
        hasher.update(path.read_bytes())
    world.digest = "sha256:" + hasher.hexdigest()
    return world


def _records(value: Any, src: WorldDataSource, issues: list[Issue], *, require: tuple[str, ...], report: bool) -> list[dict[str, Any]]:
    """Records of a list-shaped source; invalid items are reported (default locale) and skipped."""
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


# --------------------------------------------------------------------------------------------
# Discovery and reports
# --------------------------------------------------------------------------------------------

BUILTIN_WORLDS_DIR = Path(__file__).resolve().parent / "worlds"


def user_worlds_dir(covel_home: Path | str) -> Path:
    """`$COVEL_HOME/worlds` (user-installed and generated world packages)."""
    return Path(covel_home) / "worlds"


def world_packages_discover(*, builtin_dir: Path | None = None, user_dir: Path | None = None) -> list[WorldPackage]:
    """Load every package folder (one holding world.yaml) in builtin_dir (source "file") and
    user_dir (source "user-file"). Folder name = world id. A user world reusing a builtin id gets
    an `id-conflict` error. Broken packages are returned too (check `.ok`)."""
    out: list[WorldPackage] = []
    seen: set[str] = set()
    for directory, source in ((builtin_dir if builtin_dir is not None else BUILTIN_WORLDS_DIR, SOURCE_FILE), (user_dir, SOURCE_USER)):
        if directory is None or not Path(directory).is_dir():
            continue
        for child in sorted(Path(directory).iterdir(), key=lambda p: p.name):
            if not child.is_dir() or child.name.startswith((".", "_")) or not (child / WORLD_FILE).is_file():
                continue
            world = world_package_load(child, source=source, expected_id=child.name)
            if world.id in seen:
                world.issues.append(error("id-conflict", f"world id {world.id!r} is already provided by another package", WORLD_FILE, "id"))
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
    raw = _parse_file(path, path.name, issues) if path.is_file() else None
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
                              requested=_str_list(pack.get("requested")), recommended=_str_list(pack.get("recommended")),
                              tags=_str_list(pack.get("tags")),
                              default_view_mode=pack.get("defaultViewMode") if isinstance(pack.get("defaultViewMode"), str) else None))
    return packs, issues
