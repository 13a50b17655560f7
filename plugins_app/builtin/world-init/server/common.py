"""Shared pieces of the world-init tools: where definitions live, the bound narrative source,
localized text and the dimension value schema check.

Private state of this plugin (the world.dimensions@1 provider):
- `definitions/<dimensionId>`: `{name, description?, schema, initialValue, updateRule?}`;
- `settlements/<resultId>`: the receipt `{status: settled|no-change, turn, updateCount}` of one
  narrative source (spec 000, update-dimensions: a settled source is never settled twice).

Runtime inputs (ToolContext.inputs): `narrative` = `{value, source?: {resultId, turnNumber},
readVersions?: {dimensionId: version}}`; `worldTime` = `{value: {display, unit, elapsedSinceStart, elapsedThisTurn}}` (world-time-evolution@1
`/summary`);
`worldDimensions` = `{value: {dimensionId: definition}}` the world author declared.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jsonschema

from plugins_app.toolkit import CONFLICT, UNAVAILABLE, CallContext, ToolError, WorldDimension

DEFINITIONS_NAMESPACE = "definitions"
SETTLEMENTS_NAMESPACE = "settlements"
#: Long correction texts are cut here and end with "…" (spec 000, update-dimensions).
CORRECTION_MAX_CHARS = 1900


def text_pick(value: Any, locale: str) -> str:
    """A plain string, or the best entry of a `{locale: text}` record."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        language = locale.split("-")[0]
        for key in (locale, language, "en-US", "en"):
            if isinstance(value.get(key), str):
                return value[key]
        return str(next(iter(value.values())))
    return ""


#: Receipt states that end a source (a pending-settlement receipt is still open; spec 004 §维度编辑与待结算恢复).
TERMINAL_RECEIPT_STATUSES = frozenset({"settled", "no-change", "manual", "skipped"})


def receipt_is_terminal(receipt: Any) -> bool:
    """Whether a stored settlement receipt ends its source (older receipts without a status count as ended)."""
    return not isinstance(receipt, dict) or receipt.get("status", "settled") in TERMINAL_RECEIPT_STATUSES


def cut(text: str, limit: int = CORRECTION_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def fallback_result_id(logical_turn: int | None, narrative_text: Any) -> str:
    """The settlement key of a narrative bound without a `source`: `turn-<n>-<digest>`, the first
    10 hex digits of the SHA-256 of the narrative text. The opening continuation and the first
    player turn share logical turn 1, so the turn number alone would settle one of them twice;
    the same story (a retried runtime) keeps its key and is never settled twice."""
    digest = hashlib.sha256(str(narrative_text or "").encode("utf-8")).hexdigest()[:10]
    return f"turn-{logical_turn}-{digest}"


def narrative_source(ctx: CallContext) -> dict[str, Any]:
    """`{resultId, turnNumber}` of the bound narrative (`source`, else fallback_result_id).
    Raises unavailable when none is bound."""
    narrative = ctx.inputs.get("narrative")
    if not narrative:
        raise ToolError(UNAVAILABLE, "No narrative is bound to this run; dimensions are settled only after a story turn.")
    source = narrative.get("source") if isinstance(narrative, dict) else None
    if isinstance(source, dict) and source.get("resultId"):
        return {"resultId": str(source["resultId"]), "turnNumber": source.get("turnNumber", ctx.logical_turn)}
    text = narrative.get("value") if isinstance(narrative, dict) else narrative
    return {"resultId": fallback_result_id(ctx.logical_turn, text), "turnNumber": ctx.logical_turn}


def snapshot(ctx: CallContext) -> dict[str, WorldDimension]:
    """The execution's frozen public dimension snapshot by id."""
    return {d.id: d for d in ctx.state.world_dimensions()}


def definitions(ctx: CallContext) -> dict[str, dict[str, Any]]:
    """This provider's private definitions by dimension id."""
    rows = ctx.state.plugin_data_list(ctx.plugin_id, DEFINITIONS_NAMESPACE)
    return {k: v for k, v in rows.items() if isinstance(v, dict)}


def check_read_versions(ctx: CallContext, dims: dict[str, WorldDimension]) -> None:
    """Raise conflict when a version the narrative read differs from the frozen snapshot."""
    narrative = ctx.inputs.get("narrative") or {}
    read = narrative.get("readVersions") if isinstance(narrative, dict) else None
    for dim_id, version in (read or {}).items():
        current = dims.get(dim_id)
        if current is not None and current.version != version:
            raise ToolError(
                CONFLICT,
                f'Dimension "{dim_id}" changed (v{version} → v{current.version}) after this turn\'s story was written. '
                "Stop now; the next turn reads the current version.",
            )


def value_issues(schema: dict[str, Any] | None, value: Any) -> list[str]:
    """Validation messages of value against a dimension's JSON Schema (first 5)."""
    if not isinstance(schema, dict):
        return []
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))[:5]:
        where = "/".join(str(p) for p in err.absolute_path) or "(value)"
        out.append(f"{where}: {err.message}")
    return out
