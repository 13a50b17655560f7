"""create-character-form: the opening character form (spec 000, 角色创建表单 / 开场角色表单).

Only a required `characterName` plus the world schema's string/enum attributes can be collected;
numeric and compound attributes keep their defaults. Field, template and default checks fail with
invalid-input before any form is shown: every rejected field is listed with its reason together
with the attributes this world can collect. Defaults that repeat the word at a placeholder
boundary, or that are explicit "undecided" placeholders, are rejected with a preview.
The tool always attaches the `player-name` validator; a `validation` argument is dropped.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from plugins_app.toolkit import (
    FORM_FIELD_SCHEMA,
    INVALID_INPUT,
    ZH_CN,
    CallContext,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    option_values,
    tool,
)

from .player_name import NAME_FIELD, VALIDATOR_NAME, validation_data

NAME = "create-character-form"
DEFAULT_FORM_ID = "char-creation"
COLLECTABLE_TYPES = ("string", "enum")
_PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z0-9_\-\u4e00-\u9fff]+)\s*\}\}")
_CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'’-]*")
#: Explicit "not decided" placeholder values (compared trimmed and case-folded).
UNDECIDED_VALUES = frozenset(
    {
        "未定", "待定", "未知", "不详", "暂定", "未填写", "待填写", "未决定", "待补充", "？", "?", "??", "???",
        "tbd", "tba", "unknown", "undecided", "undetermined", "to be decided", "to be determined",
        "n/a", "not decided", "not set", "none yet",
    }
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["title", "fields", "submitLabel", "narrativeTemplate"],
    "properties": {
        "formId": {"type": "string", "minLength": 1, "default": DEFAULT_FORM_ID},
        "title": {"type": "string", "minLength": 1},
        "fields": {
            "type": "array",
            "minItems": 1,
            "items": FORM_FIELD_SCHEMA,
            "description": (
                "A required text field named characterName, plus at most 3 string/enum world attributes "
                "(field name = attribute id; enum → select with the schema's option values)."
            ),
        },
        "submitLabel": {"type": "string", "minLength": 1},
        "narrativeTemplate": {
            "type": "string",
            "minLength": 1,
            "description": "The arrival sentence with {{characterName}} and the other fields' placeholders.",
        },
        "submitBehavior": {
            "type": "object",
            "properties": {"echoFilledNarrative": {"type": "boolean"}, "immediate": {"type": "boolean"}},
        },
        "notice": {"type": "string"},
    },
}


def fill_narrative_template(template: str, values: dict[str, Any]) -> str:
    """fillNarrativeTemplate: `{{name}}` → value ("" when missing); a `.`/`。` right after a
    placeholder is dropped when the value already ends with it."""

    def replace(match: re.Match[str]) -> str:
        value = values.get(match.group(1))
        return "" if value is None else str(value)

    out: list[str] = []
    pos = 0
    for match in _PLACEHOLDER_RE.finditer(template):
        out.append(template[pos : match.start()])
        value = replace(match)
        out.append(value)
        pos = match.end()
        if value and pos < len(template) and template[pos] in ".。" and value.endswith(template[pos]):
            pos += 1
    out.append(template[pos:])
    return "".join(out)


def _boundary_repeat(before: str, value: str, after: str) -> str | None:
    """The word repeated across a placeholder boundary, or None."""
    value = value.strip()
    if not value:
        return None
    if _CJK_RE.search(value):
        for n in range(min(6, len(value)), 0, -1):
            if before.rstrip().endswith(value[:n]):
                return value[:n]
            if after.lstrip().startswith(value[-n:]):
                return value[-n:]
    words = _WORD_RE.findall(value)
    if words:
        left, right = _WORD_RE.findall(before), _WORD_RE.findall(after)
        if left and left[-1].casefold() == words[0].casefold():
            return words[0]
        if right and right[0].casefold() == words[-1].casefold():
            return words[-1]
    return None


def world_schema(ctx: CallContext) -> dict[str, Any]:
    """The schema the form is checked against: this setup run's upstream `worldSchema` input
    when present, else the session's character schema (committed + staged)."""
    upstream = (ctx.inputs.get("worldSchema") or {}).get("value")
    if isinstance(upstream, dict) and isinstance(upstream.get("attributes"), list):
        return upstream
    return ctx.state.character_schema() or {"types": [], "attributes": []}


def _collectable_text(attrs: dict[str, dict[str, Any]]) -> str:
    if not attrs:
        return "This world has no string or enum attributes, so the form has only the characterName field."
    listed = ", ".join(
        f"{a['id']} (enum: {', '.join(map(str, a.get('options') or []))})" if a["type"] == "enum" else f"{a['id']} (string)"
        for a in attrs.values()
    )
    return f"Collectable attributes in this world: {listed}."


def _check_fields(fields: list[dict[str, Any]], attributes: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(rejected-field reasons, other issues)."""
    declared = {a["id"]: a for a in attributes if isinstance(a, dict) and "id" in a}
    rejected: list[str] = []
    issues: list[str] = []
    seen: set[str] = set()
    for i, field in enumerate(fields):
        at = f"fields[{i}] ({field['name']})"
        name, kind = field["name"], field["type"]
        if name in seen:
            issues.append(f"{at}: the name is used by another field")
        seen.add(name)
        if name == NAME_FIELD:
            if kind != "text":
                issues.append(f"{at}: characterName must be a text field")
            continue
        attr = declared.get(name)
        if attr is None:
            rejected.append(f"{name}: not a world attribute")
            continue
        if attr.get("type") not in COLLECTABLE_TYPES:
            rejected.append(f"{name}: a {attr.get('type')} attribute keeps its default and is not collected")
            continue
        if attr["type"] == "string" and kind not in ("text", "textarea", "select"):
            issues.append(f"{at}: a string attribute needs a text, textarea or select field, not {kind}")
        if attr["type"] == "enum":
            if kind != "select":
                issues.append(f"{at}: an enum attribute needs a select field, not {kind}")
            else:
                allowed = [str(o) for o in attr.get("options") or []]
                unknown = [v for v in option_values(field) if v not in allowed]
                if unknown:
                    issues.append(
                        f"{at}: options {', '.join(unknown)} are not options of the attribute; use {', '.join(allowed)}"
                    )
        if kind == "select" and "defaultValue" in field and field["defaultValue"] not in (option_values(field) or attr.get("options") or []):
            issues.append(f"{at}.defaultValue: {field['defaultValue']!r} is not one of the options")
        default = field.get("defaultValue")
        enum_options = attr.get("options") or [] if attr["type"] == "enum" else []
        if isinstance(default, str) and default.strip().casefold() in UNDECIDED_VALUES and default not in enum_options:
            issues.append(f"{at}.defaultValue: {default!r} is a placeholder; give a short phrase that fits the sentence")
    if NAME_FIELD not in seen:
        issues.append("fields: the required text field characterName is missing")
    return rejected, issues


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    schema = world_schema(ctx)
    attributes = [a for a in schema.get("attributes") or [] if isinstance(a, dict)]
    collectable = {a["id"]: a for a in attributes if a.get("type") in COLLECTABLE_TYPES and "id" in a}
    fields = copy.deepcopy(args["fields"])
    rejected, issues = _check_fields(fields, attributes)
    template = args["narrativeTemplate"]
    if not re.search(r"\{\{\s*characterName\s*\}\}", template):
        issues.append("narrativeTemplate: the {{characterName}} placeholder is missing")
    if rejected:
        issues.insert(0, "These fields cannot be collected: " + "; ".join(rejected) + ". " + _collectable_text(collectable))
    defaults = {f["name"]: f["defaultValue"] for f in fields if isinstance(f.get("defaultValue"), str)}
    preview_values = {**defaults}
    preview_values.setdefault(NAME_FIELD, "<characterName>")
    preview = fill_narrative_template(template, preview_values)
    if not issues:
        matches = list(_PLACEHOLDER_RE.finditer(template))
        for i, match in enumerate(matches):
            value = defaults.get(match.group(1))
            if not value:
                continue
            before = template[matches[i - 1].end() if i else 0 : match.start()]
            after = template[match.end() : matches[i + 1].start() if i + 1 < len(matches) else len(template)]
            repeated = _boundary_repeat(before, value, after)
            if repeated:
                issues.append(
                    f'fields ({match.group(1)}).defaultValue: "{repeated}" repeats at the placeholder boundary. '
                    f"Preview: {preview} Change the default or the template so the sentence reads once."
                )
    if issues:
        raise ToolError(
            INVALID_INPUT,
            " ".join(issues) if len(issues) == 1 else "Invalid character form: " + " | ".join(issues),
            hint="Fix the fields, defaults or template and call create-character-form again.",
            details={"issues": issues, "preview": preview},
        )
    for field in fields:
        if field["name"] == NAME_FIELD:
            field["required"] = True
        elif field["type"] == "select" and not field.get("options"):
            field["options"] = list(collectable[field["name"]].get("options") or [])
    taken_names = [n for c in ctx.state.characters() for n in (c.name, *c.aliases)]
    interaction: dict[str, Any] = {
        "type": "form",
        "interactionId": args.get("formId") or DEFAULT_FORM_ID,
        "title": args["title"],
        "fields": fields,
        "submitLabel": args["submitLabel"],
        "narrativeTemplate": template,
        "actionKind": "act",
        "sourcePluginId": ctx.plugin_id,
        "validation": {"name": VALIDATOR_NAME, "data": validation_data(taken_names)},
    }
    for key in ("submitBehavior", "notice"):
        if key in args:
            interaction[key] = copy.deepcopy(args[key])
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = f"角色表单已发给玩家。预览：{preview}"
    else:
        summary = f"Character form sent to the player. Preview: {preview}"
    return ToolResult(
        content={"created": True, "interaction": interaction, "filledNarrative": preview},
        summary=summary,
    )


def build() -> Tool:
    return tool(
        name=NAME,
        description=(
            "Show the opening character form: a required characterName text field plus up to 3 of the world's "
            "string/enum attributes. Numbers and compound attributes keep their defaults. Returns the filled "
            "preview sentence."
        ),
        parameters=PARAMETERS,
        execute=_execute,
    )
