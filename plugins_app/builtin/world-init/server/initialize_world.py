"""initialize-world: the character attribute schema and the dimension declarations in one result
(spec 000 §initialize-world).

Stages, all or nothing: character.schema.set `{types, attributes}`, dimension.initialize
`{definitions, values}` and one plugin.data.batch keeping the private definitions (with update
rules) under `definitions/<id>`. Author-declared dimensions (input `worldDimensions`) win over
the model's `definitions`, silently. Generated bio defaults are neutralised.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema

from plugins_app.toolkit import (
    CHARACTER_SCHEMA_SET,
    DIMENSION_INITIALIZE,
    INVALID_INPUT,
    PLUGIN_DATA_BATCH,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    tool,
)

from .common import DEFINITIONS_NAMESPACE

NAME = "initialize-world"
MIN_ATTRIBUTES = 15
CATEGORIES = ("stats", "bio", "abilities", "equipment", "social")
ATTRIBUTE_TYPES = ("string", "number", "array", "enum", "boolean", "object", "map")
DEFAULT_TYPES = ["npc", "companion"]
DIMENSION_ID_RE = re.compile(r"^[a-z][a-zA-Z0-9_-]{0,63}$")
ATTRIBUTE_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

I18N_TEXT = {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": {"type": "string"}}]}

ATTRIBUTE_DEF: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "type", "category"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "name": I18N_TEXT,
        "type": {"enum": list(ATTRIBUTE_TYPES)},
        "category": {"enum": list(CATEGORIES)},
        "min": {"type": "number"},
        "max": {"type": "number"},
        "defaultValue": {},
        "itemType": {"enum": ["string", "number"]},
        "options": {"type": "array", "items": {"type": "string"}},
        "subSchema": {"type": "array", "items": {"$ref": "#/$defs/attribute"}},
        "valueType": {"enum": ["string", "number", "boolean"]},
        "description": I18N_TEXT,
    },
    "additionalProperties": False,
}

DIMENSION_DEF: dict[str, Any] = {
    "type": "object",
    "required": ["name", "schema", "initialValue"],
    "properties": {
        "name": I18N_TEXT,
        "description": I18N_TEXT,
        "schema": {"type": "object", "description": "JSON Schema of the value."},
        "initialValue": {},
        "updateRule": {**I18N_TEXT, "description": "How the value changes after each story turn."},
    },
}

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "$defs": {"attribute": ATTRIBUTE_DEF},
    "required": ["attributes"],
    "properties": {
        "types": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": DEFAULT_TYPES},
        "attributes": {
            "type": "array",
            "items": {"$ref": "#/$defs/attribute"},
            "description": "At least 15 attributes covering stats, bio, abilities, equipment and social.",
        },
        "definitions": {
            "type": "object",
            "additionalProperties": DIMENSION_DEF,
            "description": "World dimensions by id, only used when the world declares none.",
        },
    },
    "additionalProperties": False,
}

DESCRIPTION = (
    "Initialize the world once: the character attribute schema (types + at least 15 attributes covering "
    "stats/bio/abilities/equipment/social) and, for worlds without authored dimensions, dimension definitions."
)


def _attribute_issues(attrs: list[dict[str, Any]], path: str) -> list[str]:
    issues: list[str] = []
    seen: set[str] = set()
    for i, attr in enumerate(attrs):
        at = f"{path}[{i}]"
        attr_id = attr["id"]
        if not ATTRIBUTE_ID_RE.match(attr_id):
            issues.append(f"{at}.id: {attr_id!r} must start with a letter and use letters, digits or _")
        if attr_id in seen:
            issues.append(f"{at}.id: {attr_id!r} is used by another attribute")
        seen.add(attr_id)
        kind = attr["type"]
        default = attr.get("defaultValue")
        if kind == "enum":
            if not attr.get("options"):
                issues.append(f"{at}.options: an enum attribute needs options")
            elif "defaultValue" in attr and default not in attr["options"]:
                issues.append(f"{at}.defaultValue: {default!r} is not one of the options")
        if kind == "number":
            lo, hi = attr.get("min"), attr.get("max")
            if lo is not None and hi is not None and lo > hi:
                issues.append(f"{at}: min must not exceed max")
            if "defaultValue" in attr:
                if isinstance(default, bool) or not isinstance(default, (int, float)):
                    issues.append(f"{at}.defaultValue: a number attribute needs a number")
                elif (lo is not None and default < lo) or (hi is not None and default > hi):
                    issues.append(f"{at}.defaultValue: {default} is outside [min, max]")
        if kind == "object":
            issues += _attribute_issues(attr.get("subSchema") or [], f"{at}.subSchema")
        elif "subSchema" in attr:
            issues.append(f"{at}.subSchema: only object attributes take subSchema")
    return issues


def neutralize_bio_defaults(attr: dict[str, Any], *, in_bio: bool = False) -> dict[str, Any]:
    """Copy of a generated attribute with personal (bio) defaults cleared, recursively:
    strings → "", arrays → [], objects/maps → {}, enums lose their default; numbers and booleans
    keep theirs (spec 000: generated defaults are starting values, not an example person)."""
    out = copy.deepcopy(attr)
    bio = in_bio or out.get("category") == "bio"
    if bio:
        kind = out["type"]
        if kind == "string":
            out["defaultValue"] = ""
        elif kind == "array":
            out["defaultValue"] = []
        elif kind in ("object", "map"):
            out["defaultValue"] = {}
        elif kind == "enum":
            out.pop("defaultValue", None)
    if out.get("subSchema"):
        out["subSchema"] = [neutralize_bio_defaults(sub, in_bio=bio) for sub in out["subSchema"]]
    return out


def _definition_issues(definitions: dict[str, Any]) -> list[str]:
    issues: list[str] = []
    for dim_id, definition in definitions.items():
        at = f"definitions.{dim_id}"
        if not DIMENSION_ID_RE.match(dim_id):
            issues.append(f"{at}: the id must start with a lowercase letter and use letters, digits, - or _")
            continue
        try:
            jsonschema.Draft202012Validator.check_schema(definition["schema"])
        except jsonschema.SchemaError as exc:
            issues.append(f"{at}.schema: not a valid JSON Schema ({exc.message})")
            continue
        for err in jsonschema.Draft202012Validator(definition["schema"]).iter_errors(definition["initialValue"]):
            issues.append(f"{at}.initialValue: {err.message}")
            break
    return issues


def world_initialize_proposals(
    types: list[str], attributes: list[dict[str, Any]], definitions: dict[str, Any]
) -> list[Proposal]:
    """The three proposals of one initialization (also used by the schema-gen guard)."""
    proposals = [Proposal(CHARACTER_SCHEMA_SET, {"types": types, "attributes": attributes})]
    if definitions:
        public = {
            dim_id: {k: d[k] for k in ("name", "description", "schema") if k in d} for dim_id, d in definitions.items()
        }
        values = {dim_id: copy.deepcopy(d["initialValue"]) for dim_id, d in definitions.items()}
        proposals.append(Proposal(DIMENSION_INITIALIZE, {"definitions": public, "values": values}))
        proposals.append(
            Proposal(
                PLUGIN_DATA_BATCH,
                {
                    "entries": [
                        {"namespace": DEFINITIONS_NAMESPACE, "key": dim_id, "value": copy.deepcopy(d)}
                        for dim_id, d in definitions.items()
                    ]
                },
            )
        )
    return proposals


def initialized_summary(locale: str, attribute_count: int, dimension_count: int) -> str:
    """`World initialized: 15 attributes, 2 dimensions.` / `世界已初始化：15 项属性，2 个维度。`"""
    if instruction_locale_for(locale) == ZH_CN:
        return f"世界已初始化：{attribute_count} 项属性，{dimension_count} 个维度。"
    return f"World initialized: {attribute_count} attributes, {dimension_count} dimensions."


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    attributes = args["attributes"]
    issues: list[str] = []
    if len(attributes) < MIN_ATTRIBUTES:
        issues.append(f"attributes: {len(attributes)} given, at least {MIN_ATTRIBUTES} are needed")
    missing = [c for c in CATEGORIES if c not in {a["category"] for a in attributes}]
    if missing:
        issues.append(f"attributes: no attribute in categor{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}")
    issues += _attribute_issues(attributes, "attributes")
    types = []
    for t in args.get("types") or DEFAULT_TYPES:
        if t == "player":
            continue  # player is always a type; the schema lists the others
        if t not in types:
            types.append(t)
    authored = ((ctx.inputs.get("worldDimensions") or {}).get("value")) or {}
    existing = ctx.state.world_dimensions()
    if authored:
        definitions = copy.deepcopy(authored)
    elif existing:  # the world's own dimensions were imported already: they win, nothing to add
        definitions = {}
    else:
        definitions = copy.deepcopy(args.get("definitions") or {})
        issues += _definition_issues(definitions)
    if issues:
        raise ToolError(
            INVALID_INPUT,
            "Invalid arguments: " + "; ".join(issues),
            hint="Fix these fields and call initialize-world again.",
            details={"issues": issues},
        )
    attributes = [neutralize_bio_defaults(a) for a in attributes]
    schema = {"types": types or list(DEFAULT_TYPES), "attributes": attributes}
    content = {
        "success": True,
        "attributeCount": len(attributes),
        "dimensionCount": len(definitions) or len(existing),
        "worldSchema": schema,
        "preGameDone": True,
    }
    return ToolResult(
        content=content,
        proposals=world_initialize_proposals(schema["types"], attributes, definitions),
        summary=initialized_summary(ctx.locale, len(attributes), len(definitions) or len(existing)),
    )


def build() -> Tool:
    return tool(name=NAME, description=DESCRIPTION, parameters=PARAMETERS, execute=_execute)
