"""scene-stage/resolver (event scene.set): the scene the story moved to, matched against the
world's registry, as `stage/current` (scene-stage@1 output)."""

from __future__ import annotations

from typing import Any

from . import stage


def handle(ctx) -> dict[str, Any] | None:
    payload = (ctx.trigger_event or {}).get("payload") or ctx.manual_payload or {}
    before = ctx.plugin_data.get(stage.STAGE, stage.CURRENT, None) or {}
    location = str(payload.get("location") or before.get("location") or "").strip()
    if not location:
        return None
    time_of_day = payload.get("timeOfDay") if payload.get("timeOfDay") in stage.TIMES else before.get("timeOfDay") or "day"
    scene = stage.match(stage.registry(ctx.plugin_data.list(stage.SCENES)), location)
    record = stage.scene_record(location, time_of_day, scene, "registry", ctx.logical_turn)
    if before and all(before.get(k) == record[k] for k in ("location", "timeOfDay", "sceneId")):
        return {"scene": before, "changed": False}
    ctx.plugin_data.set(stage.STAGE, stage.CURRENT, record)
    return {"scene": record, "changed": True}
