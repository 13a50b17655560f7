"""GET /api/sessions/:id/ui-slots (spec 004 §Session UI projections): each slot's current value, from a
plugin's ``ui.slot@1`` provider or the host's projection of committed data."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.sessions.ui_support import ui_plugins, ui_session_create  # noqa: F401
from turns.models import RuntimeOutput

pytestmark = pytest.mark.django_db

PROMPTS = {"scene": "Harbour at dusk", "recap": "The bell rang.", "decision": "Answer the keeper?",
           "prompts": [{"text": "Ask about the bell", "kind": "ask"}, {"text": "Wait", "kind": "observe"},
                       {"text": "Ring it again", "kind": "act"}]}


def slots(client, session_id: str, query: str = "") -> list[dict]:
    response = client.get(f"/api/sessions/{session_id}/ui-slots{query}")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def committed_guide_output(session_id: str, turn_id: str, structured: dict) -> None:
    """A runtime output of the scene-prompts@1 runtime, as the commit chain stores it."""
    RuntimeOutput.objects.create(session_id=session_id, output_id=str(uuid.uuid4()), turn_id=turn_id,
                                 plugin_id="ui-prompter", runtime_id="ui-prompter", status="success",
                                 output={"results": [{"text": "", "structured": structured}]})


def character(client, session_id: str, character_id: str, **fields) -> None:
    response = client.post(f"/api/sessions/{session_id}/characters", json.dumps(
        {"id": character_id, "name": character_id.title(), "type": "npc", "fields": fields}), content_type="application/json")
    assert response.status_code == 200, response.content


def test_before_anything_is_committed_stage_choices_is_null(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-prompter"])

    items = slots(client, created["id"], "?prefix=stage.")

    # the stage slots only plugins fill (cast, backdrop, dialogue, music) are null without a provider too
    assert items == [{"slot": name, "value": None, "revision": items[0]["revision"]} for name in (
        "stage.choices@1", "stage.cast@1", "stage.backdrop@1", "stage.dialogue@1", "stage.music@1")]


def test_stage_choices_project_the_newest_scene_prompts_output(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-prompter"])
    committed_guide_output(created["id"], "turn-1", {**PROMPTS, "prompts": PROMPTS["prompts"][:1] * 3})
    committed_guide_output(created["id"], "turn-2", PROMPTS)

    (item,) = slots(client, created["id"], "?slot=stage.choices@1")

    assert item["value"] == {"turnId": "turn-2", "scene": "Harbour at dusk", "decision": "Answer the keeper?",
                             "prompts": PROMPTS["prompts"]}
    assert len(item["revision"]) == 16


def test_revision_identifies_the_value(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-prompter"])
    committed_guide_output(created["id"], "turn-1", PROMPTS)
    first = slots(client, created["id"], "?prefix=stage.")[0]["revision"]
    same = slots(client, created["id"], "?prefix=stage.")[0]["revision"]

    committed_guide_output(created["id"], "turn-2", PROMPTS)

    assert first == same != slots(client, created["id"], "?prefix=stage.")[0]["revision"]


def test_character_visuals_are_keyed_by_character_and_a_missing_key_is_null(client, ui_plugins):
    created = ui_session_create(client, ["teller"])
    character(client, created["id"], "keeper", avatar="keeper.png")
    character(client, created["id"], "gull")

    items = slots(client, created["id"], "?slot=character.visual@1")
    one = slots(client, created["id"], "?key=keeper")
    gone = slots(client, created["id"], "?key=nobody")

    # The world's own characters come first (oldest first), then the two created here.
    assert [(i["key"], i["value"]) for i in items][-2:] == [
        ("keeper", {"characterId": "keeper", "name": "Keeper", "type": "npc", "image": "keeper.png"}),
        ("gull", {"characterId": "gull", "name": "Gull", "type": "npc", "image": None})]
    assert ("hero", {"characterId": "hero", "name": "Ada", "type": "player", "image": None}) in [
        (i["key"], i["value"]) for i in items]
    assert one == [items[-2]]
    assert gone == [{"slot": "character.visual@1", "key": "nobody", "value": None, "revision": gone[0]["revision"]}]


def test_prefix_narrows_and_an_unknown_slot_is_400(client, ui_plugins):
    created = ui_session_create(client, ["teller"])
    character(client, created["id"], "keeper")

    assert [i["slot"] for i in slots(client, created["id"], "?prefix=stage.c")] == ["stage.choices@1", "stage.cast@1"]
    assert slots(client, created["id"], "?prefix=nothing.") == []
    response = client.get(f"/api/sessions/{created['id']}/ui-slots?slot=stage.map@1")
    assert response.status_code == 400 and response.json()["code"] == "unknown_ui_slot"


def test_a_plugin_provider_answers_for_its_slot(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-imager"])
    character(client, created["id"], "keeper", avatar="keeper.png")

    provided = slots(client, created["id"], "?slot=character.visual@1")
    other = slots(client, created["id"], "?key=keeper")

    assert [(i["key"], i["value"]) for i in provided] == [("hero", {"image": "hero.png", "session": created["id"]})]
    assert other[0]["value"] is None


def test_an_unknown_session_is_404(client, ui_plugins):
    response = client.get("/api/sessions/nope/ui-slots")

    assert response.status_code == 404 and response.json()["code"] == "session_not_found"
