"""soundtrack entry module: the `ui.slot@1` provider `music` → `stage.music@1`, what the app plays
now: `{track, scene, mood}` from the committed `state/track` record (`track`: the chosen track's
reference and its imported file record, or null for silence). Before a scene or mood was recorded
it answers the world's theme track, if it has one; a world without tracks gives no value."""

from __future__ import annotations

from typing import Any

from . import soundtrack as S


def music(context: dict[str, Any]) -> dict[str, Any]:
    data = context.get("pluginData") or {}
    state = data.get(S.STATE) or {}
    record = state.get("track")
    if isinstance(record, dict):
        return {"value": {"track": record.get("track"), "scene": record.get("scene"), "mood": record.get("mood")}}
    tracks = S.track_list(data.get(S.TRACKS) or {})
    if not tracks:
        return {}
    chosen = S.track_view(S.track_choose(tracks, None, None), data.get(S.ASSETS) or {})
    return {"value": {"track": chosen, "scene": None, "mood": None}}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("ui.slot@1", "music", music)
