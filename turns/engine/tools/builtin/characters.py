"""Character tools: list-characters, get-character, sync-characters (spec 000, Character 管理工具).

Characters belong to the session and every plugin sees them. sync-characters never writes:
it stages character.upsert proposals, all or nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from typing import Any

from plugins_app.toolkit.characters import character_attr_issues, merge_schema_defaults, normalize_name, value_text
from plugins_app.toolkit.ids import word_id

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.state import CharacterRecord
from plugins_app.toolkit.definition import READ_ONLY_SAFE, Tool, ToolResult, tool
from plugins_app.toolkit.errors import AMBIGUOUS, INVALID_INPUT, NOT_FOUND, ToolError
from plugins_app.toolkit.proposals import CHARACTER_UPSERT, Proposal

LIST_NAME = "list-characters"
GET_NAME = "get-character"
SYNC_NAME = "sync-characters"

LIST_LIMIT = 50
MAX_CREATES = 5
MAX_UPDATES = 10
MAX_KNOWN_NAMES = 30
PLAYER_TYPE = "player"
#: Character types when the world has no character schema yet.
DEFAULT_TYPES = ("npc", "companion")


# ---------------------------------------------------------------- names and lookup


def character_label(c: CharacterRecord) -> str:
    """`name (aka a, b)` as the model reads it."""
    return f"{c.name} (aka {', '.join(c.aliases)})" if c.aliases else c.name


def _names_of(c: CharacterRecord) -> list[str]:
    return [normalize_name(c.name)] + [normalize_name(a) for a in c.aliases]


def resolve_character(
    characters: list[CharacterRecord], query: str, *, partial: bool = False
) -> tuple[CharacterRecord | None, list[CharacterRecord]]:
    """Find one character by id, then name, then alias (resolveCharacter).

    Returns (match, []) when exactly one matches, (None, candidates) when several match at the
    first level that has any, (None, []) when none. partial (read tools only): without an
    exact hit, a single character whose name/alias contains the query or is contained in it.
    """
    by_id = [c for c in characters if c.id == query]
    if by_id:
        return by_id[0], []
    key = normalize_name(query)
    if not key:
        return None, []
    for level in (
        [c for c in characters if normalize_name(c.name) == key],
        [c for c in characters if key in [normalize_name(a) for a in c.aliases]],
    ):
        if len(level) == 1:
            return level[0], []
        if level:
            return None, level
    if partial:
        hits = [c for c in characters if any(n and (key in n or n in key) for n in _names_of(c))]
        if len(hits) == 1:
            return hits[0], []
        if hits:
            return None, hits
    return None, []


def _closest(characters: list[CharacterRecord], query: str) -> list[CharacterRecord]:
    key = normalize_name(query)
    scored = []
    for c in characters:
        best = max(difflib.SequenceMatcher(None, key, n).ratio() for n in _names_of(c))
        if best >= 0.5:
            scored.append((-best, c.name, c))
    return [c for _, _, c in sorted(scored, key=lambda t: (t[0], t[1]))][:5]


def not_found_message(characters: list[CharacterRecord], query: str, *, suffix: str = "") -> str:
    close = _closest(characters, query)
    if close:
        names = "; ".join(character_label(c) for c in close)
        text = f'Character "{query}" not found. Closest known names: {names}. If it is one of them, use that name.'
    elif characters:
        names = "; ".join(character_label(c) for c in characters[:MAX_KNOWN_NAMES])
        text = f'Character "{query}" not found. Characters in this session: {names}.'
    else:
        text = f'Character "{query}" not found. This session has no characters yet.'
    return text + suffix


def ambiguous_message(query: str, candidates: list[CharacterRecord], *, suffix: str = "") -> str:
    listed = "; ".join(f"{c.name} [{c.id}]" for c in candidates)
    return f'"{query}" names {len(candidates)} characters: {listed}. Pass the id of the one you mean.{suffix}'


# ---------------------------------------------------------------- schema checks


def character_fields_check(
    fields: dict[str, Any], attributes: list[dict[str, Any]], *, path: str
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for declared fields; undeclared keys are kept with a warning.

    Without a world schema (no attributes) nothing is checked and nothing is warned.
    """
    if not attributes:
        return [], []
    declared = {a["id"]: a for a in attributes if isinstance(a, dict) and "id" in a}
    errors: list[str] = []
    warnings: list[str] = []
    for key, value in fields.items():
        if key in declared:
            errors += character_attr_issues(declared[key], value, f"{path}.{key}")
        else:
            warnings.append(f"{path}.{key} is not declared in the world schema; kept as is.")
    return errors, warnings


# ---------------------------------------------------------------- list-characters


def _ordered(characters: list[CharacterRecord]) -> list[CharacterRecord]:
    by_recency = sorted(characters, key=lambda c: c.updated_at or "", reverse=True)
    return sorted(by_recency, key=lambda c: -c.version)


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _list_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    everyone = ctx.state.characters()
    wanted = args.get("type")
    matching = [c for c in everyone if wanted is None or c.type == wanted]
    ordered = _ordered(matching)
    listed = ordered[:LIST_LIMIT]
    content = {"count": len(matching), "characters": [c.snapshot() for c in listed]}
    if not matching:
        if everyone:
            types = ", ".join(sorted({c.type for c in everyone}))
            summary = f'No characters of type "{wanted}". Types in this session: {types}.'
        else:
            summary = "No characters in this session yet."
        return ToolResult(content=content, summary=summary)
    lines = [f"Characters in session ({len(matching)} total, sorted by frequency then recency):"]
    for i, c in enumerate(listed, 1):
        line = f"{i}. {character_label(c)} [{c.type}] {c.id} (v{c.version})"
        if c.description:
            line += f" — {_short(c.description)}"
        lines.append(line)
    if len(matching) > LIST_LIMIT:
        lines.append(
            f"… {len(matching) - LIST_LIMIT} more not listed. Filter by type, "
            "or look one up by name with get-character."
        )
    return ToolResult(content=content, summary="\n".join(lines))


# ---------------------------------------------------------------- get-character


def _get_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    query = args.get("id") or args.get("name")
    if not query:
        raise ToolError(INVALID_INPUT, "Pass either id or name.", hint="Fix these fields and call the tool again.")
    characters = ctx.state.characters()
    match, candidates = resolve_character(characters, query, partial=True)
    if match is None and candidates:
        raise ToolError(AMBIGUOUS, ambiguous_message(query, candidates))
    if match is None:
        raise ToolError(NOT_FOUND, not_found_message(characters, query))
    lines = [f"Character: {match.name} [{match.type}] {match.id}"]
    if match.aliases:
        lines.append(f"Aliases: {', '.join(match.aliases)}")
    if match.description:
        lines.append(f"Description: {match.description}")
    lines.append(f"Version: {match.version}")
    lines.append("")
    if match.fields:
        lines.append("Attributes:")
        lines += [f"  {k}: {value_text(v)}" for k, v in match.fields.items()]
    else:
        lines.append("Attributes: (none)")
    return ToolResult(content={"character": match.snapshot()}, summary="\n".join(lines))


# ---------------------------------------------------------------- sync-characters

_CREATE_SCHEMA = {
    "type": "object",
    "required": ["name", "type"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "aliases": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "type": {"type": "string", "minLength": 1, "description": "player, or a type of the world schema."},
        "description": {"type": "string"},
        "fields": {"type": "object", "description": "Attribute values (world schema character-attributes)."},
    },
    "additionalProperties": False,
}
_UPDATE_SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "minLength": 1, "description": "Character id; its name or alias also works."},
        "aliases": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "removeAliases": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "description": {"type": "string"},
        "fields": {"type": "object", "description": "Fields to merge; numbers are new absolute values."},
    },
    "additionalProperties": False,
}
SYNC_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "creates": {"type": "array", "maxItems": MAX_CREATES, "items": _CREATE_SCHEMA, "default": []},
        "updates": {"type": "array", "maxItems": MAX_UPDATES, "items": _UPDATE_SCHEMA, "default": []},
    },
    "additionalProperties": False,
}


#: Characters of an attribute description in the model-facing schema.
ATTRIBUTE_DESCRIPTION_CHARS = 160


def attribute_json_schema(attr: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of one world-schema attribute (spec 004 §角色数据 characterSchema):
    number → number with minimum/maximum, string, boolean, enum → its options, array of
    itemType, object of subSchema, map of valueType. The description names the attribute."""
    kind = attr.get("type")
    out: dict[str, Any]
    if kind == "number":
        out = {"type": "number"}
        if isinstance(attr.get("min"), (int, float)):
            out["minimum"] = attr["min"]
        if isinstance(attr.get("max"), (int, float)):
            out["maximum"] = attr["max"]
    elif kind == "enum":
        out = {"enum": [o for o in attr.get("options") or [] if isinstance(o, (str, int, float))]}
    elif kind in ("string", "boolean"):
        out = {"type": kind}
    elif kind == "array":
        out = {"type": "array"}
        if attr.get("itemType") in ("string", "number", "boolean"):
            out["items"] = {"type": attr["itemType"]}
    elif kind == "object":
        subs = [s for s in attr.get("subSchema") or [] if isinstance(s, dict) and isinstance(s.get("id"), str)]
        out = {"type": "object", "properties": {s["id"]: attribute_json_schema(s) for s in subs}}
    elif kind == "map":
        out = {"type": "object"}
        if attr.get("valueType") in ("string", "number", "boolean"):
            out["additionalProperties"] = {"type": attr["valueType"]}
    else:
        out = {}
    label = " — ".join(str(x) for x in (attr.get("name"), attr.get("description")) if x)
    if label:
        out["description"] = label[:ATTRIBUTE_DESCRIPTION_CHARS]
    return out


def sync_parameters_for(character_schema: dict[str, Any] | None) -> dict[str, Any]:
    """sync-characters' parameters for one session: ``creates[].type`` is the enum of ``player`` plus
    the world schema's types (DEFAULT_TYPES without a schema) and both ``fields`` objects list the
    schema's attributes with their constraints (unknown keys stay allowed: the tool warns)."""
    schema = character_schema or {}
    parameters = copy.deepcopy(SYNC_PARAMETERS)
    types = [PLAYER_TYPE] + [t for t in (schema.get("types") or DEFAULT_TYPES) if isinstance(t, str) and t != PLAYER_TYPE]
    create = parameters["properties"]["creates"]["items"]["properties"]
    create["type"] = {"enum": types, "description": "npc for most people; player only for the player's own hero."}
    attributes = [a for a in schema.get("attributes") or [] if isinstance(a, dict) and isinstance(a.get("id"), str)]
    if attributes:
        properties = {a["id"]: attribute_json_schema(a) for a in attributes}
        for item in ("creates", "updates"):
            fields = parameters["properties"][item]["items"]["properties"]["fields"]
            fields["properties"] = copy.deepcopy(properties)
    return parameters


def _alias_owner(working: dict[str, CharacterRecord], alias: str, exclude: str | None) -> CharacterRecord | None:
    key = normalize_name(alias)
    for c in working.values():
        if c.id != exclude and key in _names_of(c):
            return c
    return None


def _sync_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    working: dict[str, CharacterRecord] = {c.id: c for c in ctx.state.characters()}
    schema = ctx.state.character_schema() or {}
    attributes = schema.get("attributes") or []
    allowed_types = [PLAYER_TYPE] + [t for t in (schema.get("types") or DEFAULT_TYPES) if t != PLAYER_TYPE]
    created: list[dict[str, Any]] = []
    unchanged: list[dict[str, Any]] = []
    updated: list[dict[str, Any]] = []
    warnings: list[str] = []
    lines: list[str] = []
    proposals: list[Proposal] = []

    for i, item in enumerate(args.get("creates") or []):
        at = f"creates[{i}]"
        name, kind = item["name"].strip(), item["type"]
        if kind not in allowed_types:
            raise ToolError(INVALID_INPUT, f'{at}: unknown type "{kind}"; use one of: {", ".join(allowed_types)}.')
        key = normalize_name(name)
        same = [c for c in working.values() if normalize_name(c.name) == key and c.type == kind]
        alias_hit = [c for c in working.values() if key in [normalize_name(a) for a in c.aliases]]
        if kind == PLAYER_TYPE and not same:
            clash = [c for c in working.values() if key in _names_of(c)]
            if clash:
                c = clash[0]
                raise ToolError(
                    INVALID_INPUT,
                    f'{at}: "{name}" is already a name of {character_label(c)} [{c.id}]. The player cannot be an '
                    "existing character; ask the player for another name. Nothing was created.",
                )
        existing = same[0] if same else (alias_hit[0] if alias_hit else None)
        if existing is not None:
            unchanged.append({"characterId": existing.id, "name": existing.name, "type": existing.type})
            lines.append(
                f'Character "{existing.name}" ({existing.type}) already exists as {existing.id}. '
                "No new record created. Use sync-characters updates to modify it."
            )
            continue
        aliases: list[str] = []
        for alias in item.get("aliases") or []:
            alias = alias.strip()
            if normalize_name(alias) == key or normalize_name(alias) in map(normalize_name, aliases):
                continue
            owner = _alias_owner(working, alias, None)
            if owner is not None:
                raise ToolError(
                    INVALID_INPUT,
                    f'{at}: "{alias}" is already a name of {character_label(owner)} [{owner.id}]. '
                    f"If {name} is that person, update {owner.id} and create nothing. "
                    f"If the alias is wrong for {owner.name}, remove it there first: update {owner.id} "
                    "with removeAliases. Otherwise leave this alias out.",
                )
            aliases.append(alias)
        fields = merge_schema_defaults(item.get("fields") or {}, attributes)
        errors, warns = character_fields_check(fields, attributes, path=f"{at}.fields")
        if errors:
            raise ToolError(INVALID_INPUT, "; ".join(errors), hint="Fix these fields and submit the whole batch again.")
        warnings += warns
        new_id = word_id(kind, name, set(working))
        record = CharacterRecord(
            id=new_id,
            name=name,
            type=kind,
            aliases=tuple(aliases),
            description=item.get("description", ""),
            fields=fields,
            version=1,
        )
        working[new_id] = record
        payload: dict[str, Any] = {"id": new_id, "name": name, "type": kind, "fields": fields, "version": 1}
        if aliases:
            payload["aliases"] = aliases
        if record.description:
            payload["description"] = record.description
        proposals.append(Proposal(CHARACTER_UPSERT, payload))
        created.append({"characterId": new_id, "name": name, "type": kind})
        line = f'Created {kind} "{name}" as {new_id}.'
        if record.description:
            line += f" — {record.description}"
        lines.append(line)

    for i, item in enumerate(args.get("updates") or []):
        at = f"updates[{i}]"
        chars = list(working.values())
        target, candidates = resolve_character(chars, item["id"])
        if target is None and candidates:
            raise ToolError(AMBIGUOUS, f"{at}: " + ambiguous_message(item["id"], candidates, suffix=" Nothing was updated."))
        if target is None:
            raise ToolError(NOT_FOUND, f"{at}: " + not_found_message(chars, item["id"], suffix=" Nothing was updated."))
        removing = {normalize_name(a) for a in item.get("removeAliases") or []}
        aliases = [a for a in target.aliases if normalize_name(a) not in removing]
        for alias in item.get("aliases") or []:
            alias = alias.strip()
            key = normalize_name(alias)
            if key == normalize_name(target.name) or key in map(normalize_name, aliases):
                continue
            owner = _alias_owner(working, alias, target.id)
            if owner is not None:
                raise ToolError(
                    INVALID_INPUT,
                    f'{at}: "{alias}" is already a name of {character_label(owner)} [{owner.id}]. '
                    f"Remove it there first with removeAliases, or leave this alias out. Nothing was updated.",
                )
            aliases.append(alias)
        patch = item.get("fields") or {}
        errors, warns = character_fields_check(patch, attributes, path=f"{at}.fields")
        if errors:
            raise ToolError(INVALID_INPUT, "; ".join(errors), hint="Fix these fields and submit the whole batch again.")
        warnings += warns
        new_fields = dict(target.fields)
        new_fields.update(copy.deepcopy(patch))
        description = item.get("description", target.description)
        new_version = target.version + 1
        working[target.id] = dataclasses.replace(
            target, aliases=tuple(aliases), fields=new_fields, description=description, version=new_version
        )
        payload = {
            "id": target.id,
            "name": target.name,
            "type": target.type,
            "aliases": aliases,
            "fields": copy.deepcopy(patch),
            "version": new_version,
            "expectedVersion": target.version,
        }
        if "description" in item:
            payload["description"] = item["description"]
        proposals.append(Proposal(CHARACTER_UPSERT, payload))
        updated.append({"characterId": target.id, "version": new_version})
        lines.append(f'Updated {target.type} "{target.name}" ({target.id}) → v{new_version}.')
        for k, v in patch.items():
            lines.append(f"  {k}: {value_text(target.fields.get(k))} → {value_text(v)}")
        added = [a for a in aliases if a not in target.aliases]
        removed = [a for a in target.aliases if a not in aliases]
        if added or removed:
            lines.append("  aliases: " + ", ".join([f"+{a}" for a in added] + [f"-{a}" for a in removed]))
        if "description" in item and item["description"] != target.description:
            lines.append(f"  description: {_short(item['description'])}")

    if not lines:
        lines.append("No character changes recorded.")
    lines += [f"Warning: {w}" for w in warnings]
    content: dict[str, Any] = {"created": created, "updated": updated, "unchanged": unchanged}
    if warnings:
        content["warnings"] = warnings
    return ToolResult(content=content, proposals=proposals, summary="\n".join(lines))


def build_list() -> Tool:
    return tool(
        name=LIST_NAME,
        description=(
            "List this session's characters (id, name, aliases, type, version, short description), "
            "most active first, up to 50. Use get-character for full attributes."
        ),
        parameters={
            "type": "object",
            "properties": {"type": {"type": "string", "minLength": 1, "description": "Only this character type."}},
            "additionalProperties": False,
        },
        annotations=READ_ONLY_SAFE,
        execute=_list_execute,
    )


def build_get() -> Tool:
    return tool(
        name=GET_NAME,
        description="Read one character's full record by id, name or alias (a partial name works). Pass id or name.",
        parameters={
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "name": {"type": "string", "minLength": 1, "description": "Name or alias; part of it is enough."},
            },
            "additionalProperties": False,
        },
        annotations=READ_ONLY_SAFE,
        execute=_get_execute,
    )


def build_sync() -> Tool:
    return tool(
        name=SYNC_NAME,
        description=(
            "Create new characters (≤5) and update existing ones (≤10) in one all-or-nothing batch. "
            "An empty batch records that nothing changed."
        ),
        parameters=SYNC_PARAMETERS,
        execute=_sync_execute,
    )
