"""emit-event: emit one declared domain event (spec 000, emit-event, 一次调用的四种结果).

Checked in order: (1) already emitted in this tool loop → success, no second event;
(2) topic not in the session's public directory → ToolError("refused") (not a runtime failure);
(3) payload fails the topic's JSON Schema → invalid-input; (4) success with the event in the
result's events channel (never as an event.emit proposal).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.state import EventTopic
from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.errors import INVALID_INPUT, REFUSED, ToolError

NAME = "emit-event"
NO_TOPICS_TEXT = "(none — no consumer plugin active)"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["topic"],
    "properties": {
        "topic": {"type": "string", "minLength": 1, "description": "A topic declared by an active plugin."},
        "data": {"type": "object", "default": {}, "description": "Event payload, checked against the topic's schema."},
    },
    "additionalProperties": False,
}


def public_topics(topics: list[EventTopic]) -> list[EventTopic]:
    """Advertised topics only (advertise: false topics are internal)."""
    return [t for t in topics if t.advertise]


def _has_ref(node: Any) -> bool:
    if isinstance(node, dict):
        return "$ref" in node or "$defs" in node or any(_has_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v) for v in node)
    return False


def _payload_view(schema: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(schema, dict) or _has_ref(schema):
        return {"type": "object"}
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return {"type": "object"}
    out = copy.deepcopy(schema)
    out.pop("$schema", None)
    out.pop("$id", None)
    return out


def model_parameters_for(topics: list[EventTopic]) -> dict[str, Any]:
    """Session-specific parameter schema for the model: topic enum plus payload schema(s).

    One topic: data is its schema; several: data.anyOf with each branch titled by its topic;
    schemas with $ref/$defs or unreadable ones show as a plain object; no public topic:
    the generic definition.
    """
    public = public_topics(topics)
    if not public:
        return copy.deepcopy(PARAMETERS)
    params = copy.deepcopy(PARAMETERS)
    params["properties"]["topic"] = {"type": "string", "enum": [t.topic for t in public]}
    if len(public) == 1:
        data = _payload_view(public[0].schema)
    else:
        data = {"anyOf": [dict(_payload_view(t.schema), title=t.topic) for t in public]}
    data.setdefault("description", "Event payload for the chosen topic.")
    params["properties"]["data"] = data
    return params


def event_directory_text(topics: list[EventTopic], *, zh: bool) -> str:
    """The prompt's event directory for a runtime that offers emit-event with advertiseEvents
    (spec 000 §emit-event): one line per public topic with its description and a summary of the
    required payload fields; the payload schema itself is in the tool definition, except when it
    holds $ref/$defs (then the full schema follows the line, since the tool shows a plain object).
    An unreadable schema is marked "(schema unavailable)". Empty text when no topic is public.
    """
    public = public_topics(topics)
    if not public:
        return ""
    head = ("[事件]\n用 emit-event 发出以下事件；topic 和 payload 格式见该工具的定义。"
            if zh else "[EVENTS]\nEmit these with emit-event; the topic and payload format are in that tool's definition.")
    lines = [head]
    for item in public:
        line = f"- {item.topic}"
        if item.description:
            line += f" — {item.description}"
        if item.schema_unavailable:
            line += " (schema unavailable)"
        elif isinstance(item.schema, dict):
            required = [r for r in item.schema.get("required") or [] if isinstance(r, str)]
            if required:
                line += (" （必填：" + "、".join(required) + "）") if zh else f" (required: {', '.join(required)})"
            if _has_ref(item.schema):
                line += "\n  payload schema: " + json.dumps(item.schema, ensure_ascii=False)
        lines.append(line)
    return "\n".join(lines)


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    topic = args["topic"]
    data = args.get("data") or {}
    if topic in ctx.emitted_event_topics:
        return ToolResult(
            content={"topic": topic, "alreadyEmitted": True},
            summary=(
                f'event "{topic}" was already emitted this turn and is recorded. '
                "Do not emit it again; continue with the task."
            ),
        )
    public = {t.topic: t for t in public_topics(ctx.state.event_topics())}
    if topic not in public:
        available = ", ".join(public) if public else NO_TOPICS_TEXT
        raise ToolError(
            REFUSED,
            f'unknown topic "{topic}"; no active plugin consumes it, so it cannot be emitted. '
            f"Do not retry it. Available topics: {available}",
        )
    schema = public[topic].schema
    if isinstance(schema, dict):
        validator = jsonschema.Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            text = "; ".join(
                ("data/" + "/".join(map(str, e.absolute_path)) if e.absolute_path else "data") + " " + e.message
                for e in errors
            )
            raise ToolError(INVALID_INPUT, f"event payload rejected: {text}")
    event = {"topic": topic, "data": copy.deepcopy(data)}
    return ToolResult(
        content={"topic": topic, "emittedEvents": [event]},
        events=[event],
        summary=f'event "{topic}" emitted and recorded for this turn. Do not emit it again.',
    )


def build() -> Tool:
    return tool(
        name=NAME,
        description="Emit one domain event declared by an active plugin (one topic per call).",
        parameters=PARAMETERS,
        execute=_execute,
    )
