"""Proposal kinds, their payload JSON Schemas and validation (spec 000, Proposal 类型).

Tools and runtimes never write storage; they return Proposals. The engine's appliers commit
them; this module only defines and validates. A proposal must match its kind's schema and be
JSON-serialisable before any applier runs (failure code `proposal-invalid`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import jsonschema

NARRATIVE_APPEND = "narrative.append"
EVENT_EMIT = "event.emit"
INTERACTION_REQUEST = "interaction.request"
UI_RENDER = "ui.render"
ASSET_GENERATE = "asset.generate"
PLUGIN_DATA = "plugin.data"
PLUGIN_DATA_BATCH = "plugin.data.batch"
PLUGIN_DATA_DELETE = "plugin.data.delete"
PLUGIN_DATA_UPDATE = "plugin.data.update"
CHARACTER_UPSERT = "character.upsert"
CHARACTER_SCHEMA_SET = "character.schema.set"
DIMENSION_INITIALIZE = "dimension.initialize"
DIMENSION_UPDATE = "dimension.update"
LOREBOOK_UPSERT = "lorebook.upsert"

PROPOSAL_INVALID = "proposal-invalid"

_STR = {"type": "string"}
_NONEMPTY = {"type": "string", "minLength": 1}
_PART_STATUS = {"enum": ["pending", "streaming", "success", "error", "paused"]}

UI_PART_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "type", "status", "content"],
    "properties": {
        "id": _NONEMPTY,
        "type": _NONEMPTY,
        "status": _PART_STATUS,
        "content": {},
        "retry": {
            "type": "object",
            "required": ["count"],
            "properties": {"count": {"type": "integer", "minimum": 0}, "lastError": _STR},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

_DATA_OP = {
    "type": "object",
    "required": ["op"],
    "properties": {"op": _NONEMPTY},
}

#: Payload JSON Schema per proposal kind (ProposalPayloadMap).
PROPOSAL_PAYLOAD_SCHEMAS: dict[str, dict[str, Any]] = {
    NARRATIVE_APPEND: {
        "type": "object",
        "required": ["text"],
        "properties": {"text": _STR, "role": _STR, "segments": {"type": "array"}},
    },
    EVENT_EMIT: {
        "type": "object",
        "required": ["topic"],
        "properties": {"topic": _NONEMPTY, "data": {"type": "object"}},
    },
    INTERACTION_REQUEST: {
        "type": "object",
        "required": ["type", "interactionId"],
        "properties": {
            "type": {"enum": ["form", "choice", "confirmation"]},
            "interactionId": _NONEMPTY,
        },
    },
    UI_RENDER: {
        "type": "object",
        "required": ["parts"],
        "properties": {
            "parts": {"type": "array", "items": UI_PART_SCHEMA},
            "layout": {"enum": ["stream", "split", "overlay"]},
            "status": _PART_STATUS,
        },
        "additionalProperties": False,
    },
    ASSET_GENERATE: {
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": _NONEMPTY, "prompt": {}, "options": {"type": "object"}},
    },
    PLUGIN_DATA: {
        "type": "object",
        "required": ["namespace", "key", "value"],
        "properties": {"namespace": _NONEMPTY, "key": _NONEMPTY, "value": {}},
        "additionalProperties": False,
    },
    PLUGIN_DATA_BATCH: {
        "type": "object",
        "required": ["entries"],
        "properties": {
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["namespace", "key"],
                    "properties": {
                        "namespace": _NONEMPTY,
                        "key": _NONEMPTY,
                        "value": {},
                        "delete": {"type": "boolean"},
                    },
                },
            }
        },
    },
    PLUGIN_DATA_DELETE: {
        "type": "object",
        "required": ["namespace", "key"],
        "properties": {"namespace": _NONEMPTY, "key": _NONEMPTY},
        "additionalProperties": False,
    },
    PLUGIN_DATA_UPDATE: {
        "type": "object",
        "required": ["namespace", "key", "ops"],
        "properties": {
            "namespace": _NONEMPTY,
            "key": _NONEMPTY,
            "ops": {"type": "array", "minItems": 1, "items": _DATA_OP},
        },
        "additionalProperties": False,
    },
    CHARACTER_UPSERT: {
        "type": "object",
        "required": ["id", "name"],
        "properties": {
            "id": _NONEMPTY,
            "name": _NONEMPTY,
            "type": _NONEMPTY,
            "aliases": {"type": "array", "items": _NONEMPTY},
            "description": _STR,
            "fields": {},
            "version": {"type": "integer", "minimum": 1},
            "expectedVersion": {"type": "integer", "minimum": 1},
            "createdAt": _STR,
        },
        "additionalProperties": False,
    },
    CHARACTER_SCHEMA_SET: {
        "type": "object",
        "required": ["types", "attributes"],
        "properties": {
            "types": {"type": "array", "items": _NONEMPTY},
            "attributes": {
                "type": "array",
                "items": {"type": "object", "required": ["id", "type"], "properties": {"id": _NONEMPTY}},
            },
        },
        "additionalProperties": False,
    },
    DIMENSION_INITIALIZE: {
        "type": "object",
        "required": ["definitions"],
        "properties": {"definitions": {"type": "object"}, "values": {"type": "object"}},
    },
    DIMENSION_UPDATE: {
        "type": "object",
        "required": ["updates"],
        "properties": {
            "updates": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "value"],
                    "properties": {
                        "id": _NONEMPTY,
                        "value": {},
                        "expectedVersion": {"type": "integer"},
                        "reason": _STR,
                    },
                },
            },
            "source": {"type": "object"},
        },
    },
    LOREBOOK_UPSERT: {
        "type": "object",
        "required": ["entries"],
        "properties": {
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "keys", "content", "strategy"],
                    "properties": {
                        "id": _NONEMPTY,
                        "keys": {"type": "array", "items": _STR},
                        "content": _STR,
                        "strategy": {"enum": ["constant", "selective"]},
                        "position": {},
                        "insertionOrder": {"type": "number"},
                        "enabled": {"type": "boolean"},
                        "extra": {"type": "object"},
                    },
                },
            }
        },
    },
}

#: Published list of proposal kinds (PROPOSAL_TYPES), in spec order.
PROPOSAL_KINDS: tuple[str, ...] = tuple(PROPOSAL_PAYLOAD_SCHEMAS)

_VALIDATORS = {
    kind: jsonschema.Draft202012Validator(schema) for kind, schema in PROPOSAL_PAYLOAD_SCHEMAS.items()
}


@dataclass
class Proposal:
    """One requested write. plugin_id / runtime_id: the source; call_id: the tool call, if any."""

    kind: str
    payload: dict[str, Any]
    plugin_id: str | None = None
    runtime_id: str | None = None
    call_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind, "payload": self.payload}
        if self.plugin_id:
            out["pluginId"] = self.plugin_id
        if self.runtime_id:
            out["runtimeId"] = self.runtime_id
        return out


class ProposalInvalid(ValueError):
    """A proposal failed its kind's payload schema (code `proposal-invalid`)."""

    code = PROPOSAL_INVALID

    def __init__(self, kind: str, issues: list[str]) -> None:
        self.kind = kind
        self.issues = issues
        super().__init__(f"{kind} proposal is invalid: " + "; ".join(issues))


def _check_json_value(value: Any, path: str, issues: list[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        issues.append(f"{path}: non-finite number")
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                issues.append(f"{path}: non-string key {k!r}")
            else:
                _check_json_value(v, f"{path}/{k}", issues)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json_value(v, f"{path}/{i}", issues)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        issues.append(f"{path}: {type(value).__name__} is not JSON")


def proposal_validate(proposal: Proposal) -> dict[str, Any]:
    """Check a proposal's kind and payload; return the payload's JSON copy.

    Raises ProposalInvalid (code "proposal-invalid") listing every issue: unknown kind,
    values JSON cannot hold (non-finite numbers, objects, non-string keys), schema violations
    as "<json pointer>: <message>".
    """
    if proposal.kind not in _VALIDATORS:
        raise ProposalInvalid(proposal.kind, [f"unknown proposal type {proposal.kind!r}"])
    issues: list[str] = []
    _check_json_value(proposal.payload, "", issues)
    if issues:
        raise ProposalInvalid(proposal.kind, issues)
    payload = json.loads(json.dumps(proposal.payload, allow_nan=False))
    errors = sorted(_VALIDATORS[proposal.kind].iter_errors(payload), key=lambda e: list(e.absolute_path))
    if errors:
        raise ProposalInvalid(
            proposal.kind,
            ["/" + "/".join(str(p) for p in e.absolute_path) + ": " + e.message for e in errors],
        )
    return payload
