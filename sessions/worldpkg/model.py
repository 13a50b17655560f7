"""World package model: constants and the dataclasses a loaded world is made of (pure Python).

The manifest format is the published JSON Schema plugins_app/schemas/world.json (world.yaml; its
`$defs/worldData` is the world data descriptor), served at GET /api/framework/schemas/world.json.
The enum sets here are the ones that schema lists (tests/sessions/test_world_schema.py keeps
them equal). sessions.world_packages re-exports every name, so import from there.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins_app.validation import Issue, has_errors, schema_document

WORLD_FILE = "world.yaml"
LORE_FILE = "WORLD.md"
DESCRIPTOR_DEFAULT = "data/world.data.yaml"
WORLD_ID_RE = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
LOCALE_RE = re.compile(r"^[a-z]{2,3}(-[A-Z][a-z]{3})?(-[A-Z]{2}|-[0-9]{3})?$")
SOURCE_FILE = "file"  # metadata.source of builtin (read-only) worlds
SOURCE_USER = "user-file"  # worlds under COVEL_HOME/worlds
SOURCE_GENERATED = "generated-file"  # user worlds installed through /api/install/* (spec 004 安装世界)
INSTALL_MARKER = ".covel-install.json"  # written by sessions/world_install.py into installed worlds

_WORLD_SCHEMA = schema_document("world.json")
LEGACY_WORLD_FIELDS = {"requiredPlugins", "recommendedPlugins", "excludedPlugins", "characterAttributes", "memoryBlocks"}
# Field names as the schema declares them (kept for callers of the former hand-written checks).
WORLD_FIELDS = set(_WORLD_SCHEMA["properties"]) - LEGACY_WORLD_FIELDS
LEGACY_POLICY_FIELDS = {"preset": "presetId", "preferTags": "preferredTags", "avoidTags": "avoidedTags", "plus": "requested"}
POLICY_FIELDS = set(_WORLD_SCHEMA["$defs"]["pluginPolicy"]["properties"]) - set(LEGACY_POLICY_FIELDS)
PACK_FIELDS = set(_WORLD_SCHEMA["$defs"]["pack"]["properties"])
SOURCE_FIELDS = set(_WORLD_SCHEMA["$defs"]["dataSource"]["properties"])
ATTRIBUTE_TYPES = {"string", "number", "boolean", "enum", "array", "object", "map"}
SOURCE_KINDS = {"yaml", "json", "media", "markdown"}
SOURCE_VISIBILITIES = ("public", "hidden")  # hidden sources are not shown to players
VIEW_MODES = ("stage", "parsed")  # defaultViewMode (null: not set)
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
    #: `localeArrayKeys`: further identity fields for nested lists in locale overlays (after `key`, `id`).
    locale_array_keys: list[str] = field(default_factory=list)

    @property
    def identity_keys(self) -> tuple[str, ...]:
        """Fields that identify an object in a list when a locale overlay is merged (spec 004
        §世界数据的语言覆盖): the source's `key`, then `id`, then its `localeArrayKeys`."""
        return tuple(dict.fromkeys([k for k in (self.key, "id", *self.locale_array_keys) if k]))

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
