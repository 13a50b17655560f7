"""tabletop-rules: the point-buy step after the character form (validator refuses an overspend,
the answer reaches the hero's fields), and an attribute check settled before the narrator writes,
kept on retry and left alone by dice-check."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from sessions.models import Character
from tests.plugins_app.builtin.catalogue_support import failed_runtimes, plugin_data
from tests.plugins_app.builtin.catalogue_worlds import BUILTIN_WORLDS, world_variant
from tests.plugins_app.builtin.play_support import Played, act, get_json
from tests.turns.test_actions_helpers import stream_read

pytestmark = pytest.mark.django_db(transaction=True)

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "dice-check", "tabletop-rules"]
RULES = {"id": "creation", "budget": 3, "attributes": [{"id": "grit", "label": "Grit", "base": 1, "max": 4},
                                                      {"id": "wits", "label": "Wits", "base": 1, "max": 4}]}


@pytest.fixture
def point_buy_world():
    schema = yaml.safe_load((BUILTIN_WORLDS / "hollow-reach-light" / "world.yaml").read_text(encoding="utf-8"))["characterSchema"]
    schema["attributes"] += [{"id": a["id"], "name": a["label"], "type": "number", "min": 0, "max": 5, "defaultValue": 1,
                              "category": "abilities"} for a in RULES["attributes"]]
    target = world_variant("reach-tabletop", manifest={"characterSchema": schema},
                           files={"data/tabletop-rules.yaml": RULES}, sources={
                               "tabletopRules": {"kind": "yaml", "path": "data/tabletop-rules.yaml", "to": "contract:tabletop-rules.rules.initial@1",
                                                 "key": "id", "after": "dimensions"}})
    yield "reach-tabletop"
    shutil.rmtree(target, ignore_errors=True)


def _form(frames, interaction_id):
    return next(f for f in frames if f["type"] == "interaction.requested" and f["payload"]["interaction"]["interactionId"] == interaction_id)


def _answer(frame, values):
    return {"actions": [{"kind": "act", "fields": values, "interaction": {
        "turnId": frame["turnId"], "interactionId": frame["payload"]["interaction"]["interactionId"], "type": "form"}}]}


def test_point_buy_then_a_settled_check(client, point_buy_world):
    created = client.post("/api/sessions", json.dumps({"worldId": point_buy_world, "plugins": PLUGINS}), content_type="application/json").json()
    played = Played(id=created["id"], token=created["ownerToken"], created=created)
    character = _form(act(client, played, "start_session", {}), "char-creation")
    frames = act(client, played, "submit_actions", _answer(character, {"characterName": "Ada Quill", "origin": "Incomer"}))
    point_buy = _form(frames, "point-buy")
    fields = {f["name"]: f for f in point_buy["payload"]["interaction"]["fields"]}
    assert (fields["grit"]["min"], fields["grit"]["max"]) == (1, 4)
    # an overspend is refused by the validator, then a valid answer opens the story
    refused = client.post("/api/actions", json.dumps({"requestId": "req-overspend", "type": "submit_actions", "sessionId": played.id,
                                                      "payload": _answer(point_buy, {"grit": 4, "wits": 3})}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {played.token}")
    text = json.dumps(stream_read(refused), ensure_ascii=False)
    assert "form_rejected" in text and "3 points to spend" in text, text[-600:]
    frames = act(client, played, "submit_actions", _answer(point_buy, {"grit": 3, "wits": 2}))
    assert any(f["type"] == "narrative.completed" for f in frames)
    hero = Character.objects.get(session_id=played.id, type="player")
    assert (hero.fields["grit"], hero.fields["wits"]) == (3, 2)
    # a check the player asks for is settled before the narration, with value − base as modifier
    act(client, played, "submit_actions", {"actions": [{"kind": "act", "text": "I check my Grit and force the storm door."}]})
    receipt = plugin_data(played.id, "tabletop-rules", "receipts")["turn-1"]
    assert receipt["attribute"] == "grit" and receipt["modifier"] == 2 and receipt["total"] == receipt["roll"] + 2
    context = [c for c in played.model_calls(3) if c["runtimeId"] == "narrator"][0]
    assert receipt["notation"] in json.dumps(context["messages"], ensure_ascii=False)
    assert plugin_data(played.id, "dice-check", "rolls")["turn-1"]["tabletopReceipt"] is True
    # the narrator told the settled result and emitted no dice receipt of its own
    assert not [f for f in played.frames("tool.calling", 3) if f["payload"]["tool"] == "emit-event"]
    assert not failed_runtimes(played)
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "tabletop-rules" for s in g["specs"]] == ["tabletop-rules.checks"]


def test_check_requests_and_point_buy_messages_in_both_languages():
    from pathlib import Path

    from plugins_app.toolkit import module_load_by_path

    rules = module_load_by_path(Path(__file__).resolve().parents[3] / "plugins_app" / "builtin" / "tabletop-rules",
                                "tabletop-rules", "server/rules.py")
    zh_rules = {**RULES, "attributes": [{"id": "grit", "label": "韧性", "base": 1, "max": 4}]}
    assert rules.check_request("我用韧性检定，硬闯风暴门。", zh_rules)[0]["id"] == "grit"
    assert rules.check_request("Roll wits, hard: I read the faded chart.", RULES) == (RULES["attributes"][1], "hard")
    assert rules.check_request("I open the door.", RULES) is None
    assert "3 点" in rules.validate_point_buy({"grit": 4, "wits": 2}, RULES, {"locale": "zh-CN"})["message"]
    assert rules.validate_point_buy({"grit": 2, "wits": 2}, RULES, {"locale": "en-US"}) is None


@pytest.fixture
def emberback_point_buy():
    """The upstream emberback world (its character schema: five 0–5 attributes, default 2; only
    systems and fieldcraft are abilities) with creation rules that ask for more than the schema
    allows: an attribute it lacks, a stats attribute, a max above the schema's, a base below it."""
    from tests.plugins_app.builtin.catalogue_worlds import upstream_world as install

    rules = {"id": "creation", "budget": 4, "attributes": [
        {"id": "systems", "base": -1, "max": 9}, {"id": "fieldcraft", "label": "Fieldcraft", "base": 2, "max": 4},
        {"id": "grit", "label": "Grit", "base": 1, "max": 5}, {"id": "luck", "label": "Luck", "base": 0, "max": 3}]}
    target = install("emberback")
    (target / "data" / "tabletop-rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    descriptor_path = target / "data" / "world.data.yaml"
    descriptor = yaml.safe_load(descriptor_path.read_text(encoding="utf-8"))
    descriptor["sources"]["tabletopRules"] = {"kind": "yaml", "path": "data/tabletop-rules.yaml",
                                              "to": "contract:tabletop-rules.rules.initial@1", "key": "id"}
    descriptor_path.write_text(yaml.safe_dump(descriptor, sort_keys=False), encoding="utf-8")
    yield "emberback"
    shutil.rmtree(target, ignore_errors=True)


def test_point_buy_keeps_to_the_worlds_character_schema(client, emberback_point_buy):
    created = client.post("/api/sessions", json.dumps({"worldId": emberback_point_buy, "plugins": PLUGINS, "locale": "en-US"}),
                          content_type="application/json").json()
    played = Played(id=created["id"], token=created["ownerToken"], created=created)
    character = _form(act(client, played, "start_session", {}), "char-creation")
    # the character form leaves the numeric attributes to their schema defaults (no 1s)
    assert [f["name"] for f in character["payload"]["interaction"]["fields"]] == ["characterName"]
    frames = act(client, played, "submit_actions", _answer(character, {"characterName": "Ada Quill"}))
    point_buy = _form(frames, "point-buy")
    fields = {f["name"]: f for f in point_buy["payload"]["interaction"]["fields"]}
    # only the schema's bounded abilities, inside the schema's bounds, labelled with its names
    assert list(fields) == ["systems", "fieldcraft"]
    assert (fields["systems"]["min"], fields["systems"]["max"], fields["systems"]["label"]) == (0, 5, "Systems")
    assert (fields["fieldcraft"]["min"], fields["fieldcraft"]["max"]) == (2, 4)
    # the validator holds the same bounds: 6 is past the schema's max
    refused = client.post("/api/actions", json.dumps({"requestId": "req-too-high", "type": "submit_actions", "sessionId": played.id,
                                                      "payload": _answer(point_buy, {"systems": 6, "fieldcraft": 2})}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {played.token}")
    assert "form_rejected" in json.dumps(stream_read(refused))
    act(client, played, "submit_actions", _answer(point_buy, {"systems": 3, "fieldcraft": 3}))
    hero = Character.objects.get(session_id=played.id, type="player")
    assert {k: hero.fields[k] for k in ("systems", "fieldcraft", "grit", "insight", "rapport")} == {
        "systems": 3, "fieldcraft": 3, "grit": 2, "insight": 2, "rapport": 2}
    assert "luck" not in hero.fields and not failed_runtimes(played)
