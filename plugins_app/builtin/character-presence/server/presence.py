"""Character presence records (schemas/presence.schema.json), shared with character-blueprint's
`presence` runtime: read a manual payload, check it, store it, pick a stage variant."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

NAMESPACE = "presence"
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "presence.schema.json"


@lru_cache(maxsize=1)
def _validator() -> Any:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def record_read(payload: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) from ``{presence}`` or ``{presenceJson}``; (None, message) when it is missing,
    unreadable or breaks the schema (the message names the first failing path)."""
    payload = payload or {}
    record = payload.get("presence")
    if record is None and isinstance(payload.get("presenceJson"), str):
        try:
            record = json.loads(payload["presenceJson"])
        except ValueError as exc:
            return None, f"presenceJson: not JSON ({exc.msg})"
    if not isinstance(record, dict):
        return None, "presence: an object {schemaVersion: 1, characterId, ...} is required"
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "presence"
        return None, f"presence.{where}: {errors[0].message}"
    return record, None


def store(ctx, payload: dict[str, Any] | None) -> dict[str, Any]:
    """The manual runtime body: check, default displayName, write `presence/<characterId>`."""
    record, problem = record_read(payload)
    if problem:
        return {"status": "failed", "error": {"code": "invalid-input", "message": problem}}
    names = {c.get("id"): c.get("name") for c in ctx.world.characters()}
    record = dict(record)
    if not record.get("displayName") and names.get(record["characterId"]):
        record["displayName"] = names[record["characterId"]]
    ctx.plugin_data.set(NAMESPACE, record["characterId"], record)
    return {"presence": record, "known": record["characterId"] in names}


def variant_pick(record: dict[str, Any], *, variant_id: str | None = None, outfit: str | None = None,
                 expression: str | None = None, pose: str | None = None) -> dict[str, Any] | None:
    """The media reference the stage shows (see PLUGIN.md for the fallback order); None if none."""
    visuals = record.get("visuals") if isinstance(record.get("visuals"), dict) else {}
    variants = [v for v in visuals.get("variants") or [] if isinstance(v, dict)]

    def find(**want: Any) -> dict[str, Any] | None:
        return next((v for v in variants if all(v.get(k) == w for k, w in want.items())), None)

    tries = []
    if variant_id:
        tries.append({"id": variant_id})
    if outfit or expression or pose:
        tries += [{"outfit": outfit, "expression": expression, "pose": pose},
                  {"outfit": outfit, "expression": expression, "pose": "default"},
                  {"outfit": outfit, "expression": "neutral", "pose": "default"}]
    for want in tries:
        hit = find(**{k: v for k, v in want.items() if v is not None})
        if hit:
            return hit.get("sprite")
    default = find(id=visuals.get("defaultVariant")) if visuals.get("defaultVariant") else None
    chosen = default or (variants[0] if variants else None)
    if chosen:
        return chosen.get("sprite")
    return record.get("sprite") or record.get("avatar")
