"""scene-stage records and the pure operations on them (seed, resolver and direction share them).

- `stage/current`: `{schemaVersion: 1, location, timeOfDay: day|night, sceneId, backdrop, source:
  world|registry|none, turn}` (schemas/stage.schema.json).
- `direction/current`: `{schemaVersion: 1, actors: [{characterId, displayName, position, focus,
  outfit?, expression?, pose?}], turn}`.
- `dialogue/turn-<n>` and `dialogue/latest`: `{schemaVersion: 1, turn, paragraphSpeakers:
  [{characterId, displayName} | null], unknownIds}`.
"""

from __future__ import annotations

import unicodedata
from typing import Any

STAGE, CURRENT = "stage", "current"
SCENES, REGISTRY_KEY = "scenes", "scene-registry"
DIRECTION, DIALOGUE, LATEST = "direction", "dialogue", "latest"
TIMES = ("day", "night")
POSITIONS = ("left", "center", "right")


def norm(text: Any) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(text or "")).casefold().replace("-", " ").replace("_", " ").split())


def registry(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenes of the world's registry (the `scene-registry` row, else any row holding `scenes`)."""
    value = rows.get(REGISTRY_KEY)
    if not isinstance(value, dict):
        value = next((v for v in rows.values() if isinstance(v, dict) and isinstance(v.get("scenes"), list)), {})
    return [s for s in value.get("scenes") or [] if isinstance(s, dict) and s.get("name")]


def match(scenes: list[dict[str, Any]], location: str) -> dict[str, Any] | None:
    """The scene whose name, sceneId or one of the `/`-separated places of its locationRef equals
    ``location`` (normalized), else the
    first whose name contains it or is contained in it; None when nothing fits."""
    target = norm(location)
    if not target:
        return None
    for scene in scenes:
        refs = {norm(part) for part in str(scene.get("locationRef") or "").split("/")}
        if target in {norm(scene.get("name")), norm(scene.get("sceneId"))} | refs:
            return scene
    return next((s for s in scenes if norm(s.get("name")) and (norm(s["name"]) in target or target in norm(s["name"]))), None)


def scene_record(location: str, time_of_day: str, scene: dict[str, Any] | None, source: str, turn: int | None) -> dict[str, Any]:
    backdrop = None
    if scene is not None:
        backdrop = scene.get("night") if time_of_day == "night" and isinstance(scene.get("night"), dict) else scene.get("day")
    return {"schemaVersion": 1, "location": str(scene.get("name") if scene and not location else location),
            "timeOfDay": time_of_day, "sceneId": scene.get("sceneId") if scene else None,
            "backdrop": backdrop if isinstance(backdrop, dict) else None,
            "source": source if scene is not None else "none", "turn": turn}


def apply_cues(actors: list[dict[str, Any]], cues: list[dict[str, Any]], names: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(actors after ``cues``, unknown ids). ``names``: character id → name. enter adds (or updates)
    an actor, leave removes, focus puts the spotlight on one actor only, move changes position,
    visual changes outfit / expression / pose, stage.clear empties the stage."""
    out = [dict(a) for a in actors]
    unknown: list[str] = []
    for cue in cues:
        kind, cid = cue.get("type"), cue.get("characterId")
        if kind == "stage.clear":
            out = []
            continue
        if not isinstance(cid, str) or cid not in names:
            if isinstance(cid, str) and cid not in unknown:
                unknown.append(cid)
            continue
        actor = next((a for a in out if a["characterId"] == cid), None)
        if kind == "actor.leave":
            out = [a for a in out if a["characterId"] != cid]
            continue
        if actor is None:
            if kind not in ("actor.enter", "actor.focus", "actor.visual", "actor.move"):
                continue
            taken = {a.get("position") for a in out}
            actor = {"characterId": cid, "displayName": names[cid],
                     "position": next((p for p in ("center", "left", "right") if p not in taken), "center"), "focus": False}
            out.append(actor)
        if cue.get("position") in POSITIONS:
            actor["position"] = cue["position"]
        for key in ("outfit", "expression", "pose"):
            if isinstance(cue.get(key), str) and cue[key]:
                actor[key] = cue[key]
        if kind == "actor.focus":
            for a in out:
                a["focus"] = a["characterId"] == cid
    return out, unknown


def speakers(ids: list[Any], names: dict[str, str]) -> tuple[list[dict[str, str] | None], list[str]]:
    """paragraphSpeakers resolved against the session's characters: known id → {characterId,
    displayName}; null stays null; an unknown id becomes null and is listed. Never guessed."""
    out: list[dict[str, str] | None] = []
    unknown: list[str] = []
    for item in ids:
        if isinstance(item, str) and item in names:
            out.append({"characterId": item, "displayName": names[item]})
        else:
            out.append(None)
            if isinstance(item, str) and item not in unknown:
                unknown.append(item)
    return out, unknown
