"""FormField: the field object shared by create-form and suspend (spec 000, create-form, suspend)."""

from __future__ import annotations

import math
import re
from typing import Any

from plugins_app.toolkit.errors import ToolValidationError

FIELD_TYPES = ("text", "textarea", "select", "checkbox", "number")
#: Base action kinds (spec 004, 行动类型目录); plugin kinds are `<pluginId>/<name>`.
BASE_ACTION_KINDS = ("say", "act", "narrate", "direct", "advance", "command")
_PLUGIN_ACTION_KIND_RE = re.compile(r"^[a-z0-9][a-z0-9-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

OPTION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "object",
            "required": ["value", "label"],
            "properties": {"value": {"type": "string"}, "label": {"type": "string"}},
            "additionalProperties": False,
        },
    ]
}

FORM_FIELD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "name", "label"],
    "properties": {
        "type": {"enum": list(FIELD_TYPES)},
        "name": {"type": "string", "minLength": 1, "description": "Field identifier (not `id`)."},
        "label": {"type": "string"},
        "placeholder": {"type": "string"},
        "options": {"type": "array", "items": OPTION_SCHEMA},
        "required": {"type": "boolean"},
        "defaultValue": {"type": ["string", "number", "boolean"]},
        "min": {"type": "number"},
        "max": {"type": "number"},
        "step": {"type": "number", "exclusiveMinimum": 0},
    },
    "additionalProperties": False,
}

ACTION_KIND_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": "Action kind of the answer: say, act, narrate, direct, advance, command or <pluginId>/<name>.",
}


def option_values(field: dict[str, Any]) -> list[str]:
    return [o if isinstance(o, str) else o["value"] for o in field.get("options") or []]


def form_fields_check(fields: list[dict[str, Any]], *, path: str = "fields") -> list[str]:
    """Issues of a FormField list beyond its JSON Schema (names, defaults, ranges).

    Returns messages like `fields[1].defaultValue: ...`; empty when the list is valid.
    """
    issues: list[str] = []
    seen: set[str] = set()
    for i, field in enumerate(fields):
        at = f"{path}[{i}]"
        name = field["name"]
        if not name.strip():
            issues.append(f"{at}.name: must not be blank")
        elif name in seen:
            issues.append(f'{at}.name: "{name}" is used by another field')
        seen.add(name)
        kind = field["type"]
        has_default = "defaultValue" in field
        default = field.get("defaultValue")
        if kind == "number":
            if has_default and (isinstance(default, bool) or not isinstance(default, (int, float))):
                issues.append(f"{at}.defaultValue: a number field needs a number, not {default!r}")
            elif has_default and not math.isfinite(default):
                issues.append(f"{at}.defaultValue: must be a finite number")
            lo, hi = field.get("min"), field.get("max")
            if lo is not None and hi is not None and lo > hi:
                issues.append(f"{at}: min must not exceed max")
            elif has_default and isinstance(default, (int, float)) and not isinstance(default, bool):
                if (lo is not None and default < lo) or (hi is not None and default > hi):
                    issues.append(f"{at}.defaultValue: {default} is outside [min, max]")
        elif kind == "checkbox":
            if has_default and not isinstance(default, bool):
                issues.append(f"{at}.defaultValue: a checkbox field needs true or false, not {default!r}")
        else:
            if has_default and not isinstance(default, str):
                issues.append(f"{at}.defaultValue: a {kind} field needs a string")
            if kind == "select":
                values = option_values(field)
                if not values:
                    issues.append(f"{at}.options: a select field needs at least one option")
                elif has_default and default not in values:
                    issues.append(f"{at}.defaultValue: {default!r} is not one of the options")
        if kind != "number":
            for key in ("min", "max", "step"):
                if key in field:
                    issues.append(f"{at}.{key}: only number fields take {key}")
    return issues


def action_kind_check(action_kind: str, *, path: str = "actionKind") -> list[str]:
    if action_kind in BASE_ACTION_KINDS or _PLUGIN_ACTION_KIND_RE.match(action_kind):
        return []
    return [
        f"{path}: {action_kind!r} is not an action kind; use one of {', '.join(BASE_ACTION_KINDS)} "
        "or <pluginId>/<name>"
    ]


def raise_issues(issues: list[str]) -> None:
    """Raise ToolValidationError listing every issue (no-op when empty)."""
    if issues:
        raise ToolValidationError(
            "Invalid arguments: " + "; ".join(issues),
            hint="Fix these fields and call the tool again.",
            details={"issues": issues},
        )
