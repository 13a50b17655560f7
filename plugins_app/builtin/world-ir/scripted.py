"""Offline `scripted` model behaviour of world-ir: one submit-world-facts call read from this
turn's story (narrator/story_kit.py) and the player's own words.

- an `interaction` event between the hero and each character the story names;
- a `discovery` statement for each lorebook entry the story surfaced;
- `inventory_change` events when the player's action takes, receives, drops, hands over, puts on
  or takes off a named thing and the story tells that action (the object's words occur in it);
- `quest_change`: `accepted` when the player commits to a goal out loud ("I promise to …",
  "我答应…"), `progressed` with the open objectives of a tracked quest (runtime-inputs.vocabulary)
  whose words the player's action repeats.
Deterministic; nothing is invented beyond these readings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_KIT: Any = None

EN_OPS = [
    ("equip", r"(?:put on|puts on|wear|wears|wield|wields|equip|equips|strap on|straps on)"),
    ("unequip", r"(?:take off|takes off|remove|removes|unequip|unequips)"),
    ("gain", r"(?:pick up|picks up|take|takes|grab|grabs|pocket|pockets|receive|receives|accept|accepts|collect|collects|buy|buys)"),
    ("lose", r"(?:drop|drops|give away|gives away|hand over|hands over|throw away|throws away|use up|uses up|sell|sells)"),
]
ZH_OPS = [
    ("equip", r"(?:戴上|穿上|佩上|披上|握住|拔出)"),
    ("unequip", r"(?:摘下|脱下|卸下|收起)"),
    ("gain", r"(?:拿起|捡起|拾起|收下|接过|取走|拿走|买下|揣起|带上)"),
    ("lose", r"(?:丢下|扔掉|交出|递给|送给|卖掉|用掉)"),
]
EN_STOP = {"the", "a", "an", "to", "of", "and", "with", "for", "in", "on", "at", "from", "my", "your", "his", "her", "their", "i", "me", "it", "this", "that"}
EN_COMMIT = re.compile(r"\bI (?:promise|agree|swear|vow|pledge) to ([^.!?;]{4,80})", re.I)
ZH_COMMIT = re.compile(r"我(?:答应|保证|发誓|一定会|会替你|会帮你)([^。！？；，]{2,30})")


def kit() -> Any:
    global _KIT
    if _KIT is None:
        from plugins_app.toolkit import module_load_by_path

        _KIT = module_load_by_path(Path(__file__).resolve().parents[1] / "narrator", "narrator", "story_kit.py")
    return _KIT


def slug(text: str, fallback: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    words = [w for w in words if w not in EN_STOP][:3]
    return "-".join(words) or fallback


def _items(action: str, story: str, zh: bool) -> list[tuple[str, str]]:
    """(operation, item words) the player's action names and the story repeats."""
    found: list[tuple[str, str]] = []
    for operation, verbs in (ZH_OPS if zh else EN_OPS):
        if zh:
            pattern = verbs + r"(?:了)?(?:那|这)?(?:一|两|三)?(?:把|个|件|只|枚|封|张|块|盏|支|本|袋)?([\u4e00-\u9fff]{1,6}?)(?=[，。！？、；]|$|给|交|放|和|并)"
        else:
            pattern = r"\b" + verbs + r"\s+(?:the|a|an|my|his|her|some|this|that)\s+([a-z][a-z' -]{1,40}?)(?=\s*(?:[.,;!?]|$| from | and | to | off\b| on\b))"
        for match in re.finditer(pattern, action, 0 if zh else re.I):
            words = match.group(1).strip()
            if words and words.lower() in story.lower() and all(words != w for _, w in found):
                found.append((operation, words))
    return found


def _overlap(a: str, b: str, zh: bool) -> bool:
    if zh:
        grams = {a[i:i + 2] for i in range(len(a) - 1)}
        return sum(1 for i in range(len(b) - 1) if b[i:i + 2] in grams) >= 2
    words = lambda s: {w for w in re.findall(r"[a-z']+", s.lower()) if w not in EN_STOP and len(w) > 2}
    return len(words(a) & words(b)) >= 2


def _vocabulary(turn: dict[str, Any]) -> list[dict[str, Any]]:
    raw = (turn.get("inputs") or {}).get("vocabulary") or []
    out = []
    for block in raw if isinstance(raw, list) else [raw]:
        if isinstance(block, dict):
            out.extend(e for e in block.get("entries") or [] if isinstance(e, dict))
    return out


def facts(turn: dict[str, Any]) -> dict[str, Any]:
    k = kit()
    zh = k.is_zh(turn.get("locale"))
    story = k.narrative_of(turn)
    action = str(turn.get("player_message") or "")
    characters = turn.get("characters") or []
    hero = k.player(characters)
    said = k.sentences(story, zh)
    summary = k.fit(("" if zh else " ").join(said[:2]), 300, zh) if said else ("故事继续。" if zh else "The story goes on.")
    entities: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    statements: list[dict[str, Any]] = []
    present = [c for c in k.appeared(story, characters, zh) if c.get("id")]
    spoken = k.addressed(action, characters, zh) if action else None
    partners = [spoken] if spoken and spoken.get("id") and spoken in present else present[:1]
    if hero and hero.get("id") and action:
        for c in partners:
            events.append({"id": slug(f"talk {c['id']}", "talk")[:40] or "talk", "type": "interaction",
                           "participantIds": [hero["id"], c["id"]],
                           "description": (f"{hero['name']}与{c['name']}交谈。" if zh else f"{hero['name']} talks with {c['name']}.")})
    for n, entry in enumerate(k.lore_surfaced(story, turn.get("lorebook") or [], zh)[:3]):
        statements.append({"id": f"clue-{n + 1}", "type": "discovery", "content": k.lore_quote(entry, zh, 1),
                           "attributes": {"topic": k.title_of(entry)}})
    if hero and hero.get("id") and action:
        for n, (operation, words) in enumerate(_items(action, story, zh)):
            item_id = slug(words, f"item-{n + 1}")
            if any(e["id"] == item_id for e in entities):
                item_id = f"{item_id}-{n + 1}"
            entities.append({"id": item_id, "type": "item", "name": words[:1].upper() + words[1:] if not zh else words})
            events.append({"id": f"bag-{n + 1}", "type": "inventory_change", "participantIds": [hero["id"]],
                           "attributes": {"item": item_id, "holder": hero["id"], "operation": operation}})
        commit = (ZH_COMMIT if zh else EN_COMMIT).search(action)
        quests = [e for e in _vocabulary(turn) if e.get("type") == "quest"]
        if commit and not any(_overlap(q["name"], commit.group(1), zh) for q in quests):
            goal = commit.group(1).strip().rstrip(",，")
            name = goal if zh else goal[:1].upper() + goal[1:]
            giver = present[0]["name"] if present else None
            attrs = {"quest": name[:60], "status": "accepted", "objectives": [name[:120]]}
            if giver:
                attrs["giver"] = giver
            events.append({"id": "quest-taken", "type": "quest_change", "participantIds": [hero["id"]], "attributes": attrs})
        for n, quest in enumerate(quests):
            done = [d for d in quest.get("details") or [] if _overlap(d, action, zh) and _overlap(d, story, zh)]
            if done:
                events.append({"id": f"quest-step-{n + 1}", "type": "quest_change", "participantIds": [hero["id"]],
                               "attributes": {"quest": quest["name"], "status": "progressed", "completedObjectives": done[:3]}})
    for n, event in enumerate(events):
        if any(e["id"] == event["id"] for e in events[:n]):
            event["id"] = f"{event['id']}-{n + 1}"
    return {"schemaVersion": 1, "summary": summary, "entities": entities, "relations": [], "events": events, "statements": statements}


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    names = [t["name"] for t in turn.get("tools") or []]
    if "submit-world-facts" not in names:
        return None
    results = turn.get("tool_results") or []
    if results and not any(isinstance(r.get("content"), dict) and "error" in r["content"] for r in results):
        return {"text": ""}
    return {"tool_calls": [{"name": "submit-world-facts", "arguments": facts(turn)}]}
