"""The offline storyteller (issue 20): ten scripted turns per builtin world and locale, played
through the public API on the in-process worker (plugins_app/management/transcripts.py, the same
games `make transcripts` writes to docs/examples/), measured:

- the character the player addresses is named in the answer of that turn;
- an `act` is told as what the hero does — no render tag ("[Name · Act]", "【名·行动】") anywhere
  in the prose, least of all inside quotes;
- fewer than 5% of the sentences of the 11 story messages repeat;
- a clue-ledger record changes status by turn 5, and the deadline counts down with the clock;
- the time the prose shows is the time after the turn's advance, in the world's own calendar;
- no schema-placeholder values in the codex or affinity data, no narrator-only (GM) text in any
  player-visible message or codex entry;
- the committed transcript in docs/examples/ is what the game plays today (deterministic).

Embedded shape: one 10-turn game per world and locale. Hosted shape: a 3-turn smoke.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings

from plugins_app.management.transcripts import PLAYS, transcript_play
from plugins_app.registry import module_load_by_path

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
KIT = module_load_by_path(ROOT / "plugins_app" / "builtin" / "narrator", "narrator", "story_kit.py")
GAMES = [(world, locale) for world in PLAYS for locale in PLAYS[world]]
TAG = re.compile(r"\[[^\]\n]*·[^\]\n]*\]|\[(Say|Act|Narrate|Direct)\]|【[^】\n]*】")
QUOTED = re.compile(r"“[^”]*”|「[^」]*」|\"[^\"]*\"")
PLACEHOLDERS = {"name", "reason", "title", "content", "codex-title", "value", "category", "description", "text"}


def _hidden_truth(world_id: str, zh: bool) -> list[str]:
    """Sentences of the world document's narrator-only section (long enough to be telling)."""
    text = (ROOT / "sessions" / "worlds" / world_id / "WORLD.md").read_text(encoding="utf-8")
    heading = re.search(r"^## .*(narrator only|叙事者须知).*$", text, re.M)
    assert heading, world_id
    section = text[heading.end():].split("<!-- /narrator-only -->")[0]
    flat = section.replace("**", "").replace("- ", " ")
    return [s for s in KIT.sentences(flat, zh) if len(s) >= (12 if zh else 30)]


def _ledger_statuses(dimensions: dict) -> dict[str, str]:
    out = {}
    for dim_id, dim in dimensions.items():
        value = dim.get("value")
        if isinstance(value, dict):
            for key, rec in value.items():
                if isinstance(rec, dict) and "status" in rec and "lead" in rec:
                    out[f"{dim_id}/{key}"] = rec["status"]
    return out


@pytest.mark.parametrize("world_id,locale", GAMES)
def test_ten_scripted_turns_are_worth_reading(client, world_id, locale):
    played = transcript_play(client, world_id, locale)
    zh = locale.startswith("zh")
    hero = PLAYS[world_id][locale]["name"]
    assert played.locale == locale and len(played.turns) == 10
    prose = [played.opening, *(t.prose for t in played.turns)]
    assert all(prose), [i for i, p in enumerate(prose) if not p]

    for turn in played.turns:
        first = turn.prose.split("\n\n")[0]
        # the addressed character answers, named beyond the player's own line
        if turn.addressed:
            assert first.count(turn.addressed) >= turn.text.count(turn.addressed) + 2, (turn.addressed, first)
        # act → told as the hero's deed, never quoted
        if turn.kind == "act":
            assert first.startswith(hero) and first[len(hero):len(hero) + 1] not in "“「\"", first
        # no render tag anywhere, so none inside quotes
        assert not TAG.search(turn.prose), turn.prose
        assert not any(TAG.search(q) for q in QUOTED.findall(turn.prose))
        # the time shown is the clock after this turn's advance, in the world's own calendar
        after = turn.clock.rstrip("。.").split("→")[-1].strip()
        assert after and after in turn.prose, (after, turn.prose)
        if zh:
            assert not re.search(r"\d+:\d\d", turn.prose), turn.prose  # 12 shichen a day: no 24-hour clock

    # repeated sentences across the 11 messages < 5%
    sentences = [s for p in prose for para in p.split("\n\n") for s in KIT.sentences(para, zh)]
    repeated = len(sentences) - len(set(sentences))
    assert repeated / len(sentences) < 0.05, [s for s in set(sentences) if sentences.count(s) > 1]

    # the world moves: a clue changes status by turn 5; the countdown follows the clock
    initial = _ledger_statuses(played.opening_dimensions)
    by_five = _ledger_statuses(played.turns[4].dimensions)
    assert initial and any(by_five.get(k) != v for k, v in initial.items()), by_five
    last = played.turns[-1].dimensions
    if world_id == "yanhui-ferry":
        left = last["lanternDeadline"]["value"]["shichenLeft"]
        assert left < 44 and f"剩余时辰{left}。" in played.turns[-1].prose + "".join(t.prose for t in played.turns)
    else:
        minutes = last["night"]["value"]["minutesToReef"]
        assert minutes < 340 and f"Minutes until the Perpetua reaches the Teeth: {minutes}." in "".join(t.prose for t in played.turns)

    # no placeholders committed, nothing narrator-only shown
    cast = {c["name"] for c in played.characters}
    for row in played.codex:
        value = row["value"]
        assert value["title"] not in PLACEHOLDERS and value["content"] not in PLACEHOLDERS, value
    for row in played.affinity:
        assert row["value"]["name"] in cast, row
        assert all(v not in PLACEHOLDERS for v in row["value"].values() if isinstance(v, str)), row
    visible = "\n".join(str(m.get("content") or "") for m in played.messages) + "\n".join(
        json.dumps(row["value"], ensure_ascii=False) for row in played.codex)
    leaked = [s for s in _hidden_truth(world_id, zh) if s in visible]
    assert not leaked, leaked

    # the committed transcript is this game's (regenerate with `make transcripts`)
    committed = (ROOT / "docs" / "examples" / f"{world_id}.{locale}.md").read_text(encoding="utf-8")
    for turn in played.turns:
        assert turn.prose in committed, f"docs/examples/{world_id}.{locale}.md is stale: run `make transcripts`"


def test_a_session_in_a_locale_the_world_lacks_is_served_in_the_worlds_language(client):
    """Spec 004 §内容语言: yanhui-ferry has only zh-CN, so an en-US request gets zh-CN and says so."""
    response = client.post("/api/sessions", data=json.dumps({"worldId": "yanhui-ferry", "locale": "en-US"}),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["locale"] == "zh-CN" and body["requestedLocale"] == "en-US"


def _story_context(world_id: str, locale: str, hero: str, message: str, **extra) -> dict:
    """A story runtime's context for the narrator's script, built from the world package."""
    import yaml

    world = ROOT / "sessions" / "worlds" / world_id
    chars = json.loads((world / "characters" / "characters.json").read_text(encoding="utf-8"))
    lorebook = yaml.safe_load((world / "data" / "lorebook.yaml").read_text(encoding="utf-8"))
    characters = [{"id": c["id"], "name": c["name"], "type": "npc", "aliases": c.get("aliases", []), "fields": c["fields"],
                   "description": c["description"]} for c in chars]
    characters.append({"id": "player-x", "name": hero, "type": "player", "aliases": []})
    return {"session_id": "s-1", "locale": locale, "is_story": True, "turn": 2, "player_message": message,
            "world": {"name": world_id, "summary": "", "lore": ""}, "lorebook": lorebook, "characters": characters,
            "messages": [{"role": "assistant", "content": "The tower is dark."}], **extra}


def test_narrate_direct_and_tagged_act_are_obeyed():
    """The script reads the render tags of turns/engine/render.py (host seats narrate and direct)."""
    respond = module_load_by_path(ROOT / "plugins_app" / "builtin" / "narrator", "narrator", "scripted.py").respond
    hero = "Ada Quill"
    narrate = respond(_story_context("hollow-reach-light", "en-US", hero, "[Narrate] The wind drops and fog rolls in over the Neck."))["text"]
    assert narrate.startswith("The wind drops and fog rolls in over the Neck.") and not TAG.search(narrate)
    direct = respond(_story_context("hollow-reach-light", "en-US", hero, "[Direct] Have Nell show Ada Quill the logbook."))["text"]
    first = direct.split("\n\n")[0]
    assert first.startswith("Nell shows Ada Quill the logbook.") and "Nell Marrick" in first, first
    assert "Lights Commission" in first or "logbook" in first.split("logbook.", 1)[1]  # the matching lore answers
    act = respond(_story_context("hollow-reach-light", "en-US", hero, "[Ada Quill · Act] climb the tower stairs"))["text"]
    assert act.startswith("Ada Quill climbs the tower stairs.") and "“" not in act.split(".")[0]
    zh = respond(_story_context("yanhui-ferry", "zh-CN", "林照", "【林照·行动】我推开舱门，查看引匣。"))["text"]
    assert zh.startswith("林照推开舱门，查看引匣。") and not TAG.search(zh)
    assert "盐引是官府发给盐商的领盐凭据" in zh  # the entry whose keys the action names (引匣 → salt-voucher)


def test_a_per_locale_opening_is_told_in_the_session_locale():
    """A bilingual world's `openingScenario` ({"zh-CN": …, "en-US": …}) is resolved, never printed as a dict."""
    respond = module_load_by_path(ROOT / "plugins_app" / "builtin" / "narrator", "narrator", "scripted.py").respond
    scenario = {"zh-CN": "黄昏时分，你走进灯塔。", "en-US": "At dusk you walk into the lighthouse and find Nell Marrick waiting."}
    context = _story_context("hollow-reach-light", "en-US", "Ada Quill", "", messages=[])
    context["world"]["opening_scenario"] = scenario
    prose = respond(context)["text"]
    assert prose.startswith("At dusk Ada Quill walks into the lighthouse") and "{" not in prose and "黄昏" not in prose, prose
    context = _story_context("yanhui-ferry", "zh-CN", "林照", "", messages=[])
    context["world"]["opening_scenario"] = scenario
    assert respond(context)["text"].startswith("黄昏时分，林照走进灯塔。")


def test_the_default_story_prose_never_repeats_render_tags():
    """Story runtimes without a script of their own (turns/engine/providers/scripted.story_prose)."""
    from turns.engine.providers.scripted import story_prose

    chars = [{"name": "Ada Quill", "type": "player"}, {"name": "Nell Marrick", "type": "npc"}]
    en = story_prose({"locale": "en-US", "turn": 2, "player_message": "[Ada Quill · Act] I climb the stairs", "characters": chars,
                      "world": {"name": "Hollow Reach"}})
    zh = story_prose({"locale": "zh-CN", "turn": 2, "player_message": "【林照·行动】我推开舱门", "characters": [{"name": "林照", "type": "player"}],
                      "world": {"name": "雁回渡"}})
    assert "I climb the stairs" in en and not TAG.search(en)
    assert "我推开舱门" in zh and not TAG.search(zh)
