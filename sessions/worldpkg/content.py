"""World package content: the data files with their locale overlays, the dimensions, and the
per-locale view of everything text-bearing (spec 004 世界目录; upstream docs/reference/world-data.md).

Pure Python. Dimension definitions are validated by sessions.worldpkg.dimensions (their own
codes: dimension-invalid, schema-unknown-keyword, ...); overlay problems are warnings.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path, PurePosixPath
from typing import Any

from plugins_app.validation import CODE_FILE_INVALID, CODE_FILE_MISSING, CODE_INVALID_FIELD, CODE_MANIFEST_INVALID, Issue, error, info, warning
from sessions.worldpkg.dimensions import dimensions_validate, is_definition, legacy_dimension_convert
from sessions.worldpkg.files import locale_normalize, locale_split, overlay_merge, parse_file, rel_path, safe_path, text_for
from sessions.worldpkg.model import DIMENSIONS_TARGET, LORE_FILE, WORLD_FILE, WorldDataSource, WorldLocaleContent, WorldPackage
from sessions.worldpkg.sources import source_records

SCAN_DIRS = ("data", "characters", "media", "dimensions")
DATA_SUFFIXES = (".yaml", ".yml", ".json")
# base file rel → {locale: (overlay rel, overlay content)}
Overlays = dict[str, dict[str, tuple[str, Any]]]


def package_files_scan(root: Path, supported: list[str], issues: list[Issue]) -> tuple[dict[str, Any], Overlays]:
    """Parse every YAML/JSON file under data/, characters/, media/, dimensions/ (no symlinks).

    Returns (base rel → content, overlays of supported locales). Issues: file-invalid,
    locale-short-name (info: `gallery.en.json` read as en-US), locale-unsupported,
    overlay-without-base (warnings).
    """
    languages = {t.split("-", 1)[0] for t in supported}
    base_files: dict[str, Any] = {}
    overlay_files: Overlays = {}
    for directory in (root / name for name in SCAN_DIRS):
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if not path.is_file() or path.suffix not in DATA_SUFFIXES or path.is_symlink():
                continue
            rel = rel_path(root, path)
            base_name, tag = locale_split(path.name, languages)
            content = parse_file(path, rel, issues)
            if content is None:
                continue
            if tag is None:
                base_files[rel] = content
                continue
            normalized = locale_normalize(tag, supported)
            if normalized != tag:
                issues.append(info("locale-short-name", f"overlay locale {tag!r} read as {normalized!r}", rel))
            if normalized not in supported:
                issues.append(warning("locale-unsupported", f"overlay for unsupported locale {tag!r} ignored", rel))
                continue
            base_rel = rel_path(root, path.with_name(base_name))
            overlay_files.setdefault(base_rel, {})[normalized] = (rel, content)
    for base_rel, overlays in overlay_files.items():
        if base_rel not in base_files:
            for rel, _content in overlays.values():
                issues.append(warning("overlay-without-base", f"no base file {base_rel} for this overlay", rel))
    return base_files, overlay_files


def localized(base_files: dict[str, Any], overlay_files: Overlays, rel: str, locale: str, default_locale: str,
              identity_keys: tuple[str, ...] = ("id",)) -> Any:
    """Content of data file `rel` for `locale`: the base merged with that locale's overlay (a copy;
    `identity_keys` pair list items, see files.overlay_merge)."""
    base = base_files.get(rel)
    entry = overlay_files.get(rel, {}).get(locale)
    if base is None or locale == default_locale or entry is None:
        return copy.deepcopy(base)
    return overlay_merge(base, entry[1], identity_keys=identity_keys)


def world_dimensions_assemble(root: Path, manifest: dict[str, Any], sources: list[WorldDataSource], base_files: dict[str, Any],
                              overlay_files: Overlays, supported: list[str], default_locale: str,
                              issues: list[Issue]) -> dict[str, dict[str, Any]]:
    """Dimension definitions per locale, from inline world.yaml `dimensions`, the dimensions
    source file, `dimensionSources` and split dimensions/<id>.yaml (the first definition of an id
    wins; later ones are `dimension-duplicate-source` infos). Old static blocks are converted with
    a `dimension-legacy-format` warning. Default-locale definitions are validated (errors);
    overlay results only warn (`overlay-invalid`). Returns locale → {id: definition}.
    """
    # base_dims: id → (base value, file); overlays: locale → id → (overlay value, overlay file).
    base_dims: dict[str, tuple[Any, str]] = {}
    dim_overlays: dict[str, dict[str, tuple[Any, str]]] = {loc: {} for loc in supported}
    inline_dims = manifest.get("dimensions")
    if isinstance(inline_dims, dict):
        base_dims.update({k: (v, WORLD_FILE) for k, v in inline_dims.items()})

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
            resolved = safe_path(root, rel) if isinstance(rel, str) else None
            rel_norm = rel_path(root, resolved) if resolved is not None else None
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
                # A static (legacy) base block with a definition-shaped overlay: the overlay's name and
                # description, and its initialValue merged onto the block's value (the locale's text;
                # the base keeps the structure) — dropping it left an en-US session with the base
                # language's values (issue 20). The schema stays the block's type, with the overlay's titles.
                localized_def = copy.deepcopy(base_def)
                for key in ("name", "description"):
                    if key in over[0]:
                        localized_def[key] = over[0][key]
                if "initialValue" in over[0]:
                    localized_def["initialValue"] = overlay_merge(base_value, over[0]["initialValue"])
                if isinstance(over[0].get("schema"), dict) and isinstance(localized_def.get("schema"), dict):
                    # the overlay's field titles and enum labels, on the block's type
                    localized_def["schema"] = {**overlay_merge(localized_def["schema"], over[0]["schema"]),
                                               "type": localized_def["schema"].get("type")}
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

    return dims_by_locale


#: Markdown headings that open a lore file's opening-scene section (WORLD.<locale>.md).
_OPENING_HEADING_RE = re.compile(r"^(#{1,6})\s+(?:opening\b.*|.*\bopening scen\w*|开场.*|开局.*)$", re.IGNORECASE)
_HEADING_RE = re.compile(r"^(#{1,6})\s+")


def lore_opening_section(lore: str) -> str:
    """The body of the first "Opening …" / "开场…" / "开局…" heading section of a lore file (up to
    the next heading of the same or a higher level), stripped; "" when there is none."""
    lines = lore.splitlines()
    for index, line in enumerate(lines):
        match = _OPENING_HEADING_RE.match(line.strip())
        if not match:
            continue
        level, body = len(match.group(1)), []
        for following in lines[index + 1:]:
            heading = _HEADING_RE.match(following.strip())
            if heading and len(heading.group(1)) <= level:
                break
            body.append(following)
        return "\n".join(body).strip()
    return ""


def opening_localize(dims: dict[str, Any], default_dims: dict[str, Any], locale: str, default_locale: str,
                     own_lore: str) -> dict[str, Any]:
    """`dims` (one locale's dimension definitions) with every ``initialValue.openingScenario``
    resolved for `locale` (issue 20/21: an en-US session must not open in Chinese):
    a locale map → that locale's text (files.text_for); a value the locale's overlay left equal
    to the default locale's (untranslated) → the opening section of the locale's own lore file
    (WORLD.<locale>.md, `lore_opening_section`) when it has one. Returns a new dict when changed."""
    out = dims
    for dim_id, definition in dims.items():
        initial = definition.get("initialValue") if isinstance(definition, dict) else None
        if not isinstance(initial, dict) or "openingScenario" not in initial:
            continue
        value = initial["openingScenario"]
        text = text_for(value, locale, default_locale) if isinstance(value, dict) else value
        if locale != default_locale and own_lore:
            base_def = default_dims.get(dim_id) if isinstance(default_dims.get(dim_id), dict) else {}
            base_initial = base_def.get("initialValue") if isinstance(base_def.get("initialValue"), dict) else {}
            base_value = base_initial.get("openingScenario")
            base_text = text_for(base_value, default_locale, default_locale) if isinstance(base_value, dict) else base_value
            if text == base_text and not (isinstance(value, dict) and isinstance(value.get(locale), str)):
                text = lore_opening_section(own_lore) or text
        if text is not value:
            if out is dims:
                out = dict(dims)
            out[dim_id] = {**definition, "initialValue": {**initial, "openingScenario": text}}
    return out


def world_locales_build(world: WorldPackage, manifest: dict[str, Any], sources: list[WorldDataSource], base_files: dict[str, Any],
                        overlay_files: Overlays, dims_by_locale: dict[str, dict[str, Any]], issues: list[Issue]) -> None:
    """Fill world.locales: per supported locale the name, summary and lore (world.<loc>.yaml and
    WORLD.<loc>.md overlays, or the base), dimensions, character schema, packs, the data of every
    source, characters and lorebook records (record issues reported for the default locale only)
    and media manifests. Overlay issues: manifest-invalid (not a mapping), overlay-unknown-id."""
    root, supported, default_locale = world.root, world.supported_locales, world.default_locale
    overlay_world: dict[str, dict[str, Any]] = {}
    for loc in supported:
        if loc == default_locale:
            continue
        for candidate in (root / f"world.{loc}.yaml", root / f"world.{loc.split('-', 1)[0]}.yaml"):
            if candidate.is_file():
                rel = rel_path(root, candidate)
                content = parse_file(candidate, rel, issues)
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
        lore_is_own = False  # the lore is this locale's own WORLD.<loc>.md, not the base file
        for candidate in lore_candidates:
            if candidate.is_file():
                lore_is_own = candidate.name != LORE_FILE
                try:
                    lore = candidate.read_text(encoding="utf-8").strip()
                except (OSError, UnicodeDecodeError):
                    issues.append(error(CODE_FILE_INVALID, "file is not readable UTF-8 text", rel_path(root, candidate)))
                break
        content = WorldLocaleContent(
            locale=loc,
            name=text_for(merged_manifest.get("name"), loc, default_locale),
            summary=text_for(merged_manifest.get("summary"), loc, default_locale),
            lore=lore,
            dimensions=opening_localize(dims_by_locale[loc], dims_by_locale[default_locale], loc, default_locale,
                                        lore if loc != default_locale and lore_is_own else ""),
        )
        cs = merged_manifest.get("characterSchema")
        content.character_schema = copy.deepcopy(cs) if isinstance(cs, dict) else copy.deepcopy(world.character_schema)
        policy = merged_manifest.get("pluginPolicy") if isinstance(merged_manifest.get("pluginPolicy"), dict) else {}
        packs = policy.get("packs") if isinstance(policy.get("packs"), list) else []
        content.plugin_policy_packs = [p for p in packs if isinstance(p, dict)]
        for src in sources:
            if src.kind == "media" or src.path not in base_files:
                continue
            value = localized(base_files, overlay_files, src.path, loc, default_locale, src.identity_keys)
            content.data[src.id] = value
            if src.target == "characters":
                content.characters = source_records(value, src, issues, require=("id", "name"), report=loc == default_locale)
            elif src.target == "lorebook" or src.target.endswith("+lorebook"):
                entries = source_records(value, src, issues, require=("id", "content"), report=loc == default_locale)
                content.lorebook.extend({**e, "sourceId": src.id} for e in entries if src.is_enabled)
        for rel in base_files:
            if rel.startswith("media/") and rel.count("/") == 1:
                content.media[PurePosixPath(rel).stem] = localized(base_files, overlay_files, rel, loc, default_locale)
        world.locales[loc] = content
