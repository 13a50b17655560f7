"""The tool() constructor, ToolResult and argument parsing/validation (spec 000, 注解与超时,
模型写错的参数 JSON, 带 Unicode 属性转义的正则).

A Tool validates arguments with the same JSON Schema it shows the model (minus `\\p{..}`
patterns, which providers reject but which are still enforced here with the `regex` module).
Parameters may be a pydantic model (execute receives the model instance) or a JSON Schema
(execute receives the dict with declared defaults filled in).
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema
import pydantic
import regex

from plugins_app.toolkit.errors import ToolDefinitionError, ToolValidationError
from plugins_app.toolkit.repair import ArgumentJsonError, parse_arguments_json

#: Inclusive bounds of timeout_ms (spec: integer in [1, 600000]).
TIMEOUT_MS_MIN = 1
TIMEOUT_MS_MAX = 600_000
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
INVALID_INPUT_HINT = "Fix these fields and call the tool again."
_UNICODE_PROPERTY_RE = re.compile(r"\\[pP]\{")
_ANNOTATION_KEYS = {
    "readOnly": "read_only",
    "stagesWrites": "stages_writes",
    "idempotent": "idempotent",
    "concurrencySafe": "concurrency_safe",
}


@dataclass(frozen=True)
class ToolAnnotations:
    """The four completed annotations. Defaults: writes, not idempotent, not concurrency-safe."""

    read_only: bool = False
    stages_writes: bool = True
    idempotent: bool = False
    concurrency_safe: bool = False

    def to_json(self) -> dict[str, bool]:
        return {
            "readOnly": self.read_only,
            "stagesWrites": self.stages_writes,
            "idempotent": self.idempotent,
            "concurrencySafe": self.concurrency_safe,
        }


READ_ONLY_SAFE = ToolAnnotations(read_only=True, stages_writes=False, idempotent=True, concurrency_safe=True)

_UNSET: Any = object()


@dataclass
class ToolResult:
    """What execute returns when it has more than plain content (withPendingProposals &co).

    content: the full body code reads (ctx.tools.call, completion output, UI, interactions).
    proposals: Proposal objects to stage; events: `{topic, data}` domain events.
    summary / data: the explicit model view; when either is given only they are sent
    (data still goes through modelFacingJson, summary verbatim).
    """

    content: Any = None
    proposals: list[Any] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    summary: str | None = None
    data: Any = _UNSET

    @property
    def has_model_view(self) -> bool:
        return self.summary is not None or self.data is not _UNSET


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: dict) -> Any:
    if isinstance(instance, str) and not regex.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


RuntimeValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _pattern_keyword}
)


_META_VALIDATOR = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)


def schema_problem(schema: Any) -> str | None:
    """First reason schema is not a usable JSON Schema (patterns compiled with `regex`), or None."""
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        return str(exc)
    error = next(iter(_META_VALIDATOR.iter_errors(schema)), None)
    if error is not None:
        return error.message

    def patterns(node: Any) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    yield value
                else:
                    yield from patterns(value)
        elif isinstance(node, list):
            for value in node:
                yield from patterns(value)

    for pattern in patterns(schema):
        try:
            regex.compile(pattern)
        except regex.error as exc:
            return f"pattern {pattern!r}: {exc}"
    return None


def strip_unicode_property_patterns(schema: Any) -> Any:
    """Copy of schema without `pattern`s that use \\p{..} / \\P{..}; drops root $schema/$id."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str) and _UNICODE_PROPERTY_RE.search(value):
                    continue
                out[key] = walk(value)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out = walk(schema)
    if isinstance(out, dict):
        out.pop("$schema", None)
        out.pop("$id", None)
    return out


def _wants_container(expected: Any) -> bool:
    kinds = expected if isinstance(expected, list) else [expected]
    return "array" in kinds or "object" in kinds


def _flatten(errors: list[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
    out: list[jsonschema.ValidationError] = []
    for err in errors:
        out.append(err)
        if err.context:
            out.extend(_flatten(list(err.context)))
    return out


def _set_at(root: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    node = root
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return root


def _pointer(path: Any) -> str:
    parts = [str(p) for p in path]
    return "/".join(parts) if parts else "(root)"


def _apply_defaults(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _apply_defaults(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], v) for v in value]
    return value


@dataclass
class ParsedArguments:
    """value: what execute receives; arguments: the JSON-able dict (history keeps its JSON)."""

    value: Any
    arguments: dict[str, Any]
    repaired: bool


class Tool:
    """A registered tool. Build it with tool(); the fields are read-only by convention."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters_schema: dict[str, Any],
        parameters_model: type[pydantic.BaseModel] | None,
        annotations: ToolAnnotations,
        timeout_ms: int | None,
        execute: Callable[..., Any],
    ) -> None:
        self.name = name
        self.description = description
        self.parameters_schema = parameters_schema
        self.parameters_model = parameters_model
        self.annotations = annotations
        self.timeout_ms = timeout_ms
        self.execute = execute
        self.is_async = inspect.iscoroutinefunction(execute)
        self.model_parameters = strip_unicode_property_patterns(parameters_schema)
        self._validator = RuntimeValidator(parameters_schema)

    def definition(self) -> dict[str, Any]:
        """Model-facing definition `{name, description, parameters}` (no annotations)."""
        return {"name": self.name, "description": self.description, "parameters": self.model_parameters}

    def parse_arguments(self, raw: str | dict[str, Any] | None) -> ParsedArguments:
        """Parse, repair and validate raw arguments.

        raw: the model's JSON text (repaired per spec, "" counts as {}) or an already-parsed dict.
        String fields where the schema wants an array/object are parsed as JSON text too.
        Raises ToolValidationError (invalid-input) with field paths in the message and
        details={"issues": [{"path", "message"}]}.
        """
        repaired = False
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            value: Any = {}
        elif isinstance(raw, str):
            try:
                parsed = parse_arguments_json(raw)
            except ArgumentJsonError as exc:
                raise ToolValidationError(
                    f"The arguments are not valid JSON: {exc}.",
                    hint="Send the arguments again as one complete JSON object.",
                    details={"reason": exc.reason, "position": exc.position},
                ) from None
            value, repaired = parsed.value, parsed.rule is not None
        else:
            value = copy.deepcopy(raw)
        value, fixed = self._validate_with_field_repair(value)
        repaired = repaired or fixed
        arguments = value
        if self.parameters_model is not None:
            try:
                instance = self.parameters_model.model_validate(value)
            except pydantic.ValidationError as exc:
                issues = [
                    {"path": _pointer(e["loc"]), "message": e["msg"]} for e in exc.errors(include_url=False)
                ]
                raise self._invalid(issues) from None
            return ParsedArguments(instance, arguments, repaired)
        return ParsedArguments(_apply_defaults(self.parameters_schema, copy.deepcopy(value)), arguments, repaired)

    def _validate_with_field_repair(self, value: Any) -> tuple[Any, bool]:
        fixed = False
        for _ in range(64):
            errors = list(self._validator.iter_errors(value))
            if not errors:
                return value, fixed
            repaired_one = False
            for err in _flatten(errors):
                if err.validator != "type" or not isinstance(err.instance, str):
                    continue
                if not _wants_container(err.validator_value):
                    continue
                try:
                    parsed = parse_arguments_json(err.instance, inside_field=True)
                except ArgumentJsonError as exc:
                    path = _pointer(err.absolute_path)
                    raise ToolValidationError(
                        f"{path}: the text is not valid JSON ({exc}). "
                        "Pass the array or object itself, not a JSON string.",
                        hint=INVALID_INPUT_HINT,
                        details={"issues": [{"path": path, "message": str(exc)}]},
                    ) from None
                if not isinstance(parsed.value, (list, dict)):
                    continue
                value = _set_at(value, list(err.absolute_path), parsed.value)
                repaired_one = fixed = True
                break
            if not repaired_one:
                issues = []
                for err in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
                    path = list(err.absolute_path)
                    if err.validator == "required" and isinstance(err.instance, dict):
                        missing = [k for k in err.validator_value if k not in err.instance]
                        path += missing[:1]
                    issues.append({"path": _pointer(path), "message": err.message})
                raise self._invalid(issues)
        raise self._invalid([{"path": "(root)", "message": "too many JSON text fields"}])

    def _invalid(self, issues: list[dict[str, str]]) -> ToolValidationError:
        lines = "; ".join(f"{i['path']}: {i['message']}" for i in issues[:10])
        return ToolValidationError(
            f"Invalid arguments for {self.name}: {lines}",
            hint=INVALID_INPUT_HINT,
            details={"issues": issues},
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _annotations_from(name: str, raw: ToolAnnotations | dict[str, Any] | None) -> ToolAnnotations:
    if isinstance(raw, ToolAnnotations):
        given = {v: getattr(raw, v) for v in _ANNOTATION_KEYS.values()}
    else:
        given = {}
        for key, value in (raw or {}).items():
            attr = _ANNOTATION_KEYS.get(key) or (key if key in _ANNOTATION_KEYS.values() else None)
            if attr is None:
                raise ToolDefinitionError(f'Tool "{name}": unknown annotation {key!r}')
            if not isinstance(value, bool):
                raise ToolDefinitionError(f'Tool "{name}": annotation {key} must be a boolean')
            given[attr] = value
    read_only = given.get("read_only", False)
    stages_writes = given.get("stages_writes", not read_only)
    concurrency_safe = given.get("concurrency_safe", False)
    if read_only and stages_writes:
        raise ToolDefinitionError(f'Tool "{name}": readOnly: true cannot be combined with stagesWrites: true')
    if concurrency_safe and not read_only:
        raise ToolDefinitionError(f'Tool "{name}": concurrencySafe: true requires readOnly: true')
    return ToolAnnotations(
        read_only=read_only,
        stages_writes=stages_writes,
        idempotent=given.get("idempotent", False),
        concurrency_safe=concurrency_safe,
    )


def tool(
    *,
    name: str,
    description: str,
    parameters: type[pydantic.BaseModel] | dict[str, Any] | None = None,
    execute: Callable[..., Any],
    annotations: ToolAnnotations | dict[str, Any] | None = None,
    timeout_ms: int | None = None,
) -> Tool:
    """Build a Tool (spec 000, 注解与超时).

    parameters: a pydantic model class or a JSON Schema object (default: no parameters).
    annotations: camelCase dict (`readOnly`, `stagesWrites`, `idempotent`, `concurrencySafe`)
    or ToolAnnotations; omitted values default (stagesWrites defaults to !readOnly).
    timeout_ms: None (no per-tool limit) or an integer in [1, 600000].
    execute: `execute(args, ctx: CallContext)`, sync or async; returns content or ToolResult.
    Raises ToolDefinitionError (`Tool "<name>": ...`) for readOnly+stagesWrites,
    concurrencySafe without readOnly, a bad timeout, a bad name/description or a schema that
    is not valid JSON Schema.
    """
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise ToolDefinitionError(f'Tool "{name}": name must be 1-64 letters, digits, "_" or "-"')
    if not isinstance(description, str) or not description.strip():
        raise ToolDefinitionError(f'Tool "{name}": description is required')
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, int)
        or not TIMEOUT_MS_MIN <= timeout_ms <= TIMEOUT_MS_MAX
    ):
        raise ToolDefinitionError(
            f'Tool "{name}": timeoutMs must be an integer in [{TIMEOUT_MS_MIN}, {TIMEOUT_MS_MAX}]'
        )
    if not callable(execute):
        raise ToolDefinitionError(f'Tool "{name}": execute must be callable')
    model: type[pydantic.BaseModel] | None = None
    if parameters is None:
        schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    elif isinstance(parameters, type) and issubclass(parameters, pydantic.BaseModel):
        model = parameters
        try:
            schema = parameters.model_json_schema()
        except Exception as exc:  # pydantic raises several types for unsupported fields
            raise ToolDefinitionError(f'Tool "{name}": parameters cannot be converted to JSON Schema: {exc}') from None
    elif isinstance(parameters, dict):
        schema = copy.deepcopy(parameters)
    else:
        raise ToolDefinitionError(f'Tool "{name}": parameters must be a pydantic model or a JSON Schema')
    problem = schema_problem(schema)
    if problem:
        raise ToolDefinitionError(f'Tool "{name}": parameters are not a valid JSON Schema: {problem}')
    if schema.get("type") != "object":
        raise ToolDefinitionError(f'Tool "{name}": parameters must describe an object')
    return Tool(
        name=name,
        description=description,
        parameters_schema=schema,
        parameters_model=model,
        annotations=_annotations_from(name, annotations),
        timeout_ms=timeout_ms,
        execute=execute,
    )
