"""character.upsert (Character rows, ``character.upserted``) and character.schema.set
(CharacterSchema, ``character-schema.changed``). Spec 000 §character.upsert: with
``expectedVersion`` the ``fields`` are a shallow patch merged into the latest row and the
version increments from the live one, so parallel runtimes never lose each other's fields."""

from __future__ import annotations

import copy

from sessions.models import Character, CharacterSchema
from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import Proposal

CHARACTER_UPSERTED = "character.upserted"
CHARACTER_SCHEMA_CHANGED = "character-schema.changed"
TOPIC_CHARACTER = "character"


def character_json(c: Character) -> dict:
    return {"id": c.character_id, "name": c.name, "type": c.type, "aliases": list(c.aliases or []),
            "description": c.description, "fields": copy.deepcopy(c.fields or {}), "version": c.version}


def apply_character_upsert(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    row = Character.objects.select_for_update().filter(session=ctx.session, character_id=p["id"]).first()
    if row is None:
        row = Character.objects.create(
            session=ctx.session, character_id=p["id"], name=p["name"], type=p.get("type") or "npc",
            aliases=list(p.get("aliases") or []), description=p.get("description") or "",
            fields=copy.deepcopy(p.get("fields") or {}), version=int(p.get("version") or 1),
        )
    else:
        if isinstance(p.get("fields"), dict):
            if "expectedVersion" in p:
                merged = dict(row.fields or {})
                merged.update(copy.deepcopy(p["fields"]))
                row.fields = merged
            else:
                row.fields = copy.deepcopy(p["fields"])
        row.name = p.get("name") or row.name
        if p.get("type"):
            row.type = p["type"]
        if "aliases" in p:
            row.aliases = list(p["aliases"])
        if "description" in p:
            row.description = p["description"]
        row.version += 1
        row.save()
    ctx.event(CHARACTER_UPSERTED, TOPIC_CHARACTER, {"character": character_json(row), "pluginId": proposal.plugin_id})


def apply_character_schema_set(ctx: CommitContext, proposal: Proposal) -> None:
    schema = copy.deepcopy(proposal.payload)
    types = set(schema.get("types") or [])
    unknown = sorted({c.type for c in Character.objects.filter(session=ctx.session)} - types - {"player"})
    if unknown:
        raise ProposalRejected("proposal-invalid", f"character.schema.set: existing characters use unknown types {unknown}")
    row = CharacterSchema.objects.filter(session=ctx.session).first()
    version = int(((row.schema or {}).get("version") if row else 0) or 0) + 1
    schema["version"] = version
    if row is None:
        CharacterSchema.objects.create(session=ctx.session, schema=schema)
    else:
        row.schema = schema
        row.save()
    ctx.event(CHARACTER_SCHEMA_CHANGED, TOPIC_CHARACTER, {"schema": schema})
