"""Offline `scripted` model behaviour of narrator (turns/engine/providers/scripted.py: `respond`).

Prose in the session locale built from the world, the characters and the player's action. Each
turn brings in one passer-by from a fixed, locale-specific roster (so names stay consistent and
char-creator's scripted tracker records them) and one line of world lore (codex material).
Deterministic: the same turn always reads the same.
"""

from __future__ import annotations

import re
from typing import Any

#: (name, description) per locale; turn n (n ≥ 1) introduces entry n-1, in order.
PASSERS_BY = {
    "zh": [
        ("船工老周", "撑了三十年渡船的老船工，话少，认得江上每一道水纹。"),
        ("卖灯的阿莺", "在街口卖纸灯的姑娘，耳朵尖，镇上的闲话她听得最全。"),
        ("更夫孙二", "打更的瘦汉子，夜里走遍全镇，见过不少不该见的事。"),
        ("游方郎中褚先生", "背着药箱四处行医的郎中，说话慢条斯理。"),
        ("小乞儿豆子", "在码头讨饭的半大孩子，跑得比谁都快。"),
    ],
    "en": [
        ("Tam the ferryman", "An old ferryman who has worked the same water for thirty years and says little."),
        ("Wren Abley", "A lamp-seller at the corner who hears every rumour first."),
        ("Old Corrie", "The night watchman, who walks every street after dark."),
        ("Doctor Pell", "A travelling physician with a worn bag and a slow way of speaking."),
        ("Pip", "A quick-footed dock child who runs errands for pennies."),
    ],
}


def _zh(locale: str | None) -> bool:
    return bool(locale) and locale.lower().startswith("zh")


def _sentences(text: str, zh: bool) -> list[str]:
    pattern = r"(?<=[。！？])" if zh else r"(?<=[.!?])\s+"
    return [s.strip() for s in re.split(pattern, text or "") if len(s.strip()) > 6]


def passer_by(locale: str | None, turn: int) -> tuple[str, str] | None:
    roster = PASSERS_BY["zh" if _zh(locale) else "en"]
    return roster[turn - 1] if 1 <= turn <= len(roster) else None


def story(turn: dict[str, Any]) -> str:
    """This turn's prose (see module docstring)."""
    zh = _zh(turn.get("locale"))
    world = turn.get("world") or {}
    name = world.get("name") or ("此地" if zh else "this place")
    chars = [c for c in turn.get("characters") or [] if c.get("name")]
    player = next((c for c in chars if c.get("type") == "player"), None)
    npcs = [c for c in chars if c.get("type") != "player"]
    number = int(turn.get("turn") or 1)
    hero = player["name"] if player else ("你" if zh else "You")
    action = (turn.get("player_message") or "").strip()
    lore = _sentences(world.get("lore") or world.get("summary") or "", zh)
    fact = lore[(number - 1) % len(lore)] if lore else ""
    npc = npcs[(number - 1) % len(npcs)] if npcs else None
    newcomer = passer_by(turn.get("locale"), number)
    persona = ((npc or {}).get("fields") or {}).get("persona") or (npc or {}).get("description") or ""
    out: list[str] = []
    if zh:
        if action:
            out.append(f"{hero}{'开口道：「' + action + '」' if turn.get('action_kind') == 'say' else '决定：' + action + '。'}")
        else:
            out.append(f"{name}。{world.get('summary') or ''}")
        if npc:
            out.append(f"{npc['name']}看了{hero if player else '你'}一眼{('——' + persona.split('，')[0]) if persona else ''}，没有立刻说话。")
        if fact:
            out.append(f"{hero if player else '你'}想起镇上的说法：{fact}")
        if newcomer:
            out.append(f"这时，{newcomer[0]}从人群里挤过来——{newcomer[1]}")
        out.append("事情正朝着谁也没料到的方向走去。")
        return "".join(out)
    if action:
        verb = 'says, "' + action + '"' if turn.get("action_kind") == "say" else "decides: " + action.rstrip(".") + "."
        out.append(f"{hero} {verb}")
    else:
        out.append(f"{name}. {world.get('summary') or ''}".strip())
    if npc:
        out.append(f"{npc['name']} watches {'you' if not player else hero} for a moment{(' — ' + persona.split(';')[0].rstrip('.')) if persona else ''}.")
    if fact:
        out.append(f"People here say: {fact}")
    if newcomer:
        out.append(f"Then {newcomer[0]} pushes through the crowd. {newcomer[1]}")
    out.append("The night is moving somewhere no one expected.")
    return " ".join(out)


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    """Story runtime: prose; other runtimes of this plugin: default behaviour."""
    if turn.get("is_story"):
        return {"text": story(turn)}
    return None
