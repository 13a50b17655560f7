"""character-blueprint/import manual runtime: store a blueprint (`blueprints/<id>`) and, when asked,
create or update the session character from it (a `character.upsert` proposal)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

NAMESPACE = "blueprints"
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "blueprints.schema.json"


@lru_cache(maxsize=1)
def _validator() -> Any:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _failed(message: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"code": "invalid-input", "message": message}}


def persona_line(persona: Any) -> str:
    """The persona as one line for the character's `persona` field: summary, traits and voice."""
    if isinstance(persona, str):
        return persona.strip()
    if not isinstance(persona, dict):
        return ""
    parts = [str(persona.get("summary") or "").strip()]
    traits = [str(t).strip() for t in persona.get("traits") or [] if str(t).strip()]
    if traits:
        parts.append(", ".join(traits))
    if str(persona.get("voice") or "").strip():
        parts.append(str(persona["voice"]).strip())
    return "; ".join(p.rstrip(".;。") for p in parts if p)


def character_of(blueprint: dict[str, Any]) -> dict[str, Any]:
    """The character.upsert payload a blueprint instantiates as."""
    instantiate = blueprint.get("instantiate") if isinstance(blueprint.get("instantiate"), dict) else {}
    fields = dict(blueprint.get("attributes") or {})
    persona = persona_line(blueprint.get("persona"))
    if persona:
        fields["persona"] = persona
    out: dict[str, Any] = {"id": str(instantiate.get("characterId") or blueprint["id"]), "name": blueprint["name"],
                           "type": str(instantiate.get("type") or blueprint.get("role") or "npc"), "fields": fields}
    if isinstance(blueprint.get("description"), str):
        out["description"] = blueprint["description"]
    aliases = [a for a in blueprint.get("aliases") or [] if isinstance(a, str) and a.strip()]
    if aliases:
        out["aliases"] = aliases
    return out


def handle(ctx) -> dict[str, Any]:
    payload = ctx.manual_payload or {}
    blueprint = payload.get("blueprint")
    if blueprint is None and isinstance(payload.get("blueprintJson"), str):
        try:
            blueprint = json.loads(payload["blueprintJson"])
        except ValueError as exc:
            return _failed(f"blueprintJson: not JSON ({exc.msg})")
    if not isinstance(blueprint, dict):
        return _failed("blueprint: an object {schemaVersion: 1, id, name, ...} is required")
    errors = sorted(_validator().iter_errors(blueprint), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "blueprint"
        return _failed(f"blueprint.{where}: {errors[0].message}")
    ctx.plugin_data.set(NAMESPACE, blueprint["id"], blueprint)
    out: dict[str, Any] = {"blueprint": {"id": blueprint["id"], "name": blueprint["name"]}}
    if payload.get("instantiate") is True or isinstance(blueprint.get("instantiate"), dict):
        character = character_of(blueprint)
        existing = next((c for c in ctx.world.characters() if c.get("id") == character["id"]), None)
        if existing and existing.get("version"):
            character["expectedVersion"] = existing["version"]
        out["character"] = {"id": character["id"], "name": character["name"], "type": character["type"]}
        out["proposals"] = [{"type": "character.upsert", "payload": character}]
    return out
