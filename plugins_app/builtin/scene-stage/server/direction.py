"""scene-stage/direction (event stage.direction): actor cues into `direction/current`, the
paragraph speakers into `dialogue/turn-<n>` and `dialogue/latest` (stage-direction@1 output)."""

from __future__ import annotations

from typing import Any

from . import stage


def handle(ctx) -> dict[str, Any] | None:
    payload = (ctx.trigger_event or {}).get("payload") or ctx.manual_payload or {}
    names = {c["id"]: c["name"] for c in ctx.world.characters() if c.get("id") and c.get("name")}
    out: dict[str, Any] = {}
    cues = [c for c in payload.get("cues") or [] if isinstance(c, dict)]
    if cues:
        before = ctx.plugin_data.get(stage.DIRECTION, stage.CURRENT, None) or {}
        actors, unknown = stage.apply_cues(before.get("actors") or [], cues, names)
        record = {"schemaVersion": 1, "actors": actors, "turn": ctx.logical_turn}
        if actors != (before.get("actors") or []) or not before:
            ctx.plugin_data.set(stage.DIRECTION, stage.CURRENT, record)
        out["actors"], out["unknownCueIds"] = actors, unknown
    dialogue = payload.get("dialogue") if isinstance(payload.get("dialogue"), dict) else None
    if dialogue and isinstance(dialogue.get("paragraphSpeakers"), list):
        resolved, unknown = stage.speakers(dialogue["paragraphSpeakers"][:80], names)
        record = {"schemaVersion": 1, "turn": ctx.logical_turn, "paragraphSpeakers": resolved, "unknownIds": unknown}
        if ctx.logical_turn is not None:
            ctx.plugin_data.set(stage.DIALOGUE, f"turn-{ctx.logical_turn}", record)
        ctx.plugin_data.set(stage.DIALOGUE, stage.LATEST, record)
        out["paragraphSpeakers"], out["unknownIds"] = resolved, unknown
        if unknown:
            ctx.log(f"stage.direction: unknown character ids {unknown} became null")
    return out or None
