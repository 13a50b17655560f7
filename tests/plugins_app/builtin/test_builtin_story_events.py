"""story-events: hidden world events fire on the turn their condition holds (a cue the narrator
stages), never before and never reach a player view; plan-story-events checks plans; the scripted
planner plants a follow-up that intake stores hidden and that fires later."""
from __future__ import annotations

import json
import shutil

import pytest

from plugins_app.models import PluginData
from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data
from tests.plugins_app.builtin.catalogue_worlds import world_variant
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.support import error_of

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "world-time", "story-events"]
SECRET = "The keeper's logbook lies under the oil drums."
EVENTS = [
    {"id": "gull-warning", "title": "The Gulls Go Quiet", "priority": 5,
     "when": {"dimension": "night", "path": "causeway", "equals": "open"},
     "payload": "Every gull on the Reach falls silent at once and lifts off the rocks. Play the hush and the crew's unease."},
    {"id": "logbook-found", "title": "The Logbook", "when": {"revealed": "gull-warning", "turnsSinceGte": 2},
     "payload": SECRET + " Do not say who hid it."},
    {"id": "never", "when": {"dimension": "night", "path": "weather", "equals": "storm"}, "payload": "A storm that never comes yet."},
]
LEDGER = {"turn": 4, "revealed": [{"eventId": "gull-warning", "lastTurn": 1}], "planned": []}
DIMS = {"night": {"minutesToReef": 300, "causeway": "open", "weather": "gathering"}}


@pytest.fixture
def hidden_world(settings):
    target = world_variant("reach-hidden", files={"data/hidden/story-events.yaml": EVENTS}, sources={
        "storyEvents": {"kind": "yaml", "path": "data/hidden/story-events.yaml", "schema": "contract:story.events@1",
                        "to": "contract:story.events@1", "key": "id", "after": "dimensions", "visibility": "hidden"}})
    yield "reach-hidden"
    shutil.rmtree(target, ignore_errors=True)


def test_plan_checks_conditions_and_ids(run_tool):
    inputs = {"storyEvents": LEDGER, "dimensions": DIMS}
    event = {"id": "ferry-returns", "title": "The Ferry", "when": {"turnGte": 6}, "payload": "The ferryman comes back."}
    ok = run_tool("story-events", "plan-story-events", {"events": [event]}, inputs=inputs)
    assert ok.status == "success", ok.envelope
    assert ok.content["events"][0]["id"] == "ferry-returns" and not ok.proposals
    bad = [{**event, "id": "gull-warning"}, {**event, "id": "x-a", "when": {"dimension": "tide", "equals": 1}},
           {**event, "id": "x-b", "when": {"dimension": "night", "path": "causeway", "equals": "open"}}]
    code, message = error_of(run_tool("story-events", "plan-story-events", {"events": bad[:2]}, inputs=inputs))
    assert code == "invalid-input" and "already exists" in message and "unknown dimension 'tide'" in message
    code, message = error_of(run_tool("story-events", "plan-story-events", {"events": [bad[2]]}, inputs=inputs))
    assert "already holds" in message
    code, _ = error_of(run_tool("story-events", "plan-story-events", {"events": []}))
    assert code == "unavailable"


@pytest.mark.django_db(transaction=True)
def test_hidden_events_fire_in_order_and_stay_hidden(client, hidden_world):
    played = play_with(client, hidden_world, PLUGINS, name="Ada Quill", kind="act",
                       says=["I look out over the rocks.", "I walk the quay with Wenna.", "I check the oil store."])
    assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
    # the world's events were delivered to the hidden bucket only
    rows = PluginData.objects.filter(session_id=played.id, plugin_id="story-events")
    assert set(rows.values_list("namespace", flat=True)) >= {"_hidden.events", "ledger"}
    ledger = plugin_data(played.id, "story-events", "ledger")
    assert {k: v["turn"] for k, v in ledger.items()} == {"gull-warning": 1, "logbook-found": 3}
    prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
    gulls = [i for i, p in enumerate(prose) if "falls silent at once" in p]
    secret = [i for i, p in enumerate(prose) if SECRET in p]
    assert (gulls, secret) == ([0], [3])  # the opening shares logical turn 1 with the first player turn
    assert not any("Do not say" in p or "Play the hush" in p for p in prose)  # the brief's instructions stay out
    # the payload never reaches a player view before (or outside) its cue
    state = get_json(client, played, f"/api/sessions/{played.id}/plugin-data")
    assert SECRET not in json.dumps(state) and "storm that never" not in json.dumps(state)
    # the planner ran on turn 3 and its follow-up was stored hidden by intake
    assert completed(played, "story-events/plot") == ["success"]
    planned = plugin_data(played.id, "story-events", "_hidden.planned")
    assert len(planned) == 1 and next(iter(planned.values()))["plannedTurn"] == 3


@pytest.mark.django_db(transaction=True)
def test_zh_session_cue_in_chinese(client, settings):
    target = world_variant("reach-hidden-zh", base="yanhui-ferry", files={"data/hidden/story-events.yaml": [
        {"id": "lamp-out", "title": {"zh-CN": "灯灭了", "en-US": "The lamp"}, "when": {"time": "tick", "gte": 0},
         "payload": {"zh-CN": "渡口的灯忽然灭了，众人屏住了呼吸。", "en-US": "The ferry lamp goes out."}}]}, sources={
        "storyEvents": {"kind": "yaml", "path": "data/hidden/story-events.yaml", "schema": "contract:story.events@1",
                        "to": "contract:story.events@1", "key": "id", "visibility": "hidden"}})
    try:
        played = play_with(client, "reach-hidden-zh", PLUGINS, name="林照", kind="act", says=["我四下看看。"])
        assert not failed_runtimes(played)
        prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
        assert any("渡口的灯忽然灭了" in p for p in prose), prose
        assert "灯灭了" == plugin_data(played.id, "story-events", "ledger")["lamp-out"]["title"]
    finally:
        shutil.rmtree(target, ignore_errors=True)
