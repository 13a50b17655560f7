"""Dataset tools `<d>-get|list|upsert|update`, generated per runtime from the caller plugin's
`contributes.datasets` and the runtime's `agent.tools.datasets` (spec 000, 数据集工具).

They are not in the registry: pass them to ToolExecutor.execute_batch(runtime_tools=...).
Reads go through StateView.plugin_data_* (the caller plugin's view with its staged writes);
writes are staged as plugin.data.update proposals after the result is computed with
apply_data_ops, size-checked and schema-validated.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.ids import dataset_key
from plugins_app.toolkit.state import DatasetDeclaration
from turns.engine.tools.dataops import DATA_OPS, MALFORMED_OP_CODES, OP_SCHEMAS, DataOpError, apply_data_ops
from plugins_app.toolkit.definition import (
    READ_ONLY_SAFE,
    RuntimeValidator,
    Tool,
    ToolResult,
    schema_problem,
    strip_unicode_property_patterns,
    tool,
)
from plugins_app.toolkit.errors import CONFLICT, INTERNAL, INVALID_INPUT, NOT_FOUND, ToolError
from plugins_app.toolkit.proposals import PLUGIN_DATA_UPDATE, Proposal
from turns.engine.tools.registry import FRAMEWORK_TOOL_NAMES

#: MAX_PLUGIN_DATA_VALUE_BYTES: one value's JSON, UTF-8 bytes.
MAX_VALUE_BYTES = 256 * 1024
MAX_KEY_UTF16_UNITS = 256
MAX_TOOL_NAME_CHARS = 64
LIST_DEFAULT_LIMIT = 20
LIST_MAX_LIMIT = 50
MAX_UPDATE_OPS = 64
TOOL_SUFFIXES = ("get", "list", "upsert", "update")


class DatasetSelectionError(ValueError):
    """A runtime's agent.tools.datasets entry is invalid; field names the offending entry."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def value_size_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def provided_tools(decl: DatasetDeclaration) -> tuple[str, ...]:
    """Explicit `tools`, else get+list, upsert when ops has set, update when ops has others."""
    if decl.tools is not None:
        return tuple(decl.tools)
    out = ["get", "list"]
    if "set" in decl.ops:
        out.append("upsert")
    if any(op != "set" for op in decl.ops):
        out.append("update")
    return tuple(out)


class _Dataset:
    def __init__(self, decl: DatasetDeclaration, selected: tuple[str, ...]) -> None:
        self.decl = decl
        self.name = decl.name
        self.selected = selected
        self.validator = None if schema_problem(decl.schema) else RuntimeValidator(decl.schema)

    def hint(self, suffix: str, text: str) -> str | None:
        return text if suffix in self.selected else None

    def checked_key(self, raw: Any) -> str:
        if not isinstance(raw, str):
            raw = json.dumps(raw, ensure_ascii=False) if not isinstance(raw, (int, float)) else str(raw)
        if not dataset_key(raw) or _utf16_units(raw) > MAX_KEY_UTF16_UNITS:
            raise ToolError(
                INVALID_INPUT,
                f"The {self.name} key must not be empty and must be at most {MAX_KEY_UTF16_UNITS} characters.",
            )
        return raw

    def find(self, ctx: CallContext, raw_key: str) -> tuple[str | None, Any]:
        """(stored key, value): exact key first, then datasetKey(key); (None, None) when absent."""
        exists, value = ctx.state.plugin_data_get(ctx.plugin_id, self.name, raw_key)
        if exists:
            return raw_key, value
        normal = dataset_key(raw_key)
        exists, value = ctx.state.plugin_data_get(ctx.plugin_id, self.name, normal)
        return (normal, value) if exists else (None, None)

    def check_record(self, key: str, record: Any) -> None:
        size = value_size_bytes(record)
        if size > MAX_VALUE_BYTES:
            raise ToolError(
                INVALID_INPUT,
                f"The value for {self.name}/{key} is {size} bytes; the limit for one value is "
                f"{MAX_VALUE_BYTES} bytes. Write less, or split it across several keys.",
            )
        if self.validator is None:
            raise ToolError(INTERNAL, f"The {self.name} dataset's schema cannot be used.")
        errors = sorted(self.validator.iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            shown = "; ".join(
                ("/".join(map(str, e.absolute_path)) or "(record)") + ": " + e.message for e in errors[:3]
            )
            raise ToolError(INVALID_INPUT, f"The {self.name} record {key!r} does not fit the dataset schema: {shown}")

    def apply(self, value_exists: bool, value: Any, ops: list[dict[str, Any]]) -> tuple[bool, Any]:
        try:
            return apply_data_ops(value_exists, value, ops)
        except DataOpError as exc:
            if exc.code in MALFORMED_OP_CODES:
                raise ToolError(INVALID_INPUT, f"{self.name}: {exc}") from None
            raise ToolError(
                CONFLICT,
                f"{self.name}: {exc}",
                hint=self.hint("get", f"Read the record with {self.name}-get and adjust."),
            ) from None


def _record_param(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(record schema for the model, definitions to hoist to the tool schema root)."""
    record = strip_unicode_property_patterns(copy.deepcopy(schema))
    hoisted = {}
    for key in ("$defs", "definitions"):
        if key in record:
            hoisted[key] = record.pop(key)
    return record, hoisted


def _key_description(ds: _Dataset) -> str:
    field = f" (the record's {ds.decl.key_field} field)" if ds.decl.key_field else ""
    return f"Record key{field}; case and spaces do not matter for lookup."


def _build_get(ds: _Dataset) -> Tool:
    def execute(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        raw = ds.checked_key(args["key"])
        stored, value = ds.find(ctx, raw)
        if stored is None:
            raise ToolError(NOT_FOUND, f"No {ds.name} record {raw!r}.", hint=ds.hint("list", f"List records with {ds.name}-list."))
        return {"key": stored, "record": value}

    return tool(
        name=f"{ds.name}-get",
        description=f"Read one record of the {ds.name} dataset by key. {ds.decl.description}".strip(),
        parameters={
            "type": "object",
            "required": ["key"],
            "properties": {"key": {"type": "string", "minLength": 1, "description": _key_description(ds)}},
            "additionalProperties": False,
        },
        annotations=READ_ONLY_SAFE,
        execute=execute,
    )


def _build_list(ds: _Dataset) -> Tool:
    def execute(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        rows = ctx.state.plugin_data_list(ctx.plugin_id, ds.name)
        where = args.get("where") or {}
        items = []
        for key in sorted(rows):
            record = rows[key]
            if all(isinstance(record, dict) and k in record and record[k] == v for k, v in where.items()):
                items.append({"key": key, "record": record})
        offset, limit = args.get("offset", 0), args.get("limit", LIST_DEFAULT_LIMIT)
        page: dict[str, Any] = {"total": len(items), "items": items[offset : offset + limit]}
        if offset + limit < len(items):
            page["nextOffset"] = offset + limit
        return page

    return tool(
        name=f"{ds.name}-list",
        description=f"List records of the {ds.name} dataset by key, optionally filtered. {ds.decl.description}".strip(),
        parameters={
            "type": "object",
            "properties": {
                "where": {
                    "type": "object",
                    "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                    "description": "Exact match on top-level record fields.",
                },
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX_LIMIT, "default": LIST_DEFAULT_LIMIT},
            },
            "additionalProperties": False,
        },
        annotations=READ_ONLY_SAFE,
        execute=execute,
    )


def _build_upsert(ds: _Dataset) -> Tool:
    # An unusable schema still yields the tool; calling it reports `internal` (spec 错误 table).
    record_schema, hoisted = _record_param(ds.decl.schema) if ds.validator else ({"type": "object"}, {})
    key_field = ds.decl.key_field
    properties: dict[str, Any] = {"record": record_schema}
    required = ["record"]
    if not key_field:
        properties = {"key": {"type": "string", "minLength": 1, "description": _key_description(ds)}, **properties}
        required = ["key", "record"]

    def execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
        record = args["record"]
        if key_field:
            if not isinstance(record, dict) or key_field not in record:
                raise ToolError(INVALID_INPUT, f"The {ds.name} record needs its {key_field} field.")
            raw = ds.checked_key(record[key_field])
        else:
            raw = ds.checked_key(args["key"])
        stored, _ = ds.find(ctx, raw)
        key = stored if stored is not None else dataset_key(raw)
        ops = [{"op": "set", "value": record}]
        _, result = ds.apply(stored is not None, None, ops)
        ds.check_record(key, result)
        proposal = Proposal(PLUGIN_DATA_UPDATE, {"namespace": ds.name, "key": key, "ops": ops})
        return ToolResult(content={"key": key, "record": result, "created": stored is None}, proposals=[proposal])

    return tool(
        name=f"{ds.name}-upsert",
        description=(
            f"Write a whole {ds.name} record: replaces the record with the same key, else creates it. "
            f"{ds.decl.description}"
        ).strip(),
        parameters={"type": "object", "required": required, "properties": properties, "additionalProperties": False, **hoisted},
        annotations={"stagesWrites": True, "idempotent": True},
        execute=execute,
    )


def _build_update(ds: _Dataset) -> Tool:
    kinds = [op for op in ds.decl.ops if op != "set" and op in OP_SCHEMAS]
    op_schema = {
        "anyOf": [dict(OP_SCHEMAS[k], type="object", additionalProperties=False) for k in kinds]
    } if kinds else {"type": "object"}
    key_field = ds.decl.key_field

    def execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
        raw = ds.checked_key(args["key"])
        for i, op in enumerate(args["ops"]):
            if op.get("op") not in kinds:
                raise ToolError(
                    INVALID_INPUT,
                    f"ops[{i}]: {op.get('op')!r} is not allowed on {ds.name}; allowed: {', '.join(kinds)}. "
                    f"Replace a whole record with {ds.name}-upsert.",
                )
        stored, value = ds.find(ctx, raw)
        if stored is None:
            raise ToolError(
                NOT_FOUND, f"No {ds.name} record {raw!r}.", hint=ds.hint("upsert", f"Create it with {ds.name}-upsert.")
            )
        exists, result = ds.apply(True, value, args["ops"])
        proposal = Proposal(PLUGIN_DATA_UPDATE, {"namespace": ds.name, "key": stored, "ops": copy.deepcopy(args["ops"])})
        if not exists:
            return ToolResult(content={"key": stored, "deleted": True}, proposals=[proposal])
        if key_field and isinstance(value, dict):
            before = dataset_key(str(value.get(key_field, "")))
            after = dataset_key(str(result.get(key_field, ""))) if isinstance(result, dict) else ""
            if before != after:
                raise ToolError(
                    INVALID_INPUT, f"update cannot change {key_field}; upsert a new record and delete this one"
                )
        ds.check_record(stored, result)
        return ToolResult(content={"key": stored, "record": result}, proposals=[proposal])

    return tool(
        name=f"{ds.name}-update",
        description=f"Change one existing {ds.name} record with 1-64 operations. {ds.decl.description}".strip(),
        parameters={
            "type": "object",
            "required": ["key", "ops"],
            "properties": {
                "key": {"type": "string", "minLength": 1, "description": _key_description(ds)},
                "ops": {"type": "array", "minItems": 1, "maxItems": MAX_UPDATE_OPS, "items": op_schema},
            },
            "additionalProperties": False,
        },
        annotations={"stagesWrites": True},
        execute=execute,
    )


_BUILDERS = {"get": _build_get, "list": _build_list, "upsert": _build_upsert, "update": _build_update}


def dataset_tools(
    declarations: dict[str, DatasetDeclaration],
    selection: list[str | dict[str, Any]],
    *,
    taken_names: frozenset[str] = frozenset(),
) -> dict[str, Tool]:
    """Generate the dataset tools a runtime selected, keyed by tool name.

    selection: agent.tools.datasets entries, `"npcs"` (all tools the dataset provides) or
    `{"dataset": "clock", "tools": ["get"]}`. taken_names: the runtime's tools.builtin /
    tools.plugin, the package's contributes.tools and imported service tool names.
    Raises DatasetSelectionError (field `agent.tools.datasets.<i>[.tools.<j>]`) for an
    undeclared dataset, a tool it does not provide, a name over 64 characters, a clash with a
    framework or taken name, or a dataset listed twice.
    """
    tools: dict[str, Tool] = {}
    seen: set[str] = set()
    for i, entry in enumerate(selection):
        at = f"agent.tools.datasets.{i}"
        name = entry if isinstance(entry, str) else entry.get("dataset")
        if not isinstance(name, str) or name not in declarations:
            raise DatasetSelectionError(at, f"dataset {name!r} is not declared in contributes.datasets")
        if name in seen:
            raise DatasetSelectionError(at, f"dataset {name!r} is listed twice")
        seen.add(name)
        decl = declarations[name]
        provided = provided_tools(decl)
        wanted = provided if isinstance(entry, str) else tuple(entry.get("tools") or provided)
        for j, suffix in enumerate(wanted):
            if suffix not in provided:
                raise DatasetSelectionError(f"{at}.tools.{j}", f"dataset {name!r} does not provide {suffix!r}")
        ds = _Dataset(decl, wanted)
        for j, suffix in enumerate(wanted):
            tool_name = f"{name}-{suffix}"
            field = at if isinstance(entry, str) else f"{at}.tools.{j}"
            if len(tool_name) > MAX_TOOL_NAME_CHARS:
                raise DatasetSelectionError(field, f"tool name {tool_name!r} is longer than {MAX_TOOL_NAME_CHARS} characters")
            if tool_name in FRAMEWORK_TOOL_NAMES or tool_name in taken_names or tool_name in tools:
                raise DatasetSelectionError(field, f"tool name {tool_name!r} clashes with another tool")
            tools[tool_name] = _BUILDERS[suffix](ds)
    return tools


__all__ = ["DATA_OPS", "DatasetSelectionError", "dataset_key", "dataset_tools", "provided_tools", "value_size_bytes"]
