"""Soundtrack's track choice (pure): from the world's track list (schemas/tracks.schema.json),
the recorded scene and mood, which track plays. Nothing here makes or fetches audio."""

from __future__ import annotations

import unicodedata
from typing import Any

TRACKS, REGISTRY_KEY = "tracks", "music-registry"
STATE, ASSETS = "state", "assets"
SILENCE = "silence"


def _norm(text: Any) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(text or "")).casefold().split())


def track_list(rows: dict[str, Any]) -> list[dict[str, Any]]:
    value = rows.get(REGISTRY_KEY)
    if not isinstance(value, dict):
        value = next((v for v in rows.values() if isinstance(v, dict) and isinstance(v.get("tracks"), list)), {})
    return [t for t in value.get("tracks") or [] if isinstance(t, dict) and t.get("id") and t.get("file")]


def track_choose(tracks: list[dict[str, Any]], scene: str | None, mood: str | None) -> dict[str, Any] | None:
    """The track to play (see PLUGIN.md for the order), or None (silence, or nothing fits)."""
    if mood == SILENCE:
        return None
    here = _norm(scene)

    def in_scene(t: dict[str, Any]) -> bool:
        return bool(here) and here in {_norm(s) for s in t.get("scenes") or []}

    def for_mood(t: dict[str, Any]) -> bool:
        return bool(mood) and mood in (t.get("moods") or [])

    rules = [
        lambda t: in_scene(t) and for_mood(t),
        lambda t: for_mood(t) and not t.get("scenes"),
        lambda t: in_scene(t) and not t.get("moods"),
        lambda t: bool(t.get("theme")),
    ]
    for rule in rules:
        hit = next((t for t in tracks if rule(t)), None)
        if hit:
            return hit
    return None


def track_view(track: dict[str, Any] | None, assets: dict[str, Any]) -> dict[str, Any] | None:
    """What the stage.music@1 slot plays: the track's reference and its imported file record."""
    if track is None:
        return None
    asset = next((v for k, v in assets.items() if isinstance(v, dict) and
                  (k == track["file"] or (v.get("import") or {}).get("filename") == track["file"])), None)
    return {"id": track["id"], "title": track.get("title") or track["id"], "file": track["file"],
            "loop": track.get("loop", True), "volume": track.get("volume", 1), "asset": asset}
