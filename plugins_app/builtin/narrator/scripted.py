"""Offline `scripted` model behaviour of narrator (turns/engine/providers/scripted.py: `respond`).

A short story in the session locale, told from the world's own material (helpers: story_kit.py):
- the opening retells the world's opening scenario about the player character (second person
  turned to the hero's name) and brings in the first present cast member it names;
- a turn renders the player's text: "I climb …" → "<Hero> climbs …" (我… → <主角>…), quoted or
  plain speech → dialogue; the character the text names (name or alias) answers, in a line
  coloured by their `persona`, with the turn's clue;
- the clue: the first lorebook entry not yet used in the story whose keys match the player's
  text, else one about the addressed character, else the next unused one — its first whole
  sentences, never cut (companions recognise it by its first sentence);
- one cast member not yet met (not missing/dead/captive) arrives, with the first sentence of
  their description and a question about a lead from the world's clue ledger;
- the clock (`inputs.worldTime.display`) and a countdown dimension, then a closing line from an
  escalating ladder indexed by the story turn, so no two turns end alike.
Deterministic: choices use story_kit.pick with a seed of session id + story turn.
"""

from __future__ import annotations

import re
from typing import Any

from .story_kit import (absent, addressed, appeared, is_zh, lore_about, lore_keyed, lore_quote, lore_surfaced,
                        mentioned, npcs, pick, player, sentences)

CLOSINGS = {
    "en": [
        ("For now the trouble is quiet, but it is not going away.", "Nothing has happened yet that cannot be undone."),
        ("Each answer seems to open two more questions.", "The pieces do not fit yet, but there are more of them now."),
        ("Someone here knows more than they are saying, and everyone can feel it.", "The talk has turned careful, and careful talk means fear."),
        ("There is less time than there was, and the hours have begun to push back.", "Whatever is coming has stopped waiting politely."),
        ("There is no going back to how this began.", "From here on, every choice will cost something."),
        ("It is close now, whatever it is — close enough to hear.", "The last of the easy choices is gone."),
        ("Even the silence sounds like a warning now.", "Nobody pretends any more that this will end quietly."),
    ],
    "zh": [
        ("眼下一切还算平静，可麻烦并没有走远。", "到现在为止，还没有什么是挽回不了的。"),
        ("每问出一个答案，就多出两个疑问。", "线头越来越多，却还拧不成一股绳。"),
        ("有人知道的比说出口的多，谁都感觉得到。", "说话的人都小心起来了，小心就是害怕。"),
        ("时辰比先前紧了，局面开始反过来推着人走。", "要来的东西，已经不再耐心等候了。"),
        ("事情再也回不到开头的样子了。", "从这里往后，每一个决定都要付出代价。"),
        ("不管那是什么，它已经近得能听见了。", "容易的选择，一个也不剩了。"),
        ("连四下的安静都像是一声警告。", "再没有人相信这件事能悄无声息地了结。"),
    ],
}
ARRIVALS = {
    "en": ["{name} arrives before anyone can say more.", "Footsteps, and {name} joins them.",
           "{name} has been standing close enough to hear.", "It is then that {name} appears."],
    "zh": ["这时{name}也到了。", "脚步声响，{name}走了过来。", "{name}不知什么时候已经站在一旁。", "{name}听见动静，赶了过来。"],
}
FINDINGS = {
    "en": ["It does not take {hero} long to find what matters.", "What {hero} finds bears out the talk in the village.",
           "The answer is there for anyone who looks closely."],
    "zh": ["{hero}四下一看，心里渐渐有了数。", "细看之下，事情露出了一角。", "{hero}没费多少工夫，就找到了要紧处。"],
}
_MODALS = {"can", "will", "must", "should", "would", "could", "may", "might", "shall"}
_AND_VERBS = {"watch", "look", "wait", "listen", "see", "ask", "tell", "go", "climb", "search", "take", "find", "check",
              "follow", "keep", "try", "make", "walk", "run", "head", "return", "show", "hand", "give", "read", "study", "say"}
_QUOTED = re.compile(r"[\"“「『](?P<speech>[^\"”」』]+)[\"”」』]")


def _third(verb: str) -> str:
    low = verb.lower()
    special = {"am": "is", "are": "is", "have": "has", "do": "does", "go": "goes", "was": "was", "were": "was"}
    if low in special:
        return special[low]
    if low in _MODALS:
        return low
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return low + "es"
    if re.search(r"[^aeiou]y$", low):
        return low[:-1] + "ies"
    return low + "s"


def _en_act(text: str, hero: str) -> str:
    """'I climb to the lamp room' → '<hero> climbs to the lamp room.'"""
    text = re.sub(r"^I'm\b", f"{hero} is", text)
    text = re.sub(r"^I'll\b", f"{hero} will", text)
    text = re.sub(r"^I've\b", f"{hero} has", text)
    text = re.sub(r"^I\s+([A-Za-z]+)", lambda m: f"{hero} {_third(m.group(1))}", text)
    text = re.sub(r"\b(and|then) ([a-z]+)\b", lambda m: f"{m.group(1)} {_third(m.group(2))}" if m.group(2) in _AND_VERBS else m.group(0), text)
    for pattern, repl in ((r"\bmyself\b", "themselves"), (r"\bmy\b", "their"), (r"\bme\b", "them"), (r"\bI'm\b", "they are"),
                          (r"\bI've\b", "they have"), (r"\bI am\b", "they are"), (r"\bI\b", "they"), (r"\bmine\b", "theirs")):
        text = re.sub(pattern, repl, text)
    return text if text[-1:] in ".!?" else text + "."


def _en_second(text: str, hero: str) -> str:
    """The opening scenario's second person ('you cross … and find …') told about the hero."""
    out = []
    named = False
    for sentence in sentences(text, False):
        if re.search(r"\byou\b", sentence, re.I):
            def subject(m: re.Match) -> str:
                nonlocal named
                who = hero if not named else "they"
                named = True
                return f"{who} {_third(m.group(1)) if who == hero else m.group(1)}"
            sentence = re.sub(r"\b[Yy]ou (?!are\b)([a-z]+)", subject, sentence)
            sentence = re.sub(r"\b(and|then) ([a-z]+)\b", lambda m: f"{m.group(1)} {_third(m.group(2))}" if m.group(2) in _AND_VERBS else m.group(0), sentence)
            sentence = re.sub(r"\b[Yy]ou are\b", f"{hero} is", sentence)
            sentence = re.sub(r"\b[Yy]our\b", "their", sentence)
            sentence = re.sub(r"\b[Yy]ou\b", "them", sentence)
            sentence = sentence[:1].upper() + sentence[1:]
        out.append(sentence)
    return " ".join(out)


def _zh_act(text: str, hero: str) -> str:
    body = text[1:] if text.startswith("我") else text
    body = body.replace("我们", "他们").replace("我的", "自己的").replace("我", "自己")
    out = hero + body
    return out if out[-1:] in "。！？" else out + "。"


def _player_line(text: str, hero: str, target: dict[str, Any] | None, zh: bool) -> str:
    """The player's input as story prose (see module docstring)."""
    text = " ".join(text.split())
    quoted = _QUOTED.search(text)
    to = ""
    if zh:
        if quoted:
            to = f"对{target['name']}" if target else ""
            return f"{hero}{to}说：「{quoted.group('speech').strip()}」"
        if text.startswith("我"):
            return _zh_act(text, hero)
        to = f"对{target['name']}" if target else ""
        return f"{hero}{to}开口道：「{text}」"
    if quoted or not re.match(r"^I('m|'ll|'ve)?\b", text):
        speech = (quoted.group("speech") if quoted else text).strip()
        asks = speech.endswith("?")
        speech = speech[:-1] + "," if speech.endswith(".") else speech
        if not speech.endswith((",", "?", "!")):
            speech += ","
        verb = "asks" if asks else "says"
        to = f" {target['name']}" if target and asks else (f" to {target['name']}" if target else "")
        return f"\u201c{speech}\u201d {hero} {verb}{to}."
    return _en_act(text, hero)


def _manner(c: dict[str, Any], zh: bool) -> str:
    """How a character speaks, from the first clause of their persona (else description)."""
    persona = str((c.get("fields") or {}).get("persona") or c.get("description") or "")
    if zh:
        return re.split(r"[，。；、]", persona)[0].strip()
    clause = re.split(r"[;.—(:]", persona)[0].strip()
    if not clause:
        return ""
    first = clause.split()[0].lower()
    if first.endswith("s") and not first.endswith(("ous", "ss", "less")):
        return f"{c['name']} {clause[0].lower()}{clause[1:]}."
    items = [i.strip() for i in clause.split(",")]
    kept = [items[0]]
    for item in items[1:]:
        word = item.split()[0].lower() if item.split() else ""
        if word.endswith("s") and not word.endswith(("ous", "ss", "less")):
            break
        kept.append(item)
    adjectives = ", ".join(kept) if len(kept) < 2 or " and " in kept[-1] else ", ".join(kept[:-1]) + " and " + kept[-1]
    return f"{c['name']}'s answer is {adjectives[0].lower()}{adjectives[1:]}."


def _answer(c: dict[str, Any], entry: dict[str, Any] | None, hero: str, zh: bool, seed: str) -> str:
    """The addressed character's reply: their manner, then the clue in their mouth (or, when the
    entry is about them, reported)."""
    quote = lore_quote(entry, zh) if entry else ""
    manner = _manner(c, zh)
    if zh:
        verb = pick(["答道", "开口说", "压低声音说", "想了想才说"], seed + ":verb")
        if not quote:
            return f"{c['name']}{manner}，{verb}：「这事我知道的不多，你去别处问问吧。」"
        if mentioned(quote, c, zh):
            return f"{c['name']}{manner}，话不多，意思却清楚：{quote}"
        return f"{c['name']}{manner}，{verb}：「{quote}」"
    if not quote:
        return f"{manner} \u201cI know less about that than you would like,\u201d {c['name']} says."
    if mentioned(quote, c, zh):
        return f"{manner} What {c['name']} tells {hero} comes down to this: {quote}"
    return f"{manner} \u201c{quote}\u201d"


def _clock(turn: dict[str, Any], zh: bool, seed: str) -> str:
    """The time at the start of the turn and the first countdown among the dimensions."""
    world_time = (turn.get("inputs") or {}).get("worldTime") or {}
    if isinstance(world_time, dict) and isinstance(world_time.get("value"), dict):
        world_time = world_time["value"]
    display = str(world_time.get("display") or "") if isinstance(world_time, dict) else ""
    out = []
    if display:
        out.append(pick(["此刻是{d}。", "转眼已是{d}。", "时辰到了{d}。"] if zh else
                        ["By the clock it is {d}.", "It is {d} now.", "The clock stands at {d}."], seed + ":clock").format(d=display))
    for dim in turn.get("dimensions") or []:
        props = (dim.get("schema") or {}).get("properties") or {}
        value = dim.get("value")
        for key, prop in props.items():
            title = str((prop or {}).get("title") or "")
            if (prop or {}).get("type") == "integer" and isinstance(value, dict) and isinstance(value.get(key), int) \
                    and re.search(r"until|left|remaining|剩余|还剩", f"{key} {title}", re.I):
                if zh:
                    out.append(f"{dim.get('name') or title}：{title}{value[key]}。")
                else:
                    out.append(f"{title or key}: {value[key]}.")
                return " ".join(out) if not zh else "".join(out)
    return (" " if not zh else "").join(out)


def _ledger_lead(turn: dict[str, Any], k: int) -> str:
    """The k-th lead of the first clue-ledger dimension (a map of {lead, status, note})."""
    for dim in turn.get("dimensions") or []:
        value = dim.get("value")
        if isinstance(value, dict):
            leads = [v["lead"] for v in value.values() if isinstance(v, dict) and isinstance(v.get("lead"), str)]
            if leads:
                return leads[k % len(leads)]
    return ""


def _lower_article(text: str) -> str:
    return re.sub(r"^(The|A|An) ", lambda m: m.group(1).lower() + " ", text)


def story(turn: dict[str, Any]) -> str:
    """This turn's prose (see module docstring)."""
    zh = is_zh(turn.get("locale"))
    lang = "zh" if zh else "en"
    world = turn.get("world") or {}
    chars = [c for c in turn.get("characters") or [] if c.get("name")]
    hero_c = player(chars)
    hero = hero_c["name"] if hero_c else ("来客" if zh else "The newcomer")
    lorebook = [e for e in turn.get("lorebook") or [] if e.get("content")]
    before = [str(m.get("content") or "") for m in turn.get("messages") or [] if m.get("role") == "assistant" and m.get("content")]
    so_far = "\n".join(before)
    k = len(before)
    seed = f"{turn.get('session_id') or ''}:{turn.get('turn')}:{k}"
    used = {e.get("id") for e in lore_surfaced(so_far, lorebook, zh)}
    fresh = [e for e in lorebook if e.get("id") not in used]
    cast = [c for c in npcs(chars) if not absent(c)]
    met = [c for c in cast if mentioned(so_far, c, zh, aliases=False)]
    text = (turn.get("player_message") or "").strip()
    sep = "" if zh else " "
    paragraphs: list[str] = []

    if text:
        target = addressed(text, chars, zh)
        speaker = target if target and not absent(target) else None
        acting = text.startswith("我") if zh else bool(re.match(r"^I('m|'ll|'ve)?\b", text)) and not _QUOTED.search(text)
        if speaker is None and not acting and met:  # plain speech to no one named: the newest face answers
            speaker = appeared(before[-1] if before else "", cast, zh)[-1:] or [met[-1]]
            speaker = speaker[0]
        pool = [*lore_keyed(text, fresh, zh), *(lore_about(target, fresh, zh) if target else []), *fresh]
        clue = pool[0] if pool else None
        first = [_player_line(text, hero, speaker, zh)]
        if speaker:
            first.append(_answer(speaker, clue, hero, zh, seed))
        elif clue:
            first.append(pick(FINDINGS[lang], seed + ":find").format(hero=hero) + sep + lore_quote(clue, zh))
        paragraphs.append(sep.join(first))
        spoken = {speaker["id"] if speaker else None}
    else:  # the opening: the scenario about the hero, and the first cast member it names
        scenario = str(world.get("opening_scenario") or "") or next(
            (str((d.get("value") or {}).get("openingScenario")) for d in turn.get("dimensions") or []
             if isinstance(d.get("value"), dict) and d["value"].get("openingScenario")), "") or str(world.get("summary") or "")
        told = scenario.replace("你们", "众人").replace("你的", f"{hero}的").replace("你", hero) if zh else _en_second(scenario, hero)
        paragraphs.append(told)
        named = appeared(scenario, cast, zh)
        speaker = named[0] if named else (cast[0] if cast else None)
        pool = [*lore_keyed(scenario, fresh, zh), *fresh]
        clue = pool[0] if pool else None
        if speaker:
            paragraphs.append(_answer(speaker, clue, hero, zh, seed))
        spoken = {speaker["id"] if speaker else None}
        met = [*met, *named]

    known = {c.get("id") for c in met} | spoken
    newcomer = next((c for c in cast if c.get("id") not in known and not mentioned(" ".join(paragraphs), c, zh, aliases=False)), None)
    if newcomer:
        description = (sentences(str(newcomer.get("description") or ""), zh) or [""])[0]
        arrival = pick(ARRIVALS[lang], seed + ":arrive").format(name=newcomer["name"])
        lead = _ledger_lead(turn, k)
        asks = (["{n}一开口便问起{l}。", "{n}也听说了{l}，想问个究竟。", "{n}张口就问{l}的事。"] if zh else
                ["{n} wants to hear about {l}.", "{n} has heard about {l} already and wants to know more.", "{n} asks at once about {l}."])
        ask = pick(asks, seed + ":ask").format(n=newcomer["name"], l=lead if zh else _lower_article(lead)) if lead else ""
        paragraphs.append(sep.join(p for p in (arrival, description, ask) if p))

    ladder = CLOSINGS[lang]
    level = ladder[min(k, len(ladder) - 1)] if k < len(ladder) else ladder[k % len(ladder)]
    closing = pick(list(level), seed + ":close") if k < len(ladder) else level[(k // len(ladder)) % 2]
    clock = _clock(turn, zh, seed)
    paragraphs.append(sep.join(p for p in (clock, closing) if p))
    return "\n\n".join(p for p in paragraphs if p)


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    """Story runtime: prose; other runtimes of this plugin: default behaviour."""
    if turn.get("is_story"):
        return {"text": story(turn)}
    return None
