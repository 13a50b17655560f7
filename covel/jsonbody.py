"""Parsing JSON request bodies into values every store can hold (spec 004 §响应格式约定: bad input is
a 4xx in the error envelope, never a 500, and nothing is half-written).

``json_body_load`` is the one JSON body parser of the API: covel.middleware.JsonBodyMiddleware uses
it for every write body under /api/ whatever its Content-Type (raw-byte and upload routes aside),
``unknown_fields_check`` refuses keys a route's documented body does not declare, the NinjaAPI parser (covel.api) for schema-bound bodies, and
routes that read a body whatever its content type call it directly.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel

from covel.errors import ApiError

# NUL cannot be stored in PostgreSQL text/jsonb and lone UTF-16 surrogates (JSON "\ud800") cannot be
# encoded as UTF-8 at all: input carrying either is refused up front, identically on SQLite and PG.
_UNSTORABLE_RE = re.compile("[\x00\ud800-\udfff]")
# Deeper bodies are refused: serializing them again (JSONField, events) would exhaust the stack.
JSON_MAX_DEPTH = 128
INVALID_JSON_BODY = "invalid_json_body"
INVALID_REQUEST_BODY = "invalid_request_body"
# The code of a body that does not match the route's documented schema (as covel.api renders
# ninja's validation errors): details.issues = [{path, message, type}].
INVALID_REQUEST = "invalid_request"


def unstorable_json_problem(data: Any) -> tuple[str, list[str]] | None:
    """``(reason, path)`` for the first part of ``data`` we cannot store, or None.

    reason: ``"text"`` — a string or object key holding NUL or an unpaired surrogate;
    ``"number"`` — a float that is not finite (NaN, Infinity, or a literal too large such as 1e400:
    no JSON column or serializer takes it); ``"depth"`` — arrays/objects nested more than
    JSON_MAX_DEPTH levels. path: keys / indexes as strings (an offending key is shown with
    ``\\u0000``-style escapes). Iterative, so any depth is safe.
    """
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _UNSTORABLE_RE.search(value):
                return "text", path
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return "number", path
            continue
        if isinstance(value, (dict, list)) and len(path) >= JSON_MAX_DEPTH:
            return "depth", path[:8]
        if isinstance(value, dict):
            for key, item in value.items():
                if _UNSTORABLE_RE.search(key):
                    return "text", [*path, _UNSTORABLE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", key)]
                stack.append((item, [*path, key]))
        elif isinstance(value, list):
            stack.extend((item, [*path, str(index)]) for index, item in enumerate(value))
    return None


_PROBLEM_MESSAGES = {
    "text": "Strings must not contain NUL characters or unpaired UTF-16 surrogates",
    "number": "Numbers must be finite (no NaN, Infinity or out-of-range literals)",
}


def json_value_check(data: Any) -> None:
    """Raise ApiError 400 invalid_request_body (``details.path``) when ``data`` holds text we cannot
    store (NUL, unpaired surrogate), a non-finite number, or nests deeper than JSON_MAX_DEPTH."""
    problem = unstorable_json_problem(data)
    if problem is None:
        return
    reason, path = problem
    message = _PROBLEM_MESSAGES.get(reason) or f"JSON body nested deeper than {JSON_MAX_DEPTH} levels"
    raise ApiError(400, INVALID_REQUEST_BODY, message, {"path": path})


def json_body_load(body: bytes | str) -> Any:
    """Parse a request body as JSON. Returns any JSON value (callers check its shape).

    Raises ApiError 400 ``invalid_json_body`` for malformed JSON (including nesting too deep for the
    parser) and 400 ``invalid_request_body`` for values json_value_check refuses.
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, INVALID_JSON_BODY, f"Malformed JSON body: {exc}") from None
    except RecursionError:
        raise ApiError(400, INVALID_JSON_BODY, "Malformed JSON body: nested too deeply") from None
    json_value_check(data)
    return data


def unknown_fields_check(data: dict[str, Any], model: type[BaseModel]) -> None:
    """Refuse keys of a JSON object body that ``model`` (the route's documented request body, a
    covel.openapi.WireIn with ``additionalProperties: false``) does not declare.

    Raises ApiError 400 ``invalid_request`` with ``details.issues`` = ``[{path: [key], message:
    "Unknown field", type: "extra_forbidden"}]`` (one per unknown key, in body order) — the shape
    covel.api gives ninja's validation errors. Nothing is written before the check. A model that
    allows extra keys (``extra="allow"``/``"ignore"``) accepts every key.
    """
    if model.model_config.get("extra") != "forbid":
        return
    # Wire names only: the routes read ``worldId``, so a ``world_id`` key would be silently ignored.
    known = {info.alias or name for name, info in model.model_fields.items()}
    unknown = [key for key in data if key not in known]
    if unknown:
        issues = [{"path": [key], "message": "Unknown field", "type": "extra_forbidden"} for key in unknown]
        raise ApiError(400, INVALID_REQUEST, f"Unknown field(s): {', '.join(unknown)}", {"issues": issues})


def json_type_name(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value: null, boolean, number, string, array, object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
