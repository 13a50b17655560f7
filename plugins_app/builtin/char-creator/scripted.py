"""Offline `scripted` model behaviour of char-creator (turns/engine/providers/scripted.py).

- player-init: one create-character-form call with characterName plus up to two of the world's
  string/enum attributes (enum → select defaulting to its first option), in the session locale.
- character-tracker: one sync-characters batch creating the named newcomers the narrative
  introduced (the scripted narrator writes "这时，<名字>从人群里挤过来——<描述>" /
  "Then <Name> pushes through the crowd. <Description>"); an empty batch when there are none.
"""

from __future__ import annotations

import re
from typing import Any

_NEWCOMER = (
    re.compile(r"这时，(?P<name>[^，。——]{1,12})从人群里挤过来——(?P<desc>[^。]*。)"),
    re.compile(r"Then (?P<name>[A-Z][\w' -]{0,40}?) pushes through the crowd\. (?P<desc>[^.]*\.)"),
)


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
    """sync-characters arguments: the narrative's newcomers that are not yet characters."""
    narrative = (turn.get("inputs") or {}).get("narrative") or ""
    if isinstance(narrative, dict):
        narrative = narrative.get("narrativeOutput") or ""
    known = {c.get("name") for c in turn.get("characters") or []}
    known |= {a for c in turn.get("characters") or [] for a in c.get("aliases") or []}
    creates = []
    for pattern in _NEWCOMER:
        for match in pattern.finditer(str(narrative)):
            name = match.group("name").strip()
            if name not in known and all(c["name"] != name for c in creates):
                creates.append({"name": name, "type": "npc", "description": match.group("desc").strip()})
    return {"creates": creates[:5], "updates": []}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    done = {r.get("name") for r in turn.get("tool_results") or [] if not (isinstance(r.get("content"), dict) and "error" in r["content"])}
    if "create-character-form" in names and "create-character-form" not in done:
        return {"tool_calls": [{"name": "create-character-form", "arguments": character_form(turn)}]}
    if "sync-characters" in names and "sync-characters" not in done:
        return {"tool_calls": [{"name": "sync-characters", "arguments": sync_batch(turn)}]}
    return None
