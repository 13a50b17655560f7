"""scene-stage/seed (setup, once): the registry's first scene on the stage before any reply."""

from __future__ import annotations

from typing import Any

from . import stage


def handle(ctx) -> dict[str, Any]:
    if ctx.plugin_data.get(stage.STAGE, stage.CURRENT, None) is None:
        scenes = stage.registry(ctx.plugin_data.list(stage.SCENES))
        if scenes:
            first = scenes[0]
            ctx.plugin_data.set(stage.STAGE, stage.CURRENT, stage.scene_record(str(first["name"]), "day", first, "world", None))
    return {"preGameDone": True}
