"""World dimension definitions: validation, import and export (spec 004 dimensions/import|export).

A dimension definition is `{name, description?, schema, initialValue, updateRule?}` keyed by
dimension id (upstream docs/reference/schema/world-dimensions.md). `schema` uses a JSON Schema
subset; any other keyword is rejected. `initialValue` must satisfy `schema` as written: values are
never coerced and defaults are never filled in.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from plugins_app.validation import Issue, error

DIMENSION_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
DEFINITION_KEYS = {"name", "description", "schema", "initialValue", "updateRule"}
SCHEMA_KEYWORDS = {
    "type", "title", "description", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "items", "minItems", "maxItems", "properties",
    "required", "additionalProperties", "x-i18n", "x-enumLabels",
}
# Annotation keywords authors may write as a locale map ({"zh-CN": "记录", "en-US": "Notes"}).
TEXT_ANNOTATIONS = ("title", "description")
JSON_TYPES = {"string", "number", "integer", "boolean", "null", "object", "array"}
MAX_DIMENSIONS = 64

CODE_DIMENSION_INVALID = "dimension-invalid"
CODE_SCHEMA_KEYWORD = "schema-unknown-keyword"
CODE_SCHEMA_INVALID = "schema-invalid"
CODE_INITIAL_VALUE_INVALID = "initial-value-invalid"


def _is_text(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and bool(value) and all(isinstance(v, str) for v in value.values()))


def _schema_check(node: Any, path: str, file: str | None, issues: list[Issue]) -> None:
    if not isinstance(node, dict):
        issues.append(error(CODE_SCHEMA_INVALID, "a schema node must be an object", file, path))
        return
    for key, value in node.items():
        kpath = f"{path}.{key}"
        if key not in SCHEMA_KEYWORDS:
            issues.append(error(CODE_SCHEMA_KEYWORD, f"unsupported JSON Schema keyword {key!r}", file, kpath))
            continue
        if key == "type":
            types = value if isinstance(value, list) else [value]
            if not types or any(t not in JSON_TYPES for t in types):
                issues.append(error(CODE_SCHEMA_INVALID, f"invalid type {value!r}", file, kpath))
        elif key in ("items",):
            _schema_check(value, kpath, file, issues)
        elif key == "properties":
            if not isinstance(value, dict):
                issues.append(error(CODE_SCHEMA_INVALID, "properties must be an object", file, kpath))
            else:
                for prop, sub in value.items():
                    _schema_check(sub, f"{kpath}.{prop}", file, issues)
        elif key == "additionalProperties":
            if not isinstance(value, bool):
                _schema_check(value, kpath, file, issues)
        elif key == "required":
            props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                issues.append(error(CODE_SCHEMA_INVALID, "required must be a list of strings", file, kpath))
            else:
                for name in value:
                    if name not in props:
                        issues.append(error(CODE_SCHEMA_INVALID, f"required property {name!r} is not declared in properties", file, kpath))
        elif key in TEXT_ANNOTATIONS and not _is_text(value):
            issues.append(error(CODE_SCHEMA_INVALID, f"{key} must be a string or a locale map", file, kpath))
        elif key == "x-enumLabels" and not (isinstance(value, dict) and all(_is_text(v) for v in value.values())):
            issues.append(error(CODE_SCHEMA_INVALID, "x-enumLabels must map enum values to text", file, kpath))
        elif key == "x-i18n" and not isinstance(value, bool):
            issues.append(error(CODE_SCHEMA_INVALID, "x-i18n must be a boolean", file, kpath))
        elif key == "enum" and not isinstance(value, list):
            issues.append(error(CODE_SCHEMA_INVALID, "enum must be a list", file, kpath))
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and (isinstance(value, bool) or not isinstance(value, (int, float))):
            issues.append(error(CODE_SCHEMA_INVALID, f"{key} must be a number", file, kpath))
        elif key in ("minLength", "maxLength", "minItems", "maxItems") and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            issues.append(error(CODE_SCHEMA_INVALID, f"{key} must be a non-negative integer", file, kpath))


def validation_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema jsonschema checks values against: x-i18n nodes also accept a locale map.

    `x-*` keywords are dropped and locale-map annotations (`title` / `description` written as
    `{locale: text}`) are left out, so Draft202012Validator.check_schema only sees JSON Schema
    (annotations never change which values are valid)."""
    node = {k: v for k, v in schema.items()
            if not k.startswith("x-") and not (k in TEXT_ANNOTATIONS and not isinstance(v, str))}
    if isinstance(node.get("items"), dict):
        node["items"] = validation_schema(node["items"])
    if isinstance(node.get("properties"), dict):
        node["properties"] = {k: validation_schema(v) if isinstance(v, dict) else v for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = validation_schema(node["additionalProperties"])
    if schema.get("x-i18n") is True:
        return {"anyOf": [node, {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}]}
    return node


def value_errors(schema: dict[str, Any], value: Any, *, limit: int = 3) -> list[str]:
    """Messages for `value` against a dimension schema (no coercion); [] when valid."""
    validator = Draft202012Validator(validation_schema(schema))
    out = []
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        where = "/" + "/".join(str(p) for p in err.absolute_path)
        out.append(f"{where}: {err.message}")
        if len(out) >= limit:
            break
    return out


@functools.lru_cache(maxsize=1024)
def _schema_error(schema_json: str) -> str | None:
    """The meta-schema error of a dimension schema (its canonical JSON), or None when it is valid.

    Memoized: check_schema validates against the 2020-12 meta-schema (~10 ms each), and the same
    few schemas come back with every load of a world package and every dimensions import."""
    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except SchemaError as exc:
        return exc.message
    return None


def _schema_error_of(schema: dict[str, Any]) -> str | None:
    try:
        key = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):  # a YAML value JSON has no form for (a date ...): not memoized
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return exc.message
        return None
    return _schema_error(key)


def dimension_definition_validate(dim_id: str, definition: Any, *, file: str | None = None, field_prefix: str = "") -> list[Issue]:
    """Validate one definition; returns issues (errors only). field paths are `<prefix><id>.<key>`."""
    base = f"{field_prefix}{dim_id}"
    issues: list[Issue] = []
    if not DIMENSION_ID_RE.match(dim_id):
        issues.append(error(CODE_DIMENSION_INVALID, "dimension ids start with a letter (letters, digits, _ and -, at most 64)", file, base))
    if not isinstance(definition, dict):
        return issues + [error(CODE_DIMENSION_INVALID, "a dimension definition must be an object", file, base)]
    for key in definition:
        if key not in DEFINITION_KEYS:
            issues.append(error(CODE_DIMENSION_INVALID, f"unknown definition field {key!r}", file, f"{base}.{key}"))
    for key in ("name", "schema", "initialValue"):
        if key not in definition:
            issues.append(error(CODE_DIMENSION_INVALID, f"{key} is required", file, f"{base}.{key}"))
    for key in ("name", "description", "updateRule"):
        if key in definition and not _is_text(definition[key]):
            issues.append(error(CODE_DIMENSION_INVALID, f"{key} must be a string or a locale map", file, f"{base}.{key}"))
    schema = definition.get("schema")
    if "schema" in definition:
        schema_issues: list[Issue] = []
        _schema_check(schema, f"{base}.schema", file, schema_issues)
        if not schema_issues:
            message = _schema_error_of(validation_schema(schema))
            if message is not None:
                schema_issues.append(error(CODE_SCHEMA_INVALID, message, file, f"{base}.schema"))
        issues.extend(schema_issues)
        if not schema_issues and "initialValue" in definition:
            for message in value_errors(schema, definition["initialValue"]):
                issues.append(error(CODE_INITIAL_VALUE_INVALID, f"initialValue does not match schema at {message}", file, f"{base}.initialValue"))
    return issues


def dimensions_validate(dimensions: Any, *, file: str | None = None, field_prefix: str = "dimensions.") -> list[Issue]:
    """Validate a `{id: definition}` map (POST /api/worlds/:id/dimensions/import, PATCH, packages)."""
    if not isinstance(dimensions, dict):
        return [error(CODE_DIMENSION_INVALID, "dimensions must be an object keyed by dimension id", file, field_prefix.rstrip("."))]
    issues: list[Issue] = []
    if len(dimensions) > MAX_DIMENSIONS:
        issues.append(error(CODE_DIMENSION_INVALID, f"at most {MAX_DIMENSIONS} dimensions", file, field_prefix.rstrip(".")))
    for dim_id, definition in dimensions.items():
        issues.extend(dimension_definition_validate(str(dim_id), definition, file=file, field_prefix=field_prefix))
    return issues


def dimensions_import(payload: Any) -> tuple[dict[str, Any] | None, list[Issue]]:
    """Validate an import body `{dimensions: {...}}`.

    Returns (dimensions to store, []) or (None, issues). A body without an object `dimensions`
    yields an issue with code "invalid-request" (the endpoint maps it to 400); every other
    failure is a definition/schema/initialValue issue (422). The stored value is a deep copy of the
    input: nothing is coerced or defaulted.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("dimensions"), dict):
        return None, [error("invalid-request", "body must contain an object `dimensions`", None, "dimensions")]
    issues = dimensions_validate(payload["dimensions"])
    if issues:
        return None, issues
    return copy.deepcopy(payload["dimensions"]), []


def dimensions_export(dimensions: dict[str, Any], fmt: str = "yaml") -> tuple[str, str]:
    """Serialize definitions. fmt: "yaml" | "json". Returns (text, content type). Raises ValueError."""
    if fmt == "json":
        return json.dumps(dimensions, ensure_ascii=False, indent=2) + "\n", "application/json"
    if fmt == "yaml":
        return yaml.safe_dump(dimensions, allow_unicode=True, sort_keys=False), "application/yaml"
    raise ValueError("format must be yaml or json")


def legacy_dimension_convert(dim_id: str, value: Any) -> dict[str, Any]:
    """Old upstream worlds store a static setting block (no name/schema) under a dimension id.
    Wrap it as a static definition: name = id, schema = the JSON type of the value, no updateRule."""
    json_type = (
        "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "boolean" if isinstance(value, bool)
        else "number" if isinstance(value, (int, float)) else "null" if value is None else "string"
    )
    return {"name": dim_id, "schema": {"type": json_type}, "initialValue": value}


def is_definition(value: Any) -> bool:
    return isinstance(value, dict) and "schema" in value and ("name" in value or "initialValue" in value)
