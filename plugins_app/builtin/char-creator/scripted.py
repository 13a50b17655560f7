"""Offline `scripted` model behaviour of char-creator (turns/engine/providers/scripted.py).

- player-init: one create-character-form call with characterName plus up to two of the world's
  string/enum attributes (enum → select defaulting to its first option), in the session locale.
- character-tracker: one sync-characters batch for the characters this turn's story actually
  shows (full names of the session's characters, read with narrator/story_kit.py): nobody is
  invented, so `creates` stays empty for a world whose cast is already loaded; the character the
  player addressed gets its `attitude` field (when the schema has one) noting the talk and the
  topic (the lorebook entry the narrator surfaced). An empty batch when nothing applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_KIT: Any = None


def kit() -> Any:
    """narrator/story_kit.py, the helpers the scripted narrator writes with (loaded once by path)."""
    global _KIT
    if _KIT is None:
        from plugins_app.toolkit import module_load_by_path

        _KIT = module_load_by_path(Path(__file__).resolve().parents[1] / "narrator", "narrator", "story_kit.py")
    return _KIT


def _zh(locale: str | None) -> bool:
    return bool(locale) and locale.lower().startswith("zh")


def _text(value: Any, zh: bool) -> str:
    if isinstance(value, dict):
        return str(value.get("zh-CN" if zh else "en-US") or next(iter(value.values()), ""))
    return str(value or "")


def character_form(turn: dict[str, Any]) -> dict[str, Any]:
    """create-character-form arguments for the world's schema."""
    zh = _zh(turn.get("locale"))
    schema = (turn.get("inputs") or {}).get("worldSchema") or turn.get("character_schema") or {}
    attrs = [a for a in schema.get("attributes") or [] if isinstance(a, dict) and a.get("type") in ("string", "enum")]
    attrs = sorted(attrs, key=lambda a: (a.get("category") != "bio", a.get("type") != "enum"))[:2]
    fields: list[dict[str, Any]] = [{"type": "text", "name": "characterName", "label": "姓名" if zh else "Name", "required": True}]
    pieces: list[str] = []
    for attr in attrs:
        label = _text(attr.get("name"), zh) or attr["id"]
        if attr["type"] == "enum" and attr.get("options"):
            fields.append({"type": "select", "name": attr["id"], "label": label, "options": list(attr["options"]),
                           "defaultValue": attr["options"][0]})
        else:
            fields.append({"type": "text", "name": attr["id"], "label": label})
        pieces.append(f"{label}：{{{{{attr['id']}}}}}" if zh else f"{label}: {{{{{attr['id']}}}}}")
    world = (turn.get("world") or {}).get("name") or ""
    if zh:
        template = f"你叫{{{{characterName}}}}，来到了{world}。" + ("（" + "；".join(pieces) + "）" if pieces else "")
        return {"formId": "char-creation", "title": "创建你的角色", "submitLabel": "开始", "fields": fields,
                "narrativeTemplate": template, "submitBehavior": {"echoFilledNarrative": True}}
    template = f"My name is {{{{characterName}}}} and I have come to {world}." + (" (" + "; ".join(pieces) + ")" if pieces else "")
    return {"formId": "char-creation", "title": "Create your character", "submitLabel": "Begin", "fields": fields,
            "narrativeTemplate": template, "submitBehavior": {"echoFilledNarrative": True}}


def sync_batch(turn: dict[str, Any]) -> dict[str, Any]:
    """sync-characters arguments (see the module docstring)."""
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    narrative = k.narrative_of(turn)
    chars = turn.get("characters") or []
    hero = k.player(chars)
    message = str(turn.get("player_message") or "")
    target = k.addressed(message, chars, zh) if message else None
    if not target or target not in k.appeared(narrative, chars, zh) or not hero:
        return {"creates": [], "updates": []}
    schema = turn.get("character_schema") or {}
    if not any(isinstance(a, dict) and a.get("id") == "attitude" and a.get("type") == "string" for a in schema.get("attributes") or []):
        return {"creates": [], "updates": []}
    topics = k.lore_surfaced(narrative, turn.get("lorebook") or [], zh)
    topic = k.title_of(topics[0]) if topics else ""
    marker = "谈过" if zh else "Has spoken with"
    old = [s for s in k.sentences(str((target.get("fields") or {}).get("attitude") or ""), zh) if marker not in s]
    if zh:
        note = f"和{hero['name']}谈过{('「' + topic + '」') if topic else '几句'}。"
    else:
        note = f"Has spoken with {hero['name']}" + (f" about {topic}." if topic else ".")
    attitude = ("" if zh else " ").join([*old[:1], note])
    return {"creates": [], "updates": [{"id": target["id"], "fields": {"attitude": attitude}}]}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    done = {r.get("name") for r in turn.get("tool_results") or [] if not (isinstance(r.get("content"), dict) and "error" in r["content"])}
    if "create-character-form" in names and "create-character-form" not in done:
        return {"tool_calls": [{"name": "create-character-form", "arguments": character_form(turn)}]}
    if "sync-characters" in names and "sync-characters" not in done:
        return {"tool_calls": [{"name": "sync-characters", "arguments": sync_batch(turn)}]}
    return None
