"""world-dimension-get and world-dimension-list (spec 000, world-dimension-get/-list).

Both read the execution's frozen public snapshot (StateView.world_dimensions): no private
namespaces, no staged writes of the caller, no fallback to initial values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import READ_ONLY_SAFE, Tool, ToolResult, tool
from turns.engine.tools.envelope import model_facing_json

GET_NAME = "world-dimension-get"
LIST_NAME = "world-dimension-list"
MAX_QUERIES = 20
DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 2000
#: Characters of one value shown in the summary before it is cut (unpaginated values only).
VALUE_TEXT_BUDGET = 4000

GET_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["queries"],
    "properties": {
        "queries": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_QUERIES,
            "items": {
                "type": "object",
                "required": ["dimension"],
                "properties": {
                    "dimension": {"type": "string", "minLength": 1},
                    "path": {
                        "type": "string",
                        "description": "Relative to the value: a.b, regions[0].name, [0].name or /regions/0/name.",
                    },
                    "offset": {"type": "integer", "minimum": 0},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT},
                },
                "additionalProperties": False,
            },
        }
    },
    "additionalProperties": False,
}


class PathSyntaxError(ValueError):
    pass


_MISSING = object()
_DOT_TOKEN_RE = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def parse_path(path: str) -> list[str | int]:
    """Segments of a dot path, index path, root-array path or JSON Pointer (~0, ~1).

    Raises PathSyntaxError for empty segments, unclosed or non-numeric brackets.
    """
    if path == "":
        return []
    if path.startswith("/"):
        return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    segments: list[str | int] = []
    i = 0
    expect_name = True
    while i < len(path):
        if path[i] == ".":
            if i == 0 or expect_name:
                raise PathSyntaxError(f"empty segment at position {i}")
            expect_name = True
            i += 1
            continue
        m = _DOT_TOKEN_RE.match(path, i)
        if not m:
            raise PathSyntaxError(f"unexpected {path[i]!r} at position {i}")
        if m.group(1) is not None:
            segments.append(int(m.group(1)))
        else:
            if not expect_name:
                raise PathSyntaxError(f"missing '.' before position {i}")
            segments.append(m.group(2))
        expect_name = False
        i = m.end()
    if expect_name:
        raise PathSyntaxError("path ends with '.'")
    return segments


def lookup(value: Any, segments: list[str | int]) -> Any:
    """Own-property lookup; returns _MISSING when the path does not exist."""
    node = value
    for seg in segments:
        if isinstance(node, dict):
            key = str(seg)
            if key not in node:
                return _MISSING
            node = node[key]
        elif isinstance(node, list):
            if isinstance(seg, str):
                if not seg.isdigit():
                    return _MISSING
                seg = int(seg)
            if seg >= len(node):
                return _MISSING
            node = node[seg]
        else:
            return _MISSING
    return node


@dataclass
class _Page:
    value: Any
    total: int
    next_offset: int | None


def paginate(value: Any, offset: int, limit: int) -> _Page | None:
    """Strings by character, arrays by element, objects by entry; None for scalars."""
    if isinstance(value, str):
        items: Any = value[offset : offset + limit]
        total = len(value)
    elif isinstance(value, list):
        items = value[offset : offset + limit]
        total = len(value)
    elif isinstance(value, dict):
        entries = list(value.items())
        items = dict(entries[offset : offset + limit])
        total = len(entries)
    else:
        return None
    end = offset + limit
    return _Page(items, total, end if end < total else None)


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _get_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    dims = {d.id: d for d in ctx.state.world_dimensions()}
    results: list[dict[str, Any]] = []
    lines: list[str] = []
    for q in args["queries"]:
        dim_id = q["dimension"]
        path = q.get("path", "")
        label = f"{dim_id}{'' if not path else ('' if path.startswith(('[', '/')) else '.') + path}"
        dim = dims.get(dim_id)
        if dim is None:
            results.append({"dimension": dim_id, "found": False})
            lines.append(f"{label}: not found (no such dimension)")
            continue
        try:
            segments = parse_path(path)
        except PathSyntaxError as exc:
            results.append({"dimension": dim_id, "path": path, "found": False, "error": str(exc)})
            lines.append(f"{label}: path syntax error: {exc}")
            continue
        raw = lookup(dim.value, segments)
        shown = lookup(model_facing_json(dim.value), segments)
        result: dict[str, Any] = {"dimension": dim_id, "found": raw is not _MISSING}
        if path:
            result["path"] = path
        if raw is _MISSING:
            results.append(result)
            lines.append(f"{label} (v{dim.version}): not found")
            continue
        result["value"] = raw
        if dim.name is not None:
            result["name"] = dim.name
        if dim.schema is not None:
            result["schema"] = dim.schema
        result["version"] = dim.version
        head = f"{label} (v{dim.version})"
        if "offset" in q or "limit" in q:
            offset, limit = q.get("offset", 0), q.get("limit", DEFAULT_PAGE_LIMIT)
            page = paginate(raw, offset, limit)
            shown_page = paginate(shown, offset, limit) if shown is not _MISSING else None
            if page is not None:
                result["value"] = page.value
                result["page"] = {"value": page.value, "total": page.total}
                if page.next_offset is not None:
                    result["page"]["nextOffset"] = page.next_offset
                text = _render(shown_page.value if shown_page else "")
                tail = f" [{offset}–{min(offset + limit, page.total)} of {page.total}"
                tail += f"; next offset {page.next_offset}]" if page.next_offset is not None else "]"
                lines.append(f"{head} = {text}{tail}")
                results.append(result)
                continue
        text = _render(shown) if shown is not _MISSING else "(bookkeeping field, not shown)"
        if len(text) > VALUE_TEXT_BUDGET:
            text = (
                text[:VALUE_TEXT_BUDGET]
                + f" … [truncated: {len(text)} characters in total; this is not the whole value. "
                "Query a narrower path or use offset/limit.]"
            )
        lines.append(f"{head} = {text}")
        results.append(result)
    text = "\n".join(lines)
    return ToolResult(content={"results": results, "text": text}, summary=text)


def _list_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    dims = []
    lines = []
    for d in ctx.state.world_dimensions():
        entry: dict[str, Any] = {"id": d.id, "name": d.name or d.id, "version": d.version}
        kind = (d.schema or {}).get("type")
        if isinstance(kind, str):
            entry["type"] = kind
        dims.append(entry)
        lines.append(f"{d.id} — {entry['name']}" + (f" ({kind})" if isinstance(kind, str) else "") + f" v{d.version}")
    summary = "\n".join(lines) if lines else "This world has no open dimensions."
    return ToolResult(content={"dimensions": dims}, summary=summary)


def build_get() -> Tool:
    return tool(
        name=GET_NAME,
        description=(
            "Read current world dimension values by id and optional path (a.b, a[0].b, [0], /a/0/b), "
            "with offset/limit paging. Values are frozen for this turn."
        ),
        parameters=GET_PARAMETERS,
        annotations=READ_ONLY_SAFE,
        execute=_get_execute,
    )


def build_list() -> Tool:
    return tool(
        name=LIST_NAME,
        description="List open world dimensions (id, name, type, version) without values or rules.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        annotations=READ_ONLY_SAFE,
        execute=_list_execute,
    )
