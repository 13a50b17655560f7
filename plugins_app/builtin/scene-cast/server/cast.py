"""The active-cast choice shared by scene-cast and scene-stage's cast runtime (both publish
scene-cast@1). Pure functions over character snapshots (`{id, name, type, aliases, description,
fields}`); names are matched with the narrator's story_kit helpers (whole words in English, plain
substrings in Chinese)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAMESPACE = "active-cast"
KEY = "current"
DEFAULT_COUNT = 2
MIN_COUNT, MAX_COUNT = 1, 4

_KIT: Any = None


def kit() -> Any:
    """narrator/story_kit.py (name matching, absence, sentences), loaded once by file path."""
    global _KIT
    if _KIT is None:
        from plugins_app.toolkit import module_load_by_path

        _KIT = module_load_by_path(Path(__file__).resolve().parents[2] / "narrator", "narrator", "story_kit.py")
    return _KIT


def speaker_count(settings: dict[str, Any] | None) -> int:
    """The `activeSpeakerCount` user setting clamped to 1..4 (default 2; non-numbers ignored)."""
    value = (settings or {}).get("activeSpeakerCount")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return DEFAULT_COUNT
    return max(MIN_COUNT, min(MAX_COUNT, int(value)))


def choose(characters: list[dict[str, Any]], message: str | None, previous: list[str], count: int,
           zh: bool) -> list[dict[str, Any]]:
    """Up to ``count`` speakers `[{id, name, type, reason}]`: addressed (+4, earliest named first),
    on stage last turn (+2), others present; absent characters never; ties in roster order."""
    k = kit()
    text = " ".join(str(message or "").split())
    scored: list[tuple[int, int, int, dict[str, Any], str]] = []
    for index, c in enumerate(k.npcs(characters)):
        if k.absent(c) or not c.get("id"):
            continue
        at = min((p for p in (k._find(text, n, zh) for n in k.names_of(c)) if p >= 0), default=-1) if text else -1
        score, reason = 0, "present"
        if at >= 0:
            score, reason = 4, "addressed"
        if c["id"] in previous:
            score += 2
            reason = reason if at >= 0 else "continuing"
        scored.append((-score, at if at >= 0 else 10**6, index, c, reason))
    scored.sort(key=lambda item: item[:3])
    return [{"id": c["id"], "name": c["name"], "type": c.get("type") or "npc", "reason": reason}
            for _, _, _, c, reason in scored[:count]]


def context_text(speakers: list[dict[str, Any]], characters: list[dict[str, Any]], zh: bool) -> str:
    """The block chat-mode-narrator reads (`activeCastContext`): one line per speaker with the exact
    id, the first sentence of the description and the persona's first clause."""
    k = kit()
    by_id = {c.get("id"): c for c in characters}
    if not speakers:
        return "本回合场上没有其他角色。" if zh else "No other character is on stage this turn."
    lines = ["本回合的活跃角色（优先让他们开口或作出反应；id 原样用于 stage.direction）：" if zh else
             "Active cast this turn (let them speak or react first; use the exact id in stage.direction):"]
    for s in speakers:
        c = by_id.get(s["id"]) or {}
        about = (k.sentences(str(c.get("description") or ""), zh) or [""])[0]
        voice = str((c.get("fields") or {}).get("persona") or "").strip()
        voice = voice.split("。")[0] if zh else voice.split(". ")[0]
        tail = "".join(f"；{x}" for x in (about, f"说话方式：{voice}" if voice else "") if x) if zh else \
            "".join(f" — {x}" for x in (about, f"voice: {voice}" if voice else "") if x)
        lines.append(f"- {s['name']}（id: {s['id']}）{tail}" if zh else f"- {s['name']} (id: {s['id']}){tail}")
    return "\n".join(lines)


def publish(ctx) -> dict[str, Any]:
    """The cast runtime body for a FunctionContext: choose, store `active-cast/current`, return
    the scene-cast@1 output."""
    k = kit()
    zh = k.is_zh(ctx.locale)
    characters = ctx.world.characters()
    before = ctx.plugin_data.get(NAMESPACE, KEY, None) or {}
    previous = [s.get("id") for s in before.get("speakers") or [] if isinstance(s, dict)]
    speakers = choose(characters, ctx.player_message, previous, speaker_count(ctx.settings), zh)
    record = {"turn": ctx.logical_turn, "speakers": speakers}
    if record != before:
        ctx.plugin_data.set(NAMESPACE, KEY, record)
    return {"activeCastContext": context_text(speakers, characters, zh), "speakers": speakers}
