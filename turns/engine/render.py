"""Player message rendering (spec 004 §submit_actions, 玩家消息怎么渲染).

Single-player input stays verbatim: every action from one player seat bound to at most one
character, acting as that character (or as no one), and every action a `say`/`command` without
fields or an interaction answer of kind `say`/`act` → the texts joined by newlines. Otherwise each
action is labelled: `【<角色名>·<类型名>】<文字>` (Chinese sessions) or `[<Name> · <Kind>] <text>`,
`【<类型名>】<文字>` / `[<Kind>] <text>` without an actor; plugin kinds always render, with their
fields as JSON after the text. Names only, never ids. Textless base actions render nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Base action kind labels (prompts/server/action-labels.md in the original; ours live here).
ACTION_LABELS: dict[str, dict[str, str]] = {
    "say": {"zh": "说", "en": "Say"},
    "act": {"zh": "行动", "en": "Act"},
    "narrate": {"zh": "旁白", "en": "Narrate"},
    "direct": {"zh": "导演", "en": "Direct"},
    "advance": {"zh": "推进", "en": "Advance"},
    "command": {"zh": "命令", "en": "Command"},
}
BASE_KINDS = tuple(ACTION_LABELS)
ACTOR_KINDS = ("say", "act")
#: Largest `fields` JSON (bytes) kept in ChatMessage.metadata.actions (spec: 超过 4 KB 时省略).
ACTION_FIELDS_MAX_BYTES = 4096


@dataclass
class RenderedInput:
    """rendered: the prompt-history text (TurnInput.playerMessage); content: the chat message
    text (raw texts joined, or rendered when no action has text); actions: metadata.actions."""

    rendered: str
    content: str
    actions: list[dict[str, Any]]


def _label(kind: str, locale: str, plugin_kinds: dict[str, dict[str, Any]]) -> str:
    lang = "zh" if locale.lower().startswith("zh") else "en"
    if kind in ACTION_LABELS:
        return ACTION_LABELS[kind][lang]
    display = (plugin_kinds.get(kind) or {}).get("display") or {}
    label = display.get("label")
    if isinstance(label, dict):
        return label.get(lang) or label.get(locale) or label.get("en") or next(iter(label.values()), kind)
    if isinstance(label, str):
        return label
    return kind.split("/", 1)[-1]


def player_input_render(
    actions: list[dict[str, Any]],
    *,
    locale: str,
    seats: list[dict[str, Any]],
    characters: dict[str, str],
    player_character_ids: list[str],
    plugin_kinds: dict[str, dict[str, Any]] | None = None,
) -> RenderedInput:
    """Render resolved actions (each with kind, text?, fields?, seatId?, actorId?, interaction?).

    characters: character id → name. player_character_ids: ids bound to the main seat
    ("characters: auto" binds every player character). plugin_kinds: kind → contributes.actionKinds item.
    """
    plugin_kinds = plugin_kinds or {}
    zh = locale.lower().startswith("zh")
    seat_ids = {a.get("seatId") or "main" for a in actions}
    main_seat = next((s for s in seats if s.get("controller", "human") == "human"), {"id": "main"})
    seat = next((s for s in seats if s.get("id") in seat_ids), main_seat)
    bound = player_character_ids if seat.get("characters", "auto") == "auto" else list(seat.get("characters") or [])
    current = seat.get("currentCharacterId") or (bound[0] if bound else None)
    verbatim = len(seat_ids) <= 1 and len(bound) <= 1 and seat.get("role", "player") == "player"
    for action in actions:
        kind = action.get("kind")
        actor = action.get("actorId")
        if actor not in (None, current):
            verbatim = False
        if action.get("interaction"):
            if kind not in ACTOR_KINDS:
                verbatim = False
        elif kind not in ("say", "command") or action.get("fields"):
            verbatim = False
    texts = [a["text"] for a in actions if isinstance(a.get("text"), str) and a["text"] != ""]
    if verbatim:
        rendered = "\n".join(texts)
    else:
        lines: list[str] = []
        for action in actions:
            kind = action.get("kind") or "say"
            text = action.get("text") or ""
            is_plugin_kind = kind not in ACTION_LABELS
            if not text and not is_plugin_kind:
                continue
            label = _label(kind, locale, plugin_kinds)
            actor_id = action.get("actorId") or (current if kind in ACTOR_KINDS or is_plugin_kind else None)
            name = characters.get(actor_id) if actor_id else None
            if kind not in ACTOR_KINDS and not is_plugin_kind:
                name = None
            if name:
                head = f"【{name}·{label}】" if zh else f"[{name} · {label}] "
            else:
                head = f"【{label}】" if zh else f"[{label}] "
            tail = ""
            if is_plugin_kind and action.get("fields"):
                tail = json.dumps(action["fields"], ensure_ascii=False, separators=(",", ":"))
            lines.append((head + text + tail).rstrip())
        rendered = "\n".join(lines)
    content = "\n".join(texts) if texts else rendered
    kept: list[dict[str, Any]] = []
    for action in actions:
        item = {k: v for k, v in action.items() if k in ("kind", "text", "seatId", "actorId", "interaction", "fields")}
        if "fields" in item and len(json.dumps(item["fields"], ensure_ascii=False).encode("utf-8")) > ACTION_FIELDS_MAX_BYTES:
            item.pop("fields")
        kept.append(item)
    return RenderedInput(rendered=rendered, content=content, actions=kept)
