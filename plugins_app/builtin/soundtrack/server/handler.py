"""soundtrack/scene and soundtrack/cue (event runtimes): record the scene or the mood, then the
track they choose (`state/track`). A repeat, or a world without a track list, writes nothing."""

from __future__ import annotations

from typing import Any

from . import soundtrack as S


def _record(ctx, key: str, value: str | None) -> dict[str, Any] | None:
    tracks = S.track_list(ctx.plugin_data.list(S.TRACKS))
    if not tracks or not value:
        return None
    before = ctx.plugin_data.get(S.STATE, key, None) or {}
    if before.get("value") == value:
        return {"changed": False}
    ctx.plugin_data.set(S.STATE, key, {"value": value, "turn": ctx.logical_turn})
    scene = value if key == "scene" else (ctx.plugin_data.get(S.STATE, "scene", None) or {}).get("value")
    mood = value if key == "mood" else (ctx.plugin_data.get(S.STATE, "mood", None) or {}).get("value")
    chosen = S.track_view(S.track_choose(tracks, scene, mood), ctx.plugin_data.list(S.ASSETS))
    ctx.plugin_data.set(S.STATE, "track", {"track": chosen, "scene": scene, "mood": mood, "turn": ctx.logical_turn})
    return {"changed": True, "track": chosen}


def _payload(ctx) -> dict[str, Any]:
    return (ctx.trigger_event or {}).get("payload") or ctx.manual_payload or {}


def scene(ctx) -> dict[str, Any] | None:
    return _record(ctx, "scene", str(_payload(ctx).get("location") or "").strip() or None)


def cue(ctx) -> dict[str, Any] | None:
    mood = _payload(ctx).get("mood")
    return _record(ctx, "mood", mood if isinstance(mood, str) else None)
