"""update-dimensions and dimension-rule-get (spec 000 §update-dimensions, §dimension-rule-get).

update-dimensions settles one narrative source: the whole batch is checked against the frozen
snapshot (versions, value schemas, the clock) and staged as ONE dimension.update proposal holding
full values with each dimension's expectedVersion (CAS), plus the settlement receipt. The model
never supplies source, versions or expectedVersion; they come from the bound narrative and the
snapshot.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from plugins_app.toolkit import (
    CONFLICT,
    DIMENSION_UPDATE,
    INVALID_INPUT,
    NOT_FOUND,
    READ_ONLY_SAFE,
    ZH_CN,
    CallContext,
    Proposal,
    Tool,
    ToolError,
    ToolResult,
    WorldDimension,
    instruction_locale_for,
    tool,
)

from .common import (
    SETTLEMENTS_NAMESPACE,
    check_read_versions,
    receipt_is_terminal,
    cut,
    definitions,
    narrative_source,
    snapshot,
    text_pick,
    value_issues,
)

UPDATE_NAME = "update-dimensions"
RULE_GET_NAME = "dimension-rule-get"
MAX_UPDATES = 64
MAX_CHANGES = 32
RULE_PAGE_MAX = 6000
UNSAFE_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})
_INDEX_RE = re.compile(r"^(.*?)\[(\d+)\]$")

_CHANGE = {
    "type": "object",
    "required": ["path"],
    "properties": {"path": {"type": "string", "description": "Dot path inside the current value."}, "value": {}},
}

UPDATE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["updates"],
    "properties": {
        "followsClock": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Ids of dimensions whose rule depends on world time or elapsed time.",
        },
        "updates": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {
                    "id": {"type": "string", "minLength": 1},
                    "value": {"description": "The complete new value."},
                    "changes": {"type": "array", "items": _CHANGE, "description": "Field changes by dot path."},
                    "reason": {"type": "string"},
                },
            },
            "description": "One entry per changed dimension; [] when nothing changed this turn.",
        },
    },
}

RULE_GET_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["id", "part"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "part": {"enum": ["rule", "schema"]},
        "offset": {"type": "integer", "minimum": 0, "default": 0},
        "limit": {"type": "integer", "minimum": 1, "maximum": RULE_PAGE_MAX, "default": RULE_PAGE_MAX},
    },
    "additionalProperties": False,
}

_SUMMARIES = {
    "updated": {"en-US": "Dimensions updated: {n} change(s).", ZH_CN: "维度已更新：{n} 项改动。"},
    "none": {"en-US": "No change recorded.", ZH_CN: "未记录改动。"},
    "settled": {"en-US": "This turn's dimensions were already settled.", ZH_CN: "本回合的维度已结算。"},
}


def _summary(kind: str, locale: str, n: int = 0) -> str:
    return _SUMMARIES[kind][instruction_locale_for(locale)].format(n=n)


def _invalid(message: str) -> ToolError:
    return ToolError(INVALID_INPUT, cut(message), hint="Fix the batch and call update-dimensions again.")


# ------------------------------------------------------------------ paths


def _split_path(path: str, current: Any) -> list[str | int]:
    """Dot path → segments; "/" separates too unless the value already has that key."""
    if "/" in path and not (isinstance(current, dict) and path in current):
        path = path.strip("/").replace("/", ".")
    segments: list[str | int] = []
    for raw in path.split("."):
        match = _INDEX_RE.match(raw)
        if match:
            if match.group(1):
                segments.append(match.group(1))
            segments.append(int(match.group(2)))
        elif raw.isdigit():
            segments.append(int(raw))
        else:
            segments.append(raw)
    return segments


def _set_path(value: Any, segments: list[str | int], new: Any, path: str) -> Any:
    if not segments:
        return new
    root = value
    node = root
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if isinstance(node, list):
            if not isinstance(seg, int) or seg > len(node):
                raise _invalid(f'changes path "{path}": index {seg} is outside the list (length {len(node)})')
            if last:
                if seg == len(node):
                    node.append(new)
                else:
                    node[seg] = new
            else:
                if seg == len(node):
                    node.append({})
                node = node[seg]
        elif isinstance(node, dict):
            key = str(seg)
            if last:
                node[key] = new
            else:
                if not isinstance(node.get(key), (dict, list)):
                    node[key] = {}
                node = node[key]
        else:
            raise _invalid(f'changes path "{path}": it goes inside a {type(node).__name__} value')
    return root


def _entry_owner(dims: dict[str, WorldDimension], name: str) -> tuple[str, str] | None:
    """(dimension id, path) when `name` is an entry inside some dimension's value."""
    for dim in dims.values():
        value = dim.value
        if isinstance(value, dict) and name in value:
            return dim.id, name
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict) and name in (item.get("id"), item.get("name")):
                    return dim.id, f"[{i}]"
        if isinstance(value, dict):
            for key, sub in value.items():
                if isinstance(sub, dict) and name in sub:
                    return dim.id, f"{key}.{name}"
    return None


def _derived_fields(schema: dict[str, Any] | None) -> list[str]:
    props = (schema or {}).get("properties") or {}
    return [k for k, v in props.items() if isinstance(v, dict) and "x-derive" in v]


# ------------------------------------------------------------------ update-dimensions


def _normalize(args: dict[str, Any], dims: dict[str, WorldDimension]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Merge and tidy the model's entries (spec table 自动整理的写法).

    Returns ({id: {"value"?: v, "changes"?: [...], "reason"?: str}}, ids mentioned at all).
    """
    updates = args.get("updates") or []
    if len(updates) > MAX_UPDATES:
        raise _invalid(f"updates: {len(updates)} entries; at most {MAX_UPDATES} per call")
    merged: dict[str, dict[str, Any]] = {}
    has_value: set[str] = set()
    mentioned: set[str] = set()
    for i, raw in enumerate(updates):
        dim_id = raw["id"]
        if "value" in raw and raw.get("changes"):
            raise _invalid(f"updates[{i}] ({dim_id}): give either value or changes, not both")
        changes = [{"path": c["path"], "value": c.get("value")} for c in raw.get("changes") or []]
        entry: dict[str, Any] = {}
        if "value" in raw:
            entry["value"] = raw["value"]
        elif len(changes) == 1 and changes[0]["path"] == "":
            entry["value"] = changes[0]["value"]
        elif changes:
            entry["changes"] = changes
        if isinstance(raw.get("reason"), str) and raw["reason"].strip():
            entry["reason"] = raw["reason"].strip()
        mentioned.add(dim_id)
        if dim_id in merged:
            if "value" in entry or dim_id in has_value:
                raise _invalid(
                    f'updates[{i}]: "{dim_id}" appears more than once and one entry gives a complete value; '
                    "send one entry per dimension"
                )
            prev = merged[dim_id]
            if "changes" in entry:
                prev["changes"] = prev.get("changes", []) + entry["changes"]
            if "reason" in entry:
                prev["reason"] = "; ".join(r for r in (prev.get("reason"), entry["reason"]) if r)
            continue
        if "value" in entry:
            has_value.add(dim_id)
        merged[dim_id] = entry
    for dim_id, entry in merged.items():
        if len(entry.get("changes", [])) > MAX_CHANGES:
            raise _invalid(f'updates ({dim_id}): {len(entry["changes"])} changes; at most {MAX_CHANGES}')
        for change in entry.get("changes", []):
            segments = re.split(r"[./\[\]]", change["path"])
            if UNSAFE_SEGMENTS & set(segments):
                raise _invalid(
                    f'updates ({dim_id}): the path "{change["path"]}" uses a reserved segment '
                    "(__proto__, constructor, prototype); the whole batch was rejected"
                )
    unknown = [d for d in mentioned if d not in dims]
    if unknown:
        lines = []
        for name in unknown:
            owner = _entry_owner(dims, name)
            if owner:
                lines.append(
                    f'"{name}" is not a dimension: it is an entry of dimension "{owner[0]}". '
                    f'Update "{owner[0]}" with changes whose path starts with "{owner[1]}".'
                )
            else:
                lines.append(f'"{name}" is not a dimension.')
        known = ", ".join(dims) or "(none)"
        raise ToolError(NOT_FOUND, cut(" ".join(lines) + f" Known dimensions: {known}."))
    return merged, mentioned


def _clock_check(args: dict[str, Any], dims: dict[str, WorldDimension], mentioned: set[str], ctx: CallContext) -> None:
    world_time = (ctx.inputs.get("worldTime") or {}).get("value")
    if not isinstance(world_time, dict) or not world_time.get("elapsedThisTurn"):
        return
    follows = [d for d in args.get("followsClock") or [] if d in dims]
    missing = [d for d in follows if d not in mentioned]
    if not missing:
        return
    unit = world_time.get("unit", "minute")
    message = (
        f"The world clock moved this turn: it is now {world_time.get('display', '')}; "
        f"{world_time.get('elapsedThisTurn')} {unit}(s) passed this turn and {world_time.get('elapsedSinceStart')} "
        f"{unit}(s) since the start. These dimensions follow the clock and need an entry: {', '.join(missing)}. "
        "Give each its new value, or just {id, reason} when its rule gives the same value."
    )
    raise _invalid(message)


def _update_execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    source = narrative_source(ctx)
    exists, receipt = ctx.state.plugin_data_get(ctx.plugin_id, SETTLEMENTS_NAMESPACE, source["resultId"])
    if exists and receipt_is_terminal(receipt):
        return ToolResult(content={"alreadySettled": True}, summary=_summary("settled", ctx.locale))
    dims = snapshot(ctx)
    merged, mentioned = _normalize(args, dims)
    _clock_check(args, dims, mentioned, ctx)
    check_read_versions(ctx, dims)
    defs = definitions(ctx)
    updates: list[dict[str, Any]] = []
    issues: list[str] = []
    for dim_id, entry in merged.items():
        if "value" not in entry and "changes" not in entry:
            continue  # {id, reason}: the rule gives the same value
        dim = dims[dim_id]
        schema = dim.schema or (defs.get(dim_id) or {}).get("schema")
        if "value" in entry:
            new = copy.deepcopy(entry["value"])
        else:
            new = copy.deepcopy(dim.value)
            for change in entry["changes"]:
                new = _set_path(new, _split_path(change["path"], dim.value), copy.deepcopy(change["value"]), change["path"])
        for field_name in _derived_fields(schema):  # clock-derived fields keep the current value
            if isinstance(new, dict):
                if isinstance(dim.value, dict) and field_name in dim.value:
                    new[field_name] = copy.deepcopy(dim.value[field_name])
                else:
                    new.pop(field_name, None)
        issues += [f"{dim_id}: {m}" for m in value_issues(schema, new)]
        update = {"id": dim_id, "value": new, "expectedVersion": dim.version}
        if entry.get("reason"):
            update["reason"] = entry["reason"]
        updates.append(update)
    if issues:
        raise _invalid("Invalid dimension values: " + "; ".join(issues))
    # One proposal: the host's dimension.update applier writes this source's settlement receipt
    # (settled / no-change, or pending-settlement when a version changed meanwhile) in the same
    # transaction (turns.engine.settlements).
    proposals = [Proposal(DIMENSION_UPDATE, {"updates": updates, "source": source})]
    summary = _summary("updated", ctx.locale, len(updates)) if updates else _summary("none", ctx.locale)
    return ToolResult(content={"updateCount": len(updates)}, proposals=proposals, summary=summary)


# ------------------------------------------------------------------ dimension-rule-get


def _rule_get_execute(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    narrative_source(ctx)
    dims = snapshot(ctx)
    defs = definitions(ctx)
    dim_id = args["id"]
    if dim_id not in defs and dim_id not in dims:
        known = ", ".join(sorted(set(defs) | set(dims))) or "(none)"
        raise ToolError(NOT_FOUND, f'Dimension "{dim_id}" does not exist. Known dimensions: {known}.')
    check_read_versions(ctx, dims)
    definition = defs.get(dim_id) or {}
    dim = dims.get(dim_id)
    version = dim.version if dim is not None else 1
    frozen = definition.get("version")
    if isinstance(frozen, int) and frozen != version:
        raise ToolError(CONFLICT, f'Dimension "{dim_id}" changed to v{version}. Stop now; the next turn reads it again.')
    if args["part"] == "rule":
        text = text_pick(definition.get("updateRule") or "", ctx.content_locale)
    else:
        schema = (dim.schema if dim is not None else None) or definition.get("schema") or {}
        text = json.dumps(schema, ensure_ascii=False, indent=1)
    offset, limit = args["offset"], args["limit"]
    page = text[offset : offset + limit]
    out: dict[str, Any] = {"id": dim_id, "version": version, "content": page, "complete": offset + limit >= len(text)}
    if not out["complete"]:
        out["nextOffset"] = offset + limit
    return out


def build_update() -> Tool:
    return tool(
        name=UPDATE_NAME,
        description=(
            "Settle this story turn's world dimensions in one batch: for each changed dimension give the complete "
            "`value` or `changes` [{path, value}]; list in `followsClock` the dimensions whose rule depends on "
            "elapsed time. Call with updates: [] when nothing changed."
        ),
        parameters=UPDATE_PARAMETERS,
        annotations={"idempotent": True},
        execute=_update_execute,
    )


def build_rule_get() -> Tool:
    return tool(
        name=RULE_GET_NAME,
        description="Read one dimension's private update rule or value schema, paged by characters (limit ≤ 6000).",
        parameters=RULE_GET_PARAMETERS,
        annotations=READ_ONLY_SAFE,
        execute=_rule_get_execute,
    )
