"""world-init/edit-dimensions: the dimension editor (spec 004 §维度编辑与待结算恢复), run through
plugin-rpc ``kind: runtime`` with payload ``{updates, resultId?, resolution?}``.

- ``updates``: at most 64 ``{id, expectedVersion, value}``, ids unique, each value checked against
  the dimension's schema; only existing dimensions (no new definitions, no schema changes).
- Without a source: a plain correction, at least one update.
- ``resultId`` + ``resolution`` (both or neither) resolve a ``pending-settlement`` receipt:
  ``manual`` (corrections optional, ``updates: []`` confirms), ``skipped`` (``updates`` must be []).
- A stale ``expectedVersion`` seen here returns ``{applied: false, code: "dimension-version-conflict",
  currentVersions}`` and writes nothing; one the commit finds makes the RPC answer 409.
- Otherwise one dimension.update proposal (``origin: "editor"``, plus ``settlement`` when
  resolving); the host's applier writes the values and the receipt. Output ``{applied: true,
  updated: [ids], resolution?}``. An invalid payload fails the runtime (``invalid-input``).
"""
from __future__ import annotations

from typing import Any

from .common import SETTLEMENTS_NAMESPACE, value_issues

MAX_UPDATES = 64
RESOLUTIONS = ("manual", "skipped")
CONFLICT_CODE = "dimension-version-conflict"


def _failed(message: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"code": "invalid-input", "message": message}}


def handle(ctx) -> dict[str, Any]:
    payload = ctx.manual_payload if isinstance(ctx.manual_payload, dict) else {}
    updates = payload.get("updates")
    result_id, resolution = payload.get("resultId"), payload.get("resolution")
    if not isinstance(updates, list):
        return _failed("updates must be an array")
    if len(updates) > MAX_UPDATES:
        return _failed(f"updates: at most {MAX_UPDATES} entries")
    if (result_id is None) != (resolution is None):
        return _failed("resultId and resolution come together")
    if resolution is not None and (resolution not in RESOLUTIONS or not isinstance(result_id, str) or not result_id):
        return _failed("resolution is manual or skipped, with the receipt's resultId")
    if resolution is None and not updates:
        return _failed("a correction without a source needs at least one update")
    if resolution == "skipped" and updates:
        return _failed("skipping a source keeps the current values: updates must be []")
    records = {d["id"]: d for d in ctx.world.dimension_records()}
    seen: set[str] = set()
    clean: list[dict[str, Any]] = []
    stale: dict[str, int] = {}
    for index, update in enumerate(updates):
        if not isinstance(update, dict) or not isinstance(update.get("id"), str) or "value" not in update:
            return _failed(f"updates[{index}] is {{id, expectedVersion, value}}")
        dim_id = update["id"]
        if dim_id in seen:
            return _failed(f"updates[{index}]: {dim_id} appears twice")
        seen.add(dim_id)
        record = records.get(dim_id)
        if record is None:
            return _failed(f"updates[{index}]: {dim_id} is not a dimension of this session")
        expected = update.get("expectedVersion")
        if not isinstance(expected, int) or isinstance(expected, bool):
            return _failed(f"updates[{index}]: expectedVersion (an integer) is required")
        issues = value_issues(record.get("schema"), update["value"])
        if issues:
            return _failed(f"updates[{index}] ({dim_id}): " + "; ".join(issues))
        if expected != record["version"]:
            stale[dim_id] = record["version"]
        clean.append({"id": dim_id, "value": update["value"], "expectedVersion": expected})
    if stale:
        return {"applied": False, "code": CONFLICT_CODE,
                "currentVersions": {d: r["version"] for d, r in records.items()}}
    proposal: dict[str, Any] = {"updates": clean, "origin": "editor"}
    if resolution is not None:
        receipt = ctx.plugin_data.get(SETTLEMENTS_NAMESPACE, result_id)
        if not isinstance(receipt, dict) or receipt.get("status") != "pending-settlement":
            return {"applied": False, "code": "settlement-not-pending",
                    "message": f"source {result_id} has no pending settlement"}
        proposal["settlement"] = {"resultId": result_id, "resolution": resolution}
    out: dict[str, Any] = {"applied": True, "updated": [u["id"] for u in clean],
                           "proposals": [{"type": "dimension.update", "payload": proposal}]}
    if resolution is not None:
        out["resolution"] = resolution
    return out
