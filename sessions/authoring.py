"""World authoring read model (spec 004 GET /api/framework/authoring): the files of a world package,
the kernel destinations world data may target, the data contracts loaded plugins accept, the plugin
catalogue and the builtin packs. Used by the endpoint and by AI world generation.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plugins_app import manifests as mf
from plugins_app.registry import HOST_ERROR, PluginRegistry
from sessions import world_packages as wp

PLUGINS_APP_DIR = Path(mf.__file__).resolve().parent
PACKS_CATALOG = PLUGINS_APP_DIR / "packs" / "builtin.yaml"

WORLD_FILES = [
    {"path": "world.yaml", "purpose": "World manifest: identity, locales, plugin selection, character schema."},
    {"path": "WORLD.md", "purpose": "World lore in the default locale; WORLD.<locale>.md for other locales."},
    {"path": "world.<locale>.yaml", "purpose": "Translated text of world.yaml; structure and ids come from world.yaml."},
    {"path": "data/world.data.yaml", "purpose": "World data descriptor: sources, their targets and import order."},
    {"path": "data/dimensions.yaml", "purpose": "Dimension definitions: name, schema, initialValue, updateRule."},
    {"path": "data/lorebook.yaml", "purpose": "Lorebook entries: id, content."},
    {"path": "characters/characters.json", "purpose": "Character records: id, name, type, description, fields."},
    {"path": "media/gallery.json", "purpose": "Gallery images shown before play."},
]


def _text(value: Any, locale: str | None) -> Any:
    return mf.text_resolve(value, locale) if isinstance(value, dict) else value


def authoring(registry: PluginRegistry, *, locale: str | None = None) -> dict[str, Any]:
    """GET /api/framework/authoring: world files, kernel destinations, contracts from
    contributes.data.*.authoring of loaded plugins, the plugin catalogue and the packs."""
    contracts: list[dict[str, Any]] = []
    diagnostics: list[dict[str, Any]] = []
    plugins: list[dict[str, Any]] = []
    for record in registry.all():
        if record.host_state == HOST_ERROR:
            continue
        m = record.manifest
        plugins.append({"id": m.id, "displayName": _text(m.display_name, locale) or m.id,
                        "description": _text(m.description, locale), "tags": m.tags,
                        "provides": m.provided_contracts, "requires": m.requires,
                        "settings": [dict(s) for s in m.contributes.settings]})
        for namespace, decl in m.contributes.data.items():
            auth = decl.get("authoring")
            if not isinstance(auth, dict):
                continue
            accepts = [c for c in decl.get("accepts") or [] if isinstance(c, str)]
            contract = accepts[0] if accepts else f"{m.id}.{namespace}@1"
            example = auth.get("example")
            if isinstance(example, str):
                path = mf.package_path_resolve(m.root, example)
                try:
                    example = json.loads(path.read_text(encoding="utf-8")) if path else None
                except (OSError, ValueError):
                    diagnostics.append({"pluginId": m.id, "namespace": namespace, "message": "example is not readable JSON"})
                    continue
            entry: dict[str, Any] = {"contract": contract, "pluginId": m.id, "namespace": namespace,
                                     "title": _text(auth.get("title"), locale), "hint": _text(auth.get("hint"), locale),
                                     "schema": decl.get("schema"), "example": example}
            source = auth.get("source")
            if isinstance(source, dict):
                entry["source"] = {"id": namespace, "entry": {**source, "schema": f"contract:{contract}", "to": f"contract:{contract}"}}
            if auth.get("generate") in ("offer", "default"):
                entry["generate"] = auth["generate"]
            contracts.append(entry)
    packs, _issues = wp.packs_catalog_load(PACKS_CATALOG)
    out = {
        "files": WORLD_FILES,
        "destinations": [
            {"title": "Dimensions", "description": "Author-declared world dimensions with JSON Schemas and initial values.",
             "source": {"id": "dimensions", "entry": {"kind": "yaml", "path": "data/dimensions.yaml", "schema": "covel://world/dimensions", "to": "world:metadata.dimensions"}}},
            {"title": "Characters", "description": "Character records of the session's world model.",
             "source": {"id": "characters", "entry": {"kind": "json", "path": "characters/characters.json", "to": "characters", "key": "id"}}},
            {"title": "Lorebook", "description": "Lorebook entries retrieved into prompts.",
             "source": {"id": "lore", "entry": {"kind": "yaml", "path": "data/lorebook.yaml", "to": "lorebook", "key": "id"}}},
        ],
        "contracts": contracts,
        "plugins": plugins,
        "packs": [{**p.as_dict(), "label": _text(p.label, locale), "description": _text(p.description, locale)} for p in packs],
    }
    if diagnostics:
        out["diagnostics"] = diagnostics
    return out
