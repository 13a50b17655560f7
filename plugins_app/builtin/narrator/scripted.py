"""Offline `scripted` model behaviour of narrator (turns/engine/providers/scripted.py: `respond`).

Prose in the session locale built from the world, the characters and the player's action. Each
story turn (the opening included) is numbered by the story turns already in the history (`k`):
- the player's action, then the reaction of the newest non-player character (the newcomer of
  the turn before; the first world character at the opening), so the cast stays continuous;
- one line of world lore, the k-th usable sentence of the lore (headings, list marks and
  emphasis stripped): codex and dimension-tracker material;
- one passer-by: the first roster entry that is not a character yet (locale-specific fixed
  roster), so char-creator's scripted tracker records each newcomer exactly once.
Deterministic: the same history always reads the same.
"""

from __future__ import annotations

import re
from typing import Any

#: (name, description) per locale, introduced in order, one per story turn.
PASSERS_BY = {
    "zh": [
        ("船工老周", "撑了三十年渡船的老船工，话少，认得江上每一道水纹。"),
        ("卖灯的阿莺", "在街口卖纸灯的姑娘，耳朵尖，镇上的闲话她听得最全。"),
        ("更夫孙二", "打更的瘦汉子，夜里走遍全镇，见过不少不该见的事。"),
        ("游方郎中褚先生", "背着药箱四处行医的郎中，说话慢条斯理。"),
        ("小乞儿豆子", "在码头讨饭的半大孩子，跑得比谁都快。"),
        ("说书人柳三", "茶楼里说书的先生，一把折扇，满肚子旧案。"),
        ("挑水的哑巴陈", "天不亮就挑水的汉子，不会说话，却什么都看在眼里。"),
    ],
    "en": [
        ("Tam the boatman", "An old boatman who has worked the same water for thirty years and says little."),
        ("Wren Abley", "A lamp-seller at the corner who hears every rumour first."),
        ("Old Corrie", "The night watchman, who walks every street after dark."),
        ("Mister Pell", "A travelling pedlar with a worn pack and a slow way of speaking."),
        ("Pip", "A quick-footed child who runs errands for pennies."),
        ("Mags Treloar", "A fishwife with red hands and a voice that carries across the harbour."),
        ("Brother Amos", "A young lay preacher who walks the coast with a lantern and a Bible."),
    ],
}
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s.*$", re.M)
_MARKS = re.compile(r"(\*\*|__|\*|`|^\s*[-*>]\s+|^\s*\d+\.\s+)", re.M)


def _zh(locale: str | None) -> bool:
    return bool(locale) and locale.lower().startswith("zh")


def lore_sentences(text: str, zh: bool) -> list[str]:
    """Usable lore sentences: markdown stripped, 12–70 (zh) / 30–200 (en) characters, no
    second-person lines (those belong to the opening scene, not to hearsay)."""
    plain = _MARKS.sub("", _HEADING.sub("", text or ""))
    pattern = r"(?<=[。！？])" if zh else r"(?<=[.!?])\s+"
    out = []
    for raw in re.split(pattern, plain):
        sentence = " ".join(raw.split())
        low, high = (12, 70) if zh else (30, 200)
        if not low <= len(sentence) <= high:
            continue
        if (zh and "你" in sentence) or (not zh and re.search(r"\b(you|your)\b", sentence, re.I)):
            continue
        out.append(sentence)
    return out


def passer_by(locale: str | None, known_names: set[str]) -> tuple[str, str] | None:
    """The first roster entry not yet among the characters (None when all have appeared)."""
    roster = PASSERS_BY["zh" if _zh(locale) else "en"]
    return next((entry for entry in roster if entry[0] not in known_names), None)


def _story_turns_before(turn: dict[str, Any]) -> int:
    return sum(1 for m in turn.get("messages") or [] if m.get("role") == "assistant" and m.get("content"))


def story(turn: dict[str, Any]) -> str:
    """This turn's prose (see module docstring)."""
    zh = _zh(turn.get("locale"))
    world = turn.get("world") or {}
    name = world.get("name") or ("此地" if zh else "this place")
    chars = [c for c in turn.get("characters") or [] if c.get("name")]
    player = next((c for c in chars if c.get("type") == "player"), None)
    npcs = [c for c in chars if c.get("type") != "player"]
    k = _story_turns_before(turn)
    hero = player["name"] if player else ("你" if zh else "You")
    action = (turn.get("player_message") or "").strip()
    lore = lore_sentences(world.get("lore") or "", zh) or lore_sentences(world.get("summary") or "", zh)
    fact = lore[k % len(lore)] if lore else ""
    npc = (npcs[-1] if k else npcs[0]) if npcs else None
    known = {c["name"] for c in chars} | {a for c in chars for a in c.get("aliases") or []}
    newcomer = passer_by(turn.get("locale"), known)
    persona = ((npc or {}).get("fields") or {}).get("persona") or (npc or {}).get("description") or ""
    out: list[str] = []
    if zh:
        if action:
            out.append(f"{hero}{'开口道：「' + action + '」' if turn.get('action_kind') == 'say' else '决定：' + action.rstrip('。') + '。'}")
        else:
            out.append(f"{name}。{world.get('summary') or ''}")
        if npc:
            trait = re.split(r"[，。；]", persona)[0] if persona else ""
            out.append(f"{npc['name']}看了{hero}一眼{('——' + trait + '——') if trait else '，'}没有立刻说话。")
        if fact:
            out.append(f"{hero}想起镇上的说法：{fact}")
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
        trait = re.split(r"[;.]", persona)[0].strip() if persona else ""
        out.append(f"{npc['name']} watches {hero} for a moment{(' — ' + trait[0].lower() + trait[1:]) if trait else ''}.")
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
