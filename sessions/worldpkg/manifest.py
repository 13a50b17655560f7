"""world.yaml: validation against the published schema and the rules it cannot express.

The schema (plugins_app/schemas/world.json, spec 004 世界管理) carries the field types, enums,
required fields and unknown-field warnings; plugins_app.validation.schema_issues maps its errors
to issues. What stays here: the world id (identity-invalid, id-mismatch), locales added by
overlay files, media paths of cover/themeMusic, the legacy conversions (pluginPolicy `preset` /
`preferTags` / `avoidTags` / `plus`, top-level `requiredPlugins` / `recommendedPlugins` /
`excludedPlugins`, `characterAttributes`), each with a `legacy-layout` warning, and duplicate pack
ids. Every rule reads values of the right type only, so a wrong type is reported once.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from plugins_app.validation import (
    CODE_FILE_MISSING,
    CODE_ID_MISMATCH,
    CODE_IDENTITY_INVALID,
    CODE_INVALID_FIELD,
    CODE_LEGACY_LAYOUT,
    Issue,
    error,
    schema_issues,
    warning,
)
from sessions.worldpkg.files import locale_normalize, locale_split, safe_path, str_list
from sessions.worldpkg.model import (
    IMAGE_SUFFIXES,
    LEGACY_POLICY_FIELDS,
    LOCALE_RE,
    LORE_FILE,
    MUSIC_SUFFIXES,
    VIEW_MODES,
    WORLD_FILE,
    WORLD_ID_RE,
    PackSpec,
    PluginPolicy,
    WorldPackage,
)

WORLD_SCHEMA = "world.json"
CHARACTER_SCHEMA_REF = "world.json#/$defs/characterSchema"
ACCENT_RE = re.compile(r"^(#[0-9a-fA-F]{6}|oklch\([^)]*\))$")  # also world.json accentColor.pattern
# Languages whose short overlay names (world.zh.yaml) are recognised before supportedLocales is known.
OVERLAY_LANGUAGES = {"en", "zh", "ja", "ko", "fr", "de", "es", "ru"}


def world_manifest_apply(world: WorldPackage, manifest: dict[str, Any], *, expected_id: str | None,
                         issues: list[Issue]) -> dict[str, Any]:
    """Validate world.yaml (`manifest`, already parsed) and fill the package-level fields of `world`.

    Appends issues (file world.yaml unless noted): schema violations; identity-invalid /
    id-mismatch for `id`; file-missing for WORLD.md; invalid-field for a cover/themeMusic that is
    not a file one directory under media/; legacy-layout warnings for converted legacy fields.
    Sets id, default/supported locales, tags, version, author, license, homepage, plugin_policy,
    plugin_settings, default_view_mode, cover, theme_music, accent_color, extra, character_schema.
    Returns the manifest the rest of the loader reads: with a legacy `characterAttributes`
    converted into `characterSchema`.
    """
    root = world.root
    issues.extend(schema_issues(manifest, WORLD_SCHEMA, file=WORLD_FILE))

    world_id = manifest.get("id")
    if isinstance(world_id, str):
        if not WORLD_ID_RE.match(world_id):
            issues.append(error(CODE_IDENTITY_INVALID, "world id: lowercase letters, digits and hyphens, starting with a letter", WORLD_FILE, "id"))
        if expected_id and world_id != expected_id:
            issues.append(error(CODE_ID_MISMATCH, f"world.yaml declares id {world_id!r} but the folder is {expected_id!r}", WORLD_FILE, "id"))
        world.id = expected_id or world_id

    default_locale = manifest.get("defaultLocale") if isinstance(manifest.get("defaultLocale"), str) else "en-US"
    supported = [default_locale]
    listed = manifest.get("supportedLocales")
    for tag in listed if isinstance(listed, list) else []:
        if isinstance(tag, str) and LOCALE_RE.match(tag) and tag not in supported:
            supported.append(tag)
    if not (root / LORE_FILE).is_file():
        issues.append(error(CODE_FILE_MISSING, "WORLD.md is missing", LORE_FILE))
    # Locale overlays of world.yaml / WORLD.md add locales (spec 004 translate, step 4).
    languages = {t.split("-", 1)[0] for t in supported}
    for child in sorted(root.iterdir()):
        if child.is_file():
            base, tag = locale_split(child.name, languages | OVERLAY_LANGUAGES)
            if tag and base in (WORLD_FILE, LORE_FILE):
                normalized = locale_normalize(tag, supported)
                if normalized not in supported:
                    supported.append(normalized)
    world.supported_locales = supported
    world.default_locale = default_locale

    world.tags = str_list(manifest.get("tags"))
    world.version = str(manifest["version"]) if manifest.get("version") is not None else None
    world.author = manifest.get("author") if isinstance(manifest.get("author"), dict) else None
    world.license = manifest.get("license") if isinstance(manifest.get("license"), str) else None
    world.homepage = manifest.get("homepage") if isinstance(manifest.get("homepage"), str) else None
    world.plugin_policy = plugin_policy_normalize(manifest, issues)
    settings = manifest.get("pluginSettings", {})
    if isinstance(settings, dict) and all(isinstance(v, dict) for v in settings.values()):
        world.plugin_settings = settings
    view_mode = manifest.get("defaultViewMode")
    world.default_view_mode = view_mode if view_mode in VIEW_MODES else None
    for key, suffixes, attr in (("cover", IMAGE_SUFFIXES, "cover"), ("themeMusic", MUSIC_SUFFIXES, "theme_music")):
        value = manifest.get(key)
        if not isinstance(value, str):
            continue  # absent, or a wrong type the schema reported
        parts = value.split("/")
        if len(parts) != 3 or parts[0] != "media" or not value.lower().endswith(suffixes) or safe_path(root, value) is None:
            issues.append(error(CODE_INVALID_FIELD, f"{key} must be a file one directory under media/ ({', '.join(suffixes)})", WORLD_FILE, key))
        else:
            setattr(world, attr, value)
    accent = manifest.get("accentColor")
    if isinstance(accent, str) and ACCENT_RE.match(accent):
        world.accent_color = accent
    if "memoryBlocks" in manifest:
        world.extra["memoryBlocks"] = manifest["memoryBlocks"]

    # Character schema (legacy `characterAttributes` → characterSchema.attributes).
    character_schema = manifest.get("characterSchema")
    if character_schema is None and isinstance(manifest.get("characterAttributes"), list):
        issues.append(warning(CODE_LEGACY_LAYOUT, "characterAttributes is legacy; use characterSchema.attributes", WORLD_FILE, "characterAttributes"))
        character_schema = {"types": ["npc", "companion"], "attributes": manifest["characterAttributes"]}
        manifest = {**manifest, "characterSchema": character_schema}
        # Checked where it now lives, so its issues name characterSchema.attributes.<n>.
        issues.extend(schema_issues(character_schema, CHARACTER_SCHEMA_REF, file=WORLD_FILE, prefix="characterSchema"))
    if character_schema is not None:
        world.character_schema = copy.deepcopy(character_schema) if isinstance(character_schema, dict) else None
    return manifest


def plugin_policy_normalize(manifest: dict[str, Any], issues: list[Issue]) -> PluginPolicy:
    """pluginPolicy of every fixture format → PluginPolicy (types are checked by the schema).

    Legacy keys (`preset`, `preferTags`, `avoidTags`, `plus`; a current key wins over its legacy
    spelling) and the top-level `requiredPlugins` / `recommendedPlugins` / `excludedPlugins` each
    add a `legacy-layout` warning. A pack id used twice is an invalid-field error; packs without a
    string id are left out.
    """
    raw = manifest.get("pluginPolicy") if isinstance(manifest.get("pluginPolicy"), dict) else {}
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if key in LEGACY_POLICY_FIELDS:
            issues.append(warning(CODE_LEGACY_LAYOUT, f"pluginPolicy.{key} is legacy; use {LEGACY_POLICY_FIELDS[key]}", WORLD_FILE, f"pluginPolicy.{key}"))
            data.setdefault(LEGACY_POLICY_FIELDS[key], value)
        else:
            data[key] = value
    packs: list[PackSpec] = []
    seen: set[str] = set()
    for index, pack in enumerate(data.get("packs") if isinstance(data.get("packs"), list) else []):
        if not isinstance(pack, dict) or not isinstance(pack.get("id"), str):
            continue  # reported by the schema
        if pack["id"] in seen:
            issues.append(error(CODE_INVALID_FIELD, f"pack {pack['id']!r} is declared twice", WORLD_FILE, f"pluginPolicy.packs.{index}.id"))
        seen.add(pack["id"])
        packs.append(pack_spec(pack))
    requested = str_list(data.get("requested"))
    recommended = str_list(data.get("recommended"))
    excluded: list[str] = []
    for legacy_key, target in (("requiredPlugins", requested), ("recommendedPlugins", recommended), ("excludedPlugins", excluded)):
        if legacy_key in manifest:
            issues.append(warning(CODE_LEGACY_LAYOUT, f"{legacy_key} is legacy; use pluginPolicy", WORLD_FILE, legacy_key))
            target.extend(p for p in str_list(manifest[legacy_key]) if p not in target)
    return PluginPolicy(
        preset=data.get("presetId") if isinstance(data.get("presetId"), str) else None,
        packs=packs, preferred_tags=str_list(data.get("preferredTags")), avoided_tags=str_list(data.get("avoidedTags")),
        requested=requested, recommended=recommended, excluded=excluded, requires=str_list(data.get("requires")),
    )


def pack_spec(pack: dict[str, Any]) -> PackSpec:
    """A PackSpec from a pack object that has a string id (world pluginPolicy.packs[] or packs/builtin.yaml)."""
    view_mode = pack.get("defaultViewMode")
    return PackSpec(id=pack["id"], label=pack.get("label"), description=pack.get("description"),
                    requested=str_list(pack.get("requested")), recommended=str_list(pack.get("recommended")),
                    tags=str_list(pack.get("tags")), reason=pack.get("reason"),
                    default_view_mode=view_mode if isinstance(view_mode, str) else None)
