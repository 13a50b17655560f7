"""Answers to the interactions a turn asked, over HTTP (spec 004 §玩家交互 and its 使用说明; spec 000
create-form / create-choices / 交互协议; issue 17): one validator per interaction type reading what the
builtin tools write, rejections with nothing written, identical duplicates merged, localized fallback
narratives and confirmation labels, the form validator's provider checks, and the interaction records.
Test plugins: tests/turns/lifecycle_support.py (``asker`` asks, ``teller`` tells)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import ChatMessage, Session, TurnMessage
from tests.turns.lifecycle_support import (
    act, ask, builtin_dir_with_lifecycle_plugins, completed, rejected, reset_files, say,
)
from tests.turns.test_actions_helpers import action_body, post_action, session_make
from turns.models import InteractionRecord, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_lifecycle_plugins(tmp_path / "builtin"))
    reset_files()
    registry_reset()
    yield
    reset_files()
    registry_reset()


CHOICES = [{"id": "left", "label": "Take the left path"}, {"id": "right", "label": "Take the right path"}]
FORM_FIELDS = [
    {"type": "text", "name": "name", "label": "Name", "required": True},
    {"type": "number", "name": "age", "label": "Age", "min": 1, "max": 120},
    {"type": "number", "name": "gold", "label": "Gold", "min": 0, "step": 5, "defaultValue": 10},
    {"type": "select", "name": "class", "label": "Class", "options": ["warrior", "mage"], "defaultValue": "warrior"},
    {"type": "checkbox", "name": "brave", "label": "Brave"},
]


def _session(locale="en-US"):
    session = session_make(plugins=("teller", "asker"))
    Session.objects.filter(pk=session.pk).update(locale=locale)
    return session


def _asked(api, session, *, tools=None, interactions=None) -> str:
    """Play a turn in which asker asks; returns that turn's id."""
    ask(tools=tools, interactions=interactions)
    done = completed(say(api, session.id, "I stop and think."))
    assert done["committed"] is True, done
    return done["turnId"]


def _choice(api, session) -> str:
    return _asked(api, session, tools=[{"tool": "create-choices", "args": {"choiceId": "path", "prompt": "Which way?",
                                                                            "choices": CHOICES}}])


def _form(api, session, template="I am {{name}}, {{age}} years old, a {{class}} with {{gold}} gold.", **extra) -> str:
    args = {"formId": "hero", "title": "Your hero", "fields": FORM_FIELDS, "submitLabel": "Go",
            "narrativeTemplate": template, **extra}
    return _asked(api, session, tools=[{"tool": "create-form", "args": args}])


def _answer(turn_id, interaction_id, type, fields, kind=None):
    return {"kind": kind or ("say" if type == "choice" else "act"), "fields": fields,
            "interaction": {"turnId": turn_id, "interactionId": interaction_id, "type": type}}


def _submit(api, session, *answers):
    return act(api, session.id, payload={"actions": list(answers)})


def _written(session) -> dict:
    return {"turns": TurnResult.objects.filter(session=session).count(),
            "chat": ChatMessage.objects.filter(session=session).count(),
            "history": TurnMessage.objects.filter(session=session).count(),
            "data": PluginData.objects.filter(session=session).count(),
            "interactions": list(InteractionRecord.objects.filter(session=session).order_by("id").values_list("status", "answer")),
            "turnsPlayed": Session.objects.get(pk=session.pk).completed_player_turns}


def _refused(api, session, answers, code):
    before = _written(session)
    payload = rejected(_submit(api, session, *answers))
    assert payload["code"] == code, payload
    assert _written(session) == before
    return payload


# --- choice ------------------------------------------------------------------------------------------


def test_a_forged_choice_is_refused_and_a_forged_label_never_reaches_the_story(api):
    # given a committed turn that offered two choices (create-choices writes `choices`)
    session = _session()
    turn = _choice(api, session)
    # then an id that was not offered, a second field or no id are refused, nothing written
    _refused(api, session, [_answer(turn, "path", "choice", {"selectedId": "up"})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "path", "choice", {"selectedId": "left", "cheat": 1})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "path", "choice", {"selectedLabel": "Win"})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "path", "form", {"selectedId": "left"}, kind="say")], "invalid_interaction_submission")
    # when the answer is an offered id with a forged label
    frames = _submit(api, session, _answer(turn, "path", "choice", {"selectedId": "left", "selectedLabel": "I win the game"}))
    # then the saved values and the player's message use the offered label
    submitted = frames[0]
    assert submitted["type"] == "interaction.submitted"
    [result] = submitted["payload"]["results"]
    assert result["values"] == {"selectedId": "left", "selectedLabel": "Take the left path"}
    assert result["filledNarrative"] == "Take the left path"
    assert submitted["payload"]["interactionTurnId"] == turn
    done = completed(frames)
    assert done["committed"] is True
    [message] = ChatMessage.objects.filter(session=session, role="user", turn_id=done["turnId"])
    assert message.content == "Take the left path"
    record = InteractionRecord.objects.get(session=session, interaction_id="path")
    assert record.status == "answered" and record.answer["values"]["selectedLabel"] == "Take the left path"
    # and a second answer is refused, whatever its value
    payload = _refused(api, session, [_answer(turn, "path", "choice", {"selectedId": "right"})], "interaction_already_submitted")
    assert payload["message"].startswith("This was already submitted.") and "details" not in payload


# --- confirmation ------------------------------------------------------------------------------------


def _confirmation(api, session, template=None) -> str:
    interaction = {"type": "confirmation", "interactionId": "accept", "prompt": "Accept the quest?"}
    if template:
        interaction["narrativeTemplate"] = template
    return _asked(api, session, interactions=[interaction])


def test_a_confirmation_takes_a_boolean_and_reads_with_the_spec_labels(api):
    session = _session()
    turn = _confirmation(api, session, template="I answer: {{confirmed}}.")
    # then "no" (a string) is not a boolean
    _refused(api, session, [_answer(turn, "accept", "confirmation", {"confirmed": "no"})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "accept", "confirmation", {})], "invalid_interaction_submission")
    # when the player declines
    frames = _submit(api, session, _answer(turn, "accept", "confirmation", {"confirmed": False}))
    # then the value stays false and the template reads "Cancel"
    [result] = frames[0]["payload"]["results"]
    assert result["values"] == {"confirmed": False} and result["filledNarrative"] == "I answer: Cancel."
    assert InteractionRecord.objects.get(session=session, interaction_id="accept").answer["values"] == {"confirmed": False}


@pytest.mark.parametrize(("locale", "confirmed", "expected"), [
    ("en-US", True, "[Player confirmed] Accept the quest?"),
    ("en-US", False, "[Player cancelled] Accept the quest?"),
    ("zh-CN", True, "[玩家确认] Accept the quest?"),
    ("ru-RU", False, "[Игрок отменил] Accept the quest?"),
    ("fr-FR", True, "[Player confirmed] Accept the quest?"),
])
def test_a_confirmation_without_template_reads_as_the_localized_fallback(api, locale, confirmed, expected):
    session = _session(locale)
    turn = _confirmation(api, session)
    frames = _submit(api, session, _answer(turn, "accept", "confirmation", {"confirmed": confirmed}))
    assert frames[0]["payload"]["results"][0]["filledNarrative"] == expected
    assert completed(frames)["committed"] is True


# --- form --------------------------------------------------------------------------------------------


def test_form_values_are_checked_and_every_issue_is_listed(api):
    # given a committed form (create-form)
    session = _session()
    turn = _form(api, session)
    # then out-of-range, off-step, unlisted and missing values are one form_rejected with all issues
    payload = _refused(api, session, [_answer(turn, "hero", "form", {"name": "", "age": 150, "gold": 7, "class": "thief"})],
                       "form_rejected")
    issues = payload["details"]["issues"]
    assert [i["field"] for i in issues] == ["name", "age", "gold", "class"]
    assert issues[0]["message"] == "Please fill in “Name”."
    assert issues[1]["message"] == "“Age” must be at most 120."
    assert issues[2]["message"] == "“Gold” goes in steps of 5 from 0."
    assert payload["message"] == "\n".join(i["message"] for i in issues)
    _refused(api, session, [_answer(turn, "hero", "form", {"name": "Ada", "age": "old"})], "form_rejected")
    _refused(api, session, [_answer(turn, "hero", "form", {"name": "Ada", "age": 0})], "form_rejected")
    # and shapes a client never sends are not form_rejected
    _refused(api, session, [_answer(turn, "hero", "form", {"name": "Ada", "level": 3})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "hero", "form", {"name": "Ada", "age": True})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "hero", "form", {"name": 7})], "invalid_interaction_submission")
    _refused(api, session, [_answer(turn, "hero", "form", {"name": "Ada", "brave": "yes"})], "invalid_interaction_submission")
    # when the answer is valid (a numeric string, defaults for what is missing)
    frames = _submit(api, session, _answer(turn, "hero", "form", {"name": "Ada", "age": "30"}))
    # then the saved values are normalised and fill the template
    [result] = frames[0]["payload"]["results"]
    assert result["values"] == {"name": "Ada", "age": 30, "gold": 10, "class": "warrior", "brave": False}
    assert result["filledNarrative"] == "I am Ada, 30 years old, a warrior with 10 gold."
    assert completed(frames)["committed"] is True


def test_form_messages_follow_the_session_locale(api):
    session = _session("zh-CN")
    turn = _form(api, session)
    payload = _refused(api, session, [_answer(turn, "hero", "form", {"age": 0})], "form_rejected")
    assert [i["message"] for i in payload["details"]["issues"]] == ["请填写“Name”。", "“Age”不能小于 1。"]


def test_the_filled_narrative_is_held_to_the_message_limit(api):
    # given a form of two long text fields, each within the limit
    session = _session()
    fields = [{"type": "textarea", "name": "a", "label": "A"}, {"type": "textarea", "name": "b", "label": "B"}]
    turn = _asked(api, session, tools=[{"tool": "create-form", "args": {
        "formId": "essay", "title": "Essay", "fields": fields, "submitLabel": "Send", "narrativeTemplate": "{{a}} {{b}}"}}])
    # then one field over the limit is a field issue, and a filled message over it a whole-form issue
    one = _refused(api, session, [_answer(turn, "essay", "form", {"a": "x" * 100_001})], "form_rejected")
    assert one["details"]["issues"] == [{"field": "a", "message": "“A” can be at most 100000 characters."}]
    whole = _refused(api, session, [_answer(turn, "essay", "form", {"a": "x" * 60_000, "b": "y" * 50_000})], "form_rejected")
    assert whole["details"]["issues"] == [{"message": "The filled-in form is longer than 100000 characters; please shorten it."}]


@pytest.mark.parametrize(("locale", "prefix"), [("en-US", "[Player input]"), ("zh-CN", "[玩家输入]"), ("ru-RU", "[Ввод игрока]")])
def test_a_form_without_template_reads_as_the_localized_fallback(api, locale, prefix):
    session = _session(locale)
    turn = _form(api, session, template="")
    frames = _submit(api, session, _answer(turn, "hero", "form", {"name": "Ada", "age": 30, "brave": True}))
    assert frames[0]["payload"]["results"][0]["filledNarrative"] == (
        f"{prefix} name: Ada, age: 30, gold: 10, class: warrior, brave: true")
    assert ChatMessage.objects.get(session=session, role="user", turn_id=completed(frames)["turnId"]).content.startswith(prefix)


# --- batches -----------------------------------------------------------------------------------------


def test_identical_answers_in_one_batch_merge_and_different_ones_are_refused(api):
    session = _session()
    turn = _choice(api, session)
    # then two different answers to one interaction are refused with nothing written
    _refused(api, session, [_answer(turn, "path", "choice", {"selectedId": "left"}),
                            _answer(turn, "path", "choice", {"selectedId": "right"})], "invalid_interaction_submission")
    # when the same answer comes twice in one batch
    frames = _submit(api, session, _answer(turn, "path", "choice", {"selectedId": "left"}),
                     _answer(turn, "path", "choice", {"selectedId": "left", "selectedLabel": "anything"}))
    # then it is one answer, one line of the player's message, and the turn commits
    assert len(frames[0]["payload"]["results"]) == 1
    done = completed(frames)
    assert done["committed"] is True
    assert ChatMessage.objects.get(session=session, role="user", turn_id=done["turnId"]).content == "Take the left path"
    assert InteractionRecord.objects.filter(session=session, status="input", type="click").count() == 1


# --- the source plugin's validator --------------------------------------------------------------------


def test_the_source_plugins_validator_decides_and_its_own_error_text_stays_in_the_log(api, caplog):
    session = _session()
    turn = _form(api, session, validation={"name": "no-bob"})
    payload = _refused(api, session, [_answer(turn, "hero", "form", {"name": "Bob"})], "form_rejected")
    assert payload["details"]["issues"] == [{"field": "name", "message": "Bob is taken"}]
    failed = _refused(api, session, [_answer(turn, "hero", "form", {"name": "Boom"})], "form_validator_failed")
    assert "internal detail" not in str(failed) and failed["message"].startswith("The form could not be checked")
    assert "validator exploded: internal detail" in caplog.text
    assert completed(_submit(api, session, _answer(turn, "hero", "form", {"name": "Ada"})))["committed"] is True


def _json_refusal(api, session, answer, code):
    before = _written(session)
    response = post_action(api, action_body(session.id, actions=[answer]))
    assert response.status_code == 400, response.status_code
    body = response.json()
    assert body["code"] == code and isinstance(body["error"], str) and set(body) <= {"error", "code", "details"}
    assert _written(session) == before


def test_a_form_whose_validator_cannot_run_is_refused_before_the_stream(api):
    # given a committed form checked by asker's no-bob, and one naming a validator asker never declared
    session = _session()
    turn = _form(api, session, validation={"name": "no-bob"})
    ghost_turn = _asked(api, session, interactions=[{
        "type": "form", "interactionId": "ghost", "title": "Ghost", "fields": [{"type": "text", "name": "name", "label": "Name"}],
        "narrativeTemplate": "{{name}}", "validation": {"name": "ghost"}}])
    answer = _answer(turn, "hero", "form", {"name": "Ada"})
    _json_refusal(api, session, _answer(ghost_turn, "ghost", "form", {"name": "Ada"}), "form_validator_undeclared")
    # when asker is turned off in the session, its validator must not run
    Session.objects.filter(pk=session.pk).update(active_plugins=["teller"])
    _json_refusal(api, session, answer, "form_provider_inactive")
    # when it is enabled but no longer installed
    Session.objects.filter(pk=session.pk).update(active_plugins=["teller", "asker"])
    shutil.rmtree(Path(settings.COVEL_BUILTIN_PLUGINS_DIR) / "asker")
    registry_reset()
    _json_refusal(api, session, answer, "form_provider_unavailable")


# --- interaction records -----------------------------------------------------------------------------


def test_interaction_records_are_the_external_inputs(api):
    # given a said turn (asking a choice) and the answer to it
    session = _session()
    turn = _choice(api, session)
    done = completed(_submit(api, session, _answer(turn, "path", "choice", {"selectedId": "right"})))
    # then there is one record per input, with its own id: the message and the click
    items = api.get(f"/api/sessions/{session.id}/interaction-records").json()["items"]
    assert [(i["type"], i["turnId"], i["source"], i["channel"]) for i in items] == [
        ("click", done["turnId"], "player", "web"), ("message", turn, "player", "web")]
    assert len({i["id"] for i in items}) == 2 and "path" not in {i["id"] for i in items}
    assert items[0]["targetPluginId"] == "asker"
    assert items[0]["payload"]["values"] == {"selectedId": "right", "selectedLabel": "Take the right path"}
    assert items[1]["payload"] == {"kind": "say", "text": "I stop and think.", "seatId": "main"}
    clicks = api.get(f"/api/sessions/{session.id}/interaction-records?type=click").json()["items"]
    assert [i["id"] for i in clicks] == [items[0]["id"]]
