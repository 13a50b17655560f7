"""The OpenAPI contract of each route, declared beside it (GET /api/openapi.json, issue 16).

Routes parse and answer exactly as before: a ``@contract(...)`` decorator only *describes* the
request body, query parameters, success responses, error responses and security of its route, and
``ContractOpenAPISchema`` writes that description into the document ninja builds. Nothing here
validates a request or a response at run time (the endpoints keep their own error codes, which a
ninja body parameter would replace with its own); tests/covel/test_openapi_contract.py checks that
what a played session really receives matches the documented schemas.

    @router.get("/sessions/{session_id}", auth=session_scope)
    @contract(ok=SessionOut, errors=SESSION_ERRORS, security=OWNER)
    def get_session(request, session_id: str): ...

Shapes are pydantic models (``Wire`` for responses: snake_case attributes, camelCase wire names).
A field declared ``x: T | None = None`` is *absent* when it has no value (the document says
``T``, not required); ``x: T | None`` without a default is always present and may be null;
``x: Nullable[T] = None`` may be absent or null.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from http.client import responses as http_reasons
from typing import Annotated, Any, Callable, Mapping, Sequence, TypeVar

from ninja.openapi.schema import REF_TEMPLATE, OpenAPISchema
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

F = TypeVar("F", bound=Callable[..., Any])

# Security requirements (spec 004 §鉴权). Both tokens travel the same ways: `Authorization: Bearer`,
# `X-Session-Token` or `?session_token=`. The personal tier (DEPLOYMENT_TIER=self) checks neither,
# hence the empty requirement `{}` in each list.
OWNER_TOKEN, OWNER_TOKEN_HEADER = "ownerToken", "ownerTokenHeader"
OPERATOR_TOKEN, OPERATOR_TOKEN_HEADER = "operatorToken", "operatorTokenHeader"
SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    OWNER_TOKEN: {"type": "http", "scheme": "bearer", "description":
                  "The session's owner token (`ownerToken` of POST /api/sessions, shown once). Checked in the demo "
                  "and commercial tiers; the operator token is accepted wherever an owner token is. Also accepted as "
                  "`?session_token=` (for EventSource, which cannot set headers)."},
    OWNER_TOKEN_HEADER: {"type": "apiKey", "in": "header", "name": "X-Session-Token",
                         "description": "The owner token in a header instead of `Authorization`."},
    OPERATOR_TOKEN: {"type": "http", "scheme": "bearer", "description":
                     "The deployment's operator token (COVEL_DESKTOP_REST_TOKEN), required in the demo and commercial "
                     "tiers by operator routes (creating sessions and worlds, installs, configuration)."},
    OPERATOR_TOKEN_HEADER: {"type": "apiKey", "in": "header", "name": "X-Session-Token",
                            "description": "The operator token in a header instead of `Authorization`."},
}
OWNER = "owner"
OPERATOR = "operator"
PUBLIC = "public"
_SECURITY: dict[str, list[dict[str, list]]] = {
    OWNER: [{OWNER_TOKEN: []}, {OWNER_TOKEN_HEADER: []}, {OPERATOR_TOKEN: []}, {}],
    OPERATOR: [{OPERATOR_TOKEN: []}, {OPERATOR_TOKEN_HEADER: []}, {}],
    PUBLIC: [],
}

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
MULTIPART = "multipart/form-data"

# Error statuses many routes share (spec 004 §鉴权, §响应格式约定).
SESSION_ERRORS: dict[int, str] = {401: "session_owner_required: no valid owner token (demo/commercial tiers)",
                                  404: "session_not_found"}
OPERATOR_ERRORS: dict[int, str] = {401: "operator_token_required (demo/commercial tiers)"}
BUSY_ERRORS: dict[int, str] = {503: "session_busy: the session's lock was not acquired in time (retry)"}
BINARY = {"schema": {"type": "string", "format": "binary"}}


class _MayBeNull:
    """Marker (see Nullable): the field may be absent or null."""


T = TypeVar("T")
Nullable = Annotated[T | None, _MayBeNull()]


def _absent_not_null(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """json_schema_extra of Wire/WireIn: ``x: T | None = None`` is documented as an optional ``T``."""
    properties = schema.get("properties") or {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        prop = properties.get(key)
        if prop is None or info.is_required() or info.default is not None:
            continue
        if any(isinstance(m, _MayBeNull) for m in info.metadata):
            continue
        prop.pop("default", None)
        branches = prop.get("anyOf")
        if isinstance(branches, list):
            kept = [b for b in branches if b != {"type": "null"}]
            if len(kept) == 1:
                prop.pop("anyOf")
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept


class Wire(BaseModel):
    """Base of documented response shapes: snake_case attributes, camelCase wire names, and room
    for keys the document does not list (additional properties are allowed)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow",
                              json_schema_extra=_absent_not_null)


class WireIn(BaseModel):
    """Base of documented request bodies and query parameter sets: like Wire, but a key the
    route does not read is refused (additionalProperties false) unless the model says otherwise."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              json_schema_extra=_absent_not_null)


class ErrorOut(BaseModel):
    """The error envelope of every non-2xx response (spec 004 §响应格式约定)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_absent_not_null)

    error: str
    code: str | None = None
    details: Any = None


class Ok(Wire):
    """``{ok: true, ...}``: a command or deletion that produces no resource of its own."""

    ok: bool


@dataclass(frozen=True)
class Contract:
    """What ``@contract`` recorded for one route (see the module docstring)."""

    ok: Mapping[int, Any]
    body: Any
    body_content: str
    body_required: bool
    query: type[BaseModel] | None
    errors: Mapping[int, str]
    security: str | None
    stream: str | None
    content: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    headers: Mapping[int, Mapping[str, str]] = field(default_factory=dict)


def contract(
    *, ok: Any = None, status: int = 200, body: Any = None, body_content: str = JSON,
    body_required: bool = True, query: type[BaseModel] | None = None, errors: Mapping[int, str] | None = None,
    security: str | None = PUBLIC, stream: str | None = None, content: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """Describe a route in the OpenAPI document (put it *below* the router decorator).

    ok: the success body, a model (or ``list[Model]``), or ``{status: model}`` for several success
    statuses; with ``status`` (default 200) for a single one. body: request body model, sent as
    ``body_content`` (``multipart/form-data`` models type their file fields ``bytes``), or
    ``{media type: model or JSON schema}`` for a route that takes several. query: a
    model whose fields are the query parameters. errors: ``{status: "code_a / code_b: when"}``,
    each documented with the error envelope. security: OWNER, OPERATOR or PUBLIC.
    stream: a description of the text/event-stream success body (SSE routes). content: media
    types of a non-JSON success body (``{"image/*": {"schema": {...}}}``), headers: response
    headers of the success status (``{"ETag": "..."}``). Returns the function unchanged.
    """
    success = dict(ok) if isinstance(ok, Mapping) else {status: ok}
    recorded = Contract(
        ok=success, body=body, body_content=body_content, body_required=body_required, query=query,
        errors=dict(errors or {}), security=security, stream=stream,
        content={status: dict(content)} if content else {}, headers={status: dict(headers)} if headers else {},
    )

    def mark(view: F) -> F:
        view.__covel_contract__ = recorded  # type: ignore[attr-defined]
        return view

    return mark


def errors_merge(*parts: Mapping[int, str]) -> dict[int, str]:
    """Several ``errors`` maps in one; texts of the same status are joined with `` / ``."""
    out: dict[int, str] = {}
    for part in parts:
        for status, text in part.items():
            out[status] = f"{out[status]} / {text}" if status in out else text
    return out


@functools.lru_cache(maxsize=None)
def _model_schema(model: type[BaseModel], mode: str) -> dict[str, Any]:
    """A model's JSON schema, built once per process (the models never change at run time; pydantic
    does not cache it, and building every one made the document 5x slower). Treat as read-only."""
    return model.model_json_schema(ref_template=REF_TEMPLATE, by_alias=True, mode=mode)  # type: ignore[arg-type]


class ContractOpenAPISchema(OpenAPISchema):
    """ninja's OpenAPI document with each route's ``@contract`` written in and the owner / operator
    security schemes (covel.api.CovelNinjaAPI builds it, with the endpoint names as operation ids).
    Statuses are int keys throughout, so no status appears twice in the JSON."""

    def __init__(self, api: Any, path_prefix: str) -> None:
        self._model_names: dict[str, type[BaseModel]] = {}
        super().__init__(api, path_prefix)
        components = self.setdefault("components", {})
        components.setdefault("schemas", self.schemas)
        components["securitySchemes"] = {**SECURITY_SCHEMES, **(components.get("securitySchemes") or {})}

    # -- components ----------------------------------------------------------------------------

    def model_ref(self, model: Any, *, mode: str = "serialization") -> dict[str, Any]:
        """The schema of ``model`` (a pydantic model, ``list[Model]``, ``dict`` or a JSON schema
        dict), registering models under components/schemas. Raises ValueError when two different
        models share a name (the document would silently describe only one of them)."""
        if model is None:
            return {}
        if isinstance(model, dict):
            return model
        origin = getattr(model, "__origin__", None)
        if origin is list:
            (item,) = model.__args__
            return {"type": "array", "items": self.model_ref(item, mode=mode)}
        if model is dict:
            return {"type": "object", "additionalProperties": True}
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"cannot document {model!r}")
        name = model.__name__
        known = self._model_names.get(name)
        if known is not None and known is not model:
            raise ValueError(f"two OpenAPI models are named {name}: {known.__module__} and {model.__module__}")
        if known is None:
            self._model_names[name] = model
            schema = dict(_model_schema(model, mode))
            for def_name, definition in (schema.pop("$defs", None) or {}).items():
                self.schemas.setdefault(def_name, definition)
            self.schemas[name] = schema
        return {"$ref": REF_TEMPLATE.format(model=name)}

    # -- operations ----------------------------------------------------------------------------

    def operation_details(self, operation: Any) -> dict[str, Any]:
        """ninja's operation object, then the route's contract applied over it."""
        result = super().operation_details(operation)
        responses = result.get("responses") or {}
        for status in [s for s in responses if isinstance(s, str) and s.isdigit()]:
            # ninja keys statuses by int; a "200" from openapi_extra would be a second key "200" in JSON.
            extra = responses.pop(status)
            responses[int(status)] = {**responses.get(int(status), {}), **extra}
        recorded: Contract | None = getattr(operation.view_func, "__covel_contract__", None)
        if recorded is not None:
            self._apply(result, recorded)
        return result

    def _apply(self, result: dict[str, Any], c: Contract) -> None:
        responses: dict[Any, Any] = result.setdefault("responses", {})
        for status in [s for s in responses if 200 <= int(s) < 300 and int(s) not in c.ok]:
            del responses[status]  # ninja's default 200 for a route that answers 201 or 202
        for status, model in c.ok.items():
            entry: dict[str, Any] = {"description": http_reasons.get(status, "Success")}
            if c.stream is not None and model is None:
                entry["description"] = c.stream
                entry["content"] = {EVENT_STREAM: {"schema": {"type": "string", "description": c.stream}}}
            elif status in c.content:
                entry["content"] = dict(c.content[status])
            elif model is not None:
                entry["content"] = {JSON: {"schema": self.model_ref(model)}}
            if status in c.headers:
                entry["headers"] = {name: {"description": text, "schema": {"type": "string"}}
                                    for name, text in c.headers[status].items()}
            responses[status] = entry
        envelope = {JSON: {"schema": self.model_ref(ErrorOut)}}
        for status, text in sorted(c.errors.items()):
            responses[status] = {"description": text, "content": envelope}
        responses["default"] = {"description": "Any other failure, in the error envelope (403 host_not_allowed / "
                                               "foreign_request_refused, 413, 429, 500, 503 service_unavailable).",
                                "content": envelope}
        if c.body is not None:
            bodies = dict(c.body) if isinstance(c.body, Mapping) else {c.body_content: c.body}
            result["requestBody"] = {"required": c.body_required, "content": {
                media_type: {"schema": self.model_ref(model, mode="validation")} for media_type, model in bodies.items()}}
        if c.query is not None:
            present = {(p["in"], p["name"]) for p in result.get("parameters") or []}
            params = result.setdefault("parameters", [])
            for param in self._query_parameters(c.query):
                if ("query", param["name"]) not in present:
                    params.append(param)
        if c.security is not None:
            if _SECURITY[c.security]:
                result["security"] = _SECURITY[c.security]
            else:
                result.pop("security", None)

    def _query_parameters(self, model: type[BaseModel]) -> list[dict[str, Any]]:
        schema = dict(_model_schema(model, "validation"))
        for def_name, definition in (schema.pop("$defs", None) or {}).items():
            self.schemas.setdefault(def_name, definition)
        required = set(schema.get("required") or [])
        out = []
        for name, prop in (schema.get("properties") or {}).items():
            param: dict[str, Any] = {"in": "query", "name": name, "required": name in required, "schema": prop}
            if "description" in prop:
                param["description"] = prop["description"]
            out.append(param)
        return out


def openapi_document(api: Any, *, path_prefix: str) -> ContractOpenAPISchema:
    """Build the document of ``api`` (a NinjaAPI) with the contracts applied."""
    return ContractOpenAPISchema(api, path_prefix)


def operations(document: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) of every operation of an OpenAPI document, in document order."""
    out = []
    for path, methods in (document.get("paths") or {}).items():
        for method, operation in methods.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                out.append((method.upper(), path, operation))
    return out


__all__: Sequence[str] = (
    "BINARY", "BUSY_ERRORS", "ContractOpenAPISchema", "ErrorOut", "EVENT_STREAM", "JSON", "MULTIPART",
    "Nullable", "OPERATOR", "OPERATOR_ERRORS", "OWNER", "Ok", "PUBLIC", "SECURITY_SCHEMES", "SESSION_ERRORS", "Wire",
    "WireIn", "contract", "errors_merge", "openapi_document", "operations",
)
