"""Characters as plugin code handles them (spec 000 §Character 管理工具): name matching, the world
schema's attribute checks and defaults. The builtin character tools use the same functions.
"""

from __future__ import annotations

import copy
import json
import math
import re
import unicodedata
from typing import Any

_INTERPUNCT_RE = re.compile(r"[\s·・‧•∙⋅]+")


def normalize_name(text: str) -> str:
    """Name comparison key: NFKC (full/half width), case-folded, no whitespace or interpuncts."""
    return _INTERPUNCT_RE.sub("", unicodedata.normalize("NFKC", text)).casefold()


def value_text(value: Any) -> str:
    """A field value as a model reads it in messages: text as is, else JSON, None as (unset)."""
    if value is None:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def character_attr_issues(attr: dict[str, Any], value: Any, path: str) -> list[str]:
    """Problems of ``value`` against one world-schema attribute ``{id, type, min?, max?, options?,
    itemType?, subSchema?, valueType?}`` (spec 004 §角色数据 characterSchema); [] when it fits.
    Messages name ``path``."""
    kind = attr.get("type")
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return [f"{path}: must be a finite number, not {value_text(value)}"]
        if attr.get("min") is not None and value < attr["min"]:
            return [f"{path}: {value} is below the minimum {attr['min']}"]
        if attr.get("max") is not None and value > attr["max"]:
            return [f"{path}: {value} is above the maximum {attr['max']}"]
        return []
    if kind == "string":
        return [] if isinstance(value, str) else [f"{path}: must be a string"]
    if kind == "boolean":
        return [] if isinstance(value, bool) else [f"{path}: must be true or false"]
    if kind == "enum":
        options = attr.get("options") or []
        if value not in options:
            return [f"{path}: must be one of {', '.join(map(str, options))}"]
        return []
    if kind == "array":
        if not isinstance(value, list):
            return [f"{path}: must be an array"]
        item = attr.get("itemType")
        issues = []
        for i, v in enumerate(value):
            if item == "string" and not isinstance(v, str):
                issues.append(f"{path}[{i}]: must be a string")
            if item == "number" and (isinstance(v, bool) or not isinstance(v, (int, float))):
                issues.append(f"{path}[{i}]: must be a number")
        return issues
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{path}: must be an object"]
        issues = []
        for sub in attr.get("subSchema") or []:
            if sub.get("id") in value:
                issues += character_attr_issues(sub, value[sub["id"]], f"{path}.{sub['id']}")
        return issues
    if kind == "map":
        if not isinstance(value, dict):
            return [f"{path}: must be an object map"]
        vt = {"string": str, "number": (int, float), "boolean": bool}.get(attr.get("valueType", ""))
        if vt is None:
            return []
        return [
            f"{path}.{k}: must be a {attr['valueType']}"
            for k, v in value.items()
            if not isinstance(v, vt) or (attr["valueType"] == "number" and isinstance(v, bool))
        ]
    return []


def merge_schema_defaults(fields: dict[str, Any], attributes: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill declared defaults that are missing; a default that breaks its own type is skipped."""
    merged = copy.deepcopy(fields)
    for attr in attributes:
        if not isinstance(attr, dict) or "id" not in attr or "defaultValue" not in attr:
            continue
        if attr["id"] in merged or character_attr_issues(attr, attr["defaultValue"], attr["id"]):
            continue
        merged[attr["id"]] = copy.deepcopy(attr["defaultValue"])
    return merged
