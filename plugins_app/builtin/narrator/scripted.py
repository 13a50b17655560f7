"""Offline `scripted` model behaviour of narrator (turns/engine/providers/scripted.py: `respond`).

A short story in the session locale, told from the world's own material (helpers: story_kit.py;
localized values are resolved to the session locale, never printed as a dict):
- the opening retells the world's opening scenario about the player character (second person
  turned to the hero's name) and brings in the first present cast member it names;
- a turn reads the rendered input's action (story_kit.actions_of: `[Name · Act] …`, `【名·行动】…`,
  `[Narrate]`, `[Direct]`; untagged = say): `act` is told as what the hero does ("I climb …" →
  "<Hero> climbs …", 我… → <主角>…), never quoted; `say` as speech; `narrate` as written;
  `direct` as what happens next ("Have Nell show …" → "Nell shows …");
- the character the text names (name or alias) answers in their own voice: their persona's
  manner the first time they speak, a phrase of their own once, then the lore that matches what
  was asked (story_kit.lore_ranked: keys and shared words, best first) — only sentences the story
  has not told yet, so nothing is recited twice; with nothing matching, they deflect toward a lead;
- lore written to the narrator (world rules in the lorebook: "the player", orders to the
  telling — story_kit.lore_for_players) is never said aloud, and character motives are never
  voiced;
- when the turn's lore or the hero's own search bears on an open lead of the clue ledger
  (story_kit.lead_for), the prose says so (story_kit.confirm_line) and world-init's tracker marks
  that lead corroborated;
- one cast member not yet met (not missing/dead/captive) arrives, with the first sentence of
  their description and a question about a lead from the world's clue ledger;
- the clock after this turn's advance (story_kit.time_step, the step world-time's scripted
  advance takes) in the world's own calendar, each clock countdown that moves, then a closing
  line from an escalating ladder indexed by the story turn (a second pass takes the other line
  of each level), so no two turns end alike.
Deterministic: choices use story_kit.pick with a seed of session id + story turn.
"""

from __future__ import annotations

import re
from typing import Any

from .story_kit import (absent, actions_of, addressed, appeared, confirm_line, countdown_drop, countdown_fields, is_zh,
                        lead_for, ledger_of, localized, lore_about, lore_for_players, lore_keyed, lore_ranked, mentioned, npcs, pick, player, sentences,
                        time_step, title_of)

CLOSINGS = {
    "en": [
        ("For now the trouble is quiet, but it is not going away.", "Nothing has happened yet that cannot be undone."),
        ("Each answer seems to open two more questions.", "The pieces do not fit yet, but there are more of them now."),
        ("Someone here knows more than they are saying, and everyone can feel it.", "The talk has turned careful, and careful talk means fear."),
        ("There is less time than there was, and the hours have begun to push back.", "Whatever is coming has stopped waiting politely."),
        ("There is no going back to how this began.", "From here on, every choice will cost something."),
        ("It is close now, whatever it is — close enough to hear.", "The last of the easy choices is gone."),
        ("Even the silence sounds like a warning now.", "Nobody pretends any more that this will end quietly."),
        ("The night leans on every door along the shore.", "Somewhere out in the dark, something is keeping time."),
        ("Every face turned this way is weighing a choice of its own.", "The truth is near enough now to cast a shadow."),
        ("There are fewer places left for anyone to hide.", "Whoever planned this has begun to run short of time too."),
        ("The story has stopped asking and started to demand.", "What was whispered at the start is now said aloud."),
        ("One more push, and something will give.", "The end of this is in sight, and it is not kind."),
    ],
    "zh": [
        ("眼下一切还算平静，可麻烦并没有走远。", "到现在为止，还没有什么是挽回不了的。"),
        ("每问出一个答案，就多出两个疑问。", "线头越来越多，却还拧不成一股绳。"),
        ("有人知道的比说出口的多，谁都感觉得到。", "说话的人都小心起来了，小心就是害怕。"),
        ("时辰比先前紧了，局面开始反过来推着人走。", "要来的东西，已经不再耐心等候了。"),
        ("事情再也回不到开头的样子了。", "从这里往后，每一个决定都要付出代价。"),
        ("不管那是什么，它已经近得能听见了。", "容易的选择，一个也不剩了。"),
        ("连四下的安静都像是一声警告。", "再没有人相信这件事能悄无声息地了结。"),
        ("夜色压在沿岸每一扇门上。", "暗处像有什么东西在一下一下地数着时辰。"),
        ("朝这边看的每一张脸，都在掂量自己的主意。", "真相已经近得能投下影子了。"),
        ("能藏身的地方越来越少了。", "设下这个局的人，时间也不多了。"),
        ("事情不再发问，开始逼人表态。", "起初只敢悄悄说的话，如今已经有人说出口了。"),
        ("再推一把，总有什么要松动。", "结局已经望得见了，而且并不好看。"),
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


_PREPOSITIONS = frozenset({"to", "on", "at", "of", "by", "in", "for", "off", "with", "from", "onto", "upon", "over",
                           "past", "into", "near", "about", "after", "along", "among", "round", "under", "around",
                           "behind", "beside", "toward", "towards", "before", "against", "between", "through", "like"})


def _en_second(text: str, hero: str) -> str:
    """The opening scenario's second person ('you cross … and find …') told about the hero."""
    out = []
    named = False
    for sentence in sentences(text, False):
        if re.search(r"\byou\b", sentence, re.I):
            heroes: list[str] = []

            def subject(m: re.Match) -> str:
                nonlocal named
                who = hero if not named else "they"
                named = True
                heroes.append(who)
                return f"{m.group(1)}{who} {_third(m.group(2)) if who == hero else m.group(2)}"
            # After a preposition 'you' is an object even when a word follows ("Dozens of gazes fall
            # on you and …" → 'them'); anywhere else 'you <word>' is the subject.
            def subject_or_object(m: re.Match) -> str:
                before = re.findall(r"[A-Za-z]+", m.string[max(0, m.start() - 12):m.start()])
                if before and before[-1].lower() in _PREPOSITIONS:
                    return m.group(0)  # left for the object rule below ('them')
                return subject(m)

            sentence = re.sub(r"()\b[Yy]ou (?!are\b)([a-z]+)", subject_or_object, sentence)
            if heroes[-1:] == [hero]:  # '… and find' agrees with the named hero, not with 'they'
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
    """How a character speaks, from the first clause of their persona ('' without one: a
    description says who they are, not how they talk)."""
    persona = localized((c.get("fields") or {}).get("persona"), None)
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



SAYS = {"en": ["{n} answers", "{n} says", "{n} tells {h}", "{n} replies", "{n} puts it plainly"],
        "zh": ["答道", "开口说", "压低声音说", "想了想才说", "沉吟片刻，说"]}
DEFLECT = {
    "en": ["“That is not a thing I can tell you,” {n} says, and turns the talk to {l}.",
           "{n} has no straight answer for that and asks instead about {l}.",
           "“Ask me something I know,” says {n}. “Ask me about {l}.”"],
    "zh": ["{n}摇了摇头：「这个我说不上来。」话锋一转，问起了{l}。", "{n}没有正面回答，反倒问起{l}的事。", "「这我可不知道，」{n}说，「你倒不如去查查{l}。」"],
}
_TICS = re.compile(r"[\"“「『]([^\"”」』]{2,40})[\"”」』]")


def _tic(c: dict[str, Any]) -> str:
    """A phrase the character's persona quotes as theirs ("procedure", 「列位看官」), or ''."""
    found = _TICS.findall(str((c.get("fields") or {}).get("persona") or ""))
    return found[0].strip().rstrip("。.,，") if found else ""


def _quote_of(entry: dict[str, Any], so_far: str, zh: bool, count: int = 2) -> str:
    """The entry's first ``count`` sentences the story has not told yet ('' when all are told);
    a later part of an entry is headed by its title, so it does not dangle out of context."""
    every = sentences(str(entry.get("content") or ""), zh)
    fresh = [s for s in every if s not in so_far]
    quote = ("" if zh else " ").join(fresh[:count])
    if quote and every and fresh[0] != every[0] and _DANGLING[zh].search(fresh[0]):
        keys = [k for k in entry.get("keys") or [] if isinstance(k, str) and k.strip()]
        topic = keys[0] if keys else title_of(entry)
        if not zh and topic[:1].islower() and not topic.lower().startswith("the "):
            topic = "the " + topic
        return f"说到{topic}：{quote}" if zh else f"As for {topic}: {quote}"
    return quote


#: A later sentence of an entry that leans on the one before (a pronoun), so it needs its topic.
_DANGLING = {False: re.compile(r"\b(it|its|they|them|their|this|these|those)\b", re.I), True: re.compile(r"^(它|他们|她们|此|这|那)")}


def _own_words(c: dict[str, Any], so_far: str, zh: bool) -> str:
    """What the character can say of themselves when no lore matches: their attitude, then the
    later sentences of their description (never their motive), not yet told."""
    fields = c.get("fields") or {}
    pool = [*sentences(localized(fields.get("attitude"), None), zh), *sentences(localized(c.get("description"), None), zh)[1:]]
    for s in pool:
        if s and s not in so_far:
            return s
    return ""


def _answer(c: dict[str, Any], quote: str, hero: str, zh: bool, seed: str, so_far: str, lead: str, k: int) -> str:
    """The addressed character's reply in their own voice: their manner the first time they speak,
    a phrase of their own once, then the clue in their mouth (or, when the clue is about them,
    reported); with nothing to tell, a deflection toward a ledger lead."""
    manner = _manner(c, zh)
    first_time = bool(manner) and (manner not in so_far)
    tic = _tic(c)
    tic_said = bool(tic) and tic in so_far
    if zh:
        who = f"{c['name']}{manner}，" if first_time else c["name"]
        verb = pick(SAYS["zh"], seed + ":verb")
        if not quote:
            if lead:
                return pick(DEFLECT["zh"], seed + ":deflect").format(n=c["name"], l=lead)
            if k == 0:  # the opening: a greeting, not a refusal
                return f"{who}打量了{hero}一眼：「你就是{hero}？那你自己来看吧。」"
            return f"{who}{verb}：「这事我知道的不多，你去别处问问吧。」"
        if mentioned(quote, c, zh):
            return f"{who}话不多，意思却清楚：{quote}"
        opener = f"{tic}，" if tic and not tic_said else ""
        return f"{who}{verb}：「{opener}{quote}」"
    lead_en = _lower_article(lead) if lead else ""
    lead_in = (manner + " ") if first_time else ""
    if not quote:
        if lead_en:
            return lead_in + pick(DEFLECT["en"], seed + ":deflect").format(n=c["name"], l=lead_en)
        if k == 0:  # the opening: a greeting, not a refusal
            return lead_in + f"“So you are {hero},” {c['name']} says. “Then you had better see this for yourself.”"
        return lead_in + f"“I know less about that than you would like,” {c['name']} says."
    if mentioned(quote, c, zh):
        return f"{lead_in}What {c['name']} tells {hero} comes down to this: {quote}"
    verb = pick(SAYS["en"], seed + ":verb").format(n=c["name"], h=hero)
    extra = f" {c['name']} adds, in the way everyone here knows: “{tic[:1].upper() + tic[1:]}.”" if tic and not tic_said else ""
    return f"{lead_in}{verb}: “{quote}”{extra}"


def _world_clock(turn: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """(the world-time context value, its tick) — ({}, 0) without a clock."""
    world_time = (turn.get("inputs") or {}).get("worldTime") or {}
    if isinstance(world_time, dict) and isinstance(world_time.get("value"), dict):
        world_time = world_time["value"]
    if not isinstance(world_time, dict) or not isinstance(world_time.get("tick"), int):
        return {}, 0
    return world_time, world_time["tick"]


_CALENDAR: Any = None


def _calendar_class() -> Any:
    """world-time/server/clock.py's Calendar (loaded once by path), for the time after the turn."""
    global _CALENDAR
    if _CALENDAR is None:
        from pathlib import Path

        from plugins_app.toolkit import module_load_by_path

        _CALENDAR = module_load_by_path(Path(__file__).resolve().parents[1] / "world-time", "world-time", "server/clock.py").Calendar
    return _CALENDAR


def _clock(turn: dict[str, Any], zh: bool, seed: str, action: str, kind: str) -> str:
    """The time after this turn's advance (the same step world-time's scripted advance takes) in
    the world's own calendar, and each clock countdown that moves this turn (or, on the opening,
    where it stands)."""
    world_time, tick = _world_clock(turn)
    out = []
    elapsed = 0
    calendar = None
    if world_time and isinstance(world_time.get("definition"), dict):
        definition = world_time["definition"]
        evolution = definition.get("evolution") or {}
        if evolution.get("mode") in ("forward", "bidirectional"):
            elapsed = min(time_step(action, kind, int(evolution.get("defaultStep") or 0)), int(evolution.get("maxStep") or 10 ** 6))
        try:
            calendar = _calendar_class()(definition)
            display = calendar.label(tick + elapsed, str(turn.get("locale") or "en-US"))
        except Exception:  # a definition the calendar cannot read: fall back to the published label
            calendar, display = None, str(world_time.get("display") or "")
        if display:
            out.append(pick(["此刻已是{d}。", "转眼已是{d}。", "时辰到了{d}。"] if zh else
                            ["By the clock it is now {d}.", "It is {d} now.", "The clock stands at {d}."], seed + ":clock").format(d=display))
    opening = not (turn.get("player_message") or "").strip()
    for dim in turn.get("dimensions") or []:
        value = dim.get("value")
        if not isinstance(value, dict):
            continue
        for key, title, unit in countdown_fields(dim):
            if not isinstance(value.get(key), int):
                continue
            drop = 0
            if calendar is not None and elapsed:
                since = tick - calendar.initial_tick()
                drop = countdown_drop(unit, since, elapsed, calendar.minutes_per_hour, calendar.hours_per_day) if calendar.kind == "calendar" else 0
            low = int(((dim.get("schema") or {}).get("properties") or {}).get(key, {}).get("minimum", 0))
            new = max(low, value[key] - drop)
            if new != value[key] or opening:
                label = title or key
                out.append(f"{dim.get('name') or label}：{label}{new}。" if zh else f"{label}: {new}.")
    return ("" if zh else " ").join(out)


def _ledger_lead(turn: dict[str, Any], k: int) -> str:
    """The k-th lead of the first clue-ledger dimension (a map of {lead, status, note})."""
    _, value = ledger_of(turn.get("dimensions") or [])
    leads = [v["lead"] for v in value.values() if isinstance(v, dict) and isinstance(v.get("lead"), str)]
    return leads[k % len(leads)] if leads else ""


def _lower_article(text: str) -> str:
    return re.sub(r"^(The|A|An) ", lambda m: m.group(1).lower() + " ", text)


def _act_line(text: str, hero: str, zh: bool) -> str:
    """An `act` action told as what the hero does (third person, never quoted)."""
    text = " ".join(text.split()).strip()
    if zh:
        return _zh_act(text, hero) if text.startswith("我") else (hero + text + ("" if text[-1:] in "。！？" else "。"))
    if re.match(r"^I('m|'ll|'ve)?\b", text):
        return _en_act(text, hero)
    if text[:1].islower():
        first, _, rest = text.partition(" ")
        return _en_act(f"I {first} {rest}".strip(), hero)
    return text if text[-1:] in ".!?" else text + "."


def _direct_line(text: str, chars: list[dict[str, Any]], zh: bool) -> str:
    """A `direct` instruction obeyed: told as what happens next ("Have Nell show the log" →
    "Nell shows the log."; 「让裴照盘问林照」 → 「裴照盘问林照。」)."""
    text = " ".join(text.split()).strip()
    if zh:
        body = re.sub(r"^(请|让|叫|要|安排)", "", text)
        return body + ("" if body[-1:] in "。！？" else "。")
    body = re.sub(r"^(please\s+)?(let|have|make)\s+", "", text, flags=re.I)
    for c in npcs(chars):
        for name in sorted([c["name"], *(c.get("aliases") or [])], key=len, reverse=True):
            if body.startswith(name + " "):
                verb, _, rest = body[len(name) + 1:].partition(" ")
                body = f"{name} {_third(verb)} {rest}".strip()
                break
        else:
            continue
        break
    body = body[:1].upper() + body[1:]
    return body if body[-1:] in ".!?" else body + "."


def _clue(body: str, target: dict[str, Any] | None, lorebook: list[dict[str, Any]], so_far: str, zh: bool,
          loose: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The lore that answers what was asked: the best-matching entry with sentences still untold
    (then entries about the addressed character); (None, '') when nothing matches. ``loose``: the
    hero looks around (an act), so any shared word leads somewhere."""
    ranked = [e for _, e in lore_ranked(body, lorebook, zh, loose=loose)]
    keyed = [e for e in ranked if e in lore_keyed(body, lorebook, zh)]
    if keyed:  # the player named a topic: answer about it (or say it is told), not about a word in passing
        ranked = keyed
    about = lore_about(target, lorebook, zh) if target else []
    for entry in [*ranked, *[e for e in about if e not in ranked]]:
        quote = _quote_of(entry, so_far, zh)
        if quote:
            return entry, quote
    if ranked:  # what was asked is already told: the answer says so instead of reciting other lore
        return ranked[0], ""
    return None, ""


def _echo(c: dict[str, Any], entry: dict[str, Any], hero: str, zh: bool, seed: str) -> str:
    """The reply when the matching lore was already told: the character confirms it in a line."""
    title = title_of(entry)
    if zh:
        return pick(["{n}点点头：「{t}的事，你查到的没错。」", "「{t}？」{n}看了{h}一眼，「该知道的，你已经知道了。」"], seed + ":echo").format(n=c["name"], t=title, h=hero)
    return pick(["“{t}? You have that right already,” {n} says.", "{n} nods at the mention of {t}: “You know as much as I do now.”"],
                seed + ":echo").format(n=c["name"], t=title)


def story(turn: dict[str, Any]) -> str:
    """This turn's prose (see module docstring)."""
    zh = is_zh(turn.get("locale"))
    locale = turn.get("locale")
    lang = "zh" if zh else "en"
    world = turn.get("world") or {}
    chars = [c for c in turn.get("characters") or [] if c.get("name")]
    hero_c = player(chars)
    hero = hero_c["name"] if hero_c else ("来客" if zh else "The newcomer")
    lorebook = lore_for_players([{**e, "content": localized(e.get("content"), locale)} for e in turn.get("lorebook") or [] if e.get("content")])
    before = [str(m.get("content") or "") for m in turn.get("messages") or [] if m.get("role") == "assistant" and m.get("content")]
    so_far = "\n".join(before)
    k = len(before)
    seed = f"{turn.get('session_id') or ''}:{turn.get('turn')}:{k}"
    cast = [c for c in npcs(chars) if not absent(c)]
    met = [c for c in cast if mentioned(so_far, c, zh, aliases=False)]
    text = (turn.get("player_message") or "").strip()
    sep = "" if zh else " "
    paragraphs: list[str] = []
    _, ledger = ledger_of(turn.get("dimensions") or [])
    kind, body = "say", ""

    if text:
        action = (actions_of(text) or [{"kind": "say", "actor": None, "text": text}])[0]
        kind, body = action["kind"], action["text"] or text
        target = addressed(body, chars, zh)
        speaker = target if target and not absent(target) else None
        if kind == "say":
            acting = body.startswith("我") if zh else bool(re.match(r"^I('m|'ll|'ve)?\b", body)) and not _QUOTED.search(body)
        else:
            acting = True
        if speaker is None and not acting and met:  # plain speech to no one named: the newest face answers
            speaker = (appeared(before[-1] if before else "", cast, zh)[-1:] or [met[-1]])[0]
        if kind == "act":
            line = _act_line(body, hero, zh)
        elif kind == "narrate":
            line = body if body[-1:] in ".!?。！？”」" else body + ("。" if zh else ".")
        elif kind == "direct":
            line = _direct_line(body, chars, zh)
        else:
            line = _player_line(body, hero, speaker, zh)
        entry, quote = _clue(body, target, lorebook, so_far, zh, loose=acting and speaker is None)
        lead_key = lead_for(entry if quote else None, body, ledger, zh, searched=kind == "act") if ledger else None
        lead_text = str(ledger[lead_key]["lead"]) if lead_key else ""
        first = [line]
        if speaker and entry is not None and not quote:
            first.append(_echo(speaker, entry, hero, zh, seed))
        elif speaker:
            first.append(_answer(speaker, quote, hero, zh, seed, so_far, _ledger_lead(turn, k) if not quote else "", k))
        elif quote:
            told = [f for f in FINDINGS[lang] if f.format(hero=hero) not in so_far] or FINDINGS[lang]
            first.append(pick(told, seed + ":find").format(hero=hero) + sep + quote)
        if lead_text and (quote or kind == "act"):
            first.append(confirm_line(lead_text, zh))
        paragraphs.append(sep.join(p for p in first if p))
        spoken = {speaker["id"] if speaker else None}
    else:  # the opening: the scenario about the hero, and the first cast member it names
        scenario = localized(world.get("opening_scenario"), locale) or next(
            (localized((d.get("value") or {}).get("openingScenario"), locale) for d in turn.get("dimensions") or []
             if isinstance(d.get("value"), dict) and d["value"].get("openingScenario")), "") or localized(world.get("summary"), locale)
        told = scenario.replace("你们", "众人").replace("你的", f"{hero}的").replace("你", hero) if zh else _en_second(scenario, hero)
        paragraphs.append(told)
        named = appeared(scenario, cast, zh)
        speaker = named[0] if named else (cast[0] if cast else None)
        entry, quote = _clue(scenario, None, lorebook, so_far + "\n" + told, zh)
        if speaker:
            paragraphs.append(_answer(speaker, quote, hero, zh, seed, so_far, "", k))
        spoken = {speaker["id"] if speaker else None}
        met = [*met, *named]

    known = {c.get("id") for c in met} | spoken
    newcomer = next((c for c in cast if c.get("id") not in known and not mentioned(" ".join(paragraphs), c, zh, aliases=False)), None)
    if newcomer:
        description = (sentences(localized(newcomer.get("description"), locale), zh) or [""])[0]
        arrival = pick(ARRIVALS[lang], seed + ":arrive").format(name=newcomer["name"])
        lead = _ledger_lead(turn, k)
        asks = (["{n}一开口便问起{l}。", "{n}也听说了{l}，想问个究竟。", "{n}张口就问{l}的事。"] if zh else
                ["{n} wants to hear about {l}.", "{n} has heard about {l} already and wants to know more.", "{n} asks at once about {l}."])
        ask = pick(asks, seed + ":ask").format(n=newcomer["name"], l=lead if zh else _lower_article(lead)) if lead else ""
        paragraphs.append(sep.join(p for p in (arrival, description if description not in so_far else "", ask) if p))

    ladder = CLOSINGS[lang]
    level = k % len(ladder)
    chosen = pick(list(ladder[level]), f"{turn.get('session_id') or ''}:{level}:close")
    # the first pass down the ladder takes one line of each level, the second pass the other
    closing = chosen if (k // len(ladder)) % 2 == 0 else ladder[level][1 - ladder[level].index(chosen)]
    clock = _clock(turn, zh, seed, body, kind)
    paragraphs.append(sep.join(p for p in (clock, closing) if p))
    return "\n\n".join(p for p in paragraphs if p)


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    """Story runtime: prose; other runtimes of this plugin: default behaviour."""
    if turn.get("is_story"):
        from .story_inputs import story_with_inputs  # the catalogue plugins' inputs (issue 20)

        return story_with_inputs(turn, story)
    return None
