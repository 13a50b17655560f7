"""create-form, create-choices, create-notification, render-ui, runtime-done, suspend."""

import json

from tests.turns.engine.tools.support import REGISTRY, make_context, run
from turns.engine.tools import InMemoryStateView, ToolCall, ToolExecutor

FIELDS = [
    {"type": "text", "name": "characterName", "label": "Name", "required": True},
    {"type": "number", "name": "age", "label": "Age", "min": 0, "max": 120, "step": 1, "defaultValue": 0},
    {"type": "select", "name": "root", "label": "Root", "options": ["water", {"value": "fire", "label": "Fire"}], "defaultValue": "fire"},
    {"type": "checkbox", "name": "brave", "label": "Brave", "defaultValue": False},
]
FORM = {"formId": "player-init", "title": "Who are you?", "fields": FIELDS, "submitLabel": "Go",
        "narrativeTemplate": "I am {{characterName}}."}


def test_create_form_returns_the_interaction_and_a_summary():
    out = run("create-form", FORM)
    assert out.status == "success"
    interaction = out.content["interaction"]
    assert interaction["type"] == "form" and interaction["interactionId"] == "player-init"
    assert interaction["actionKind"] == "act"
    assert out.envelope == {"summary": 'Form "Who are you?" (player-init) was sent to the player; the answer arrives in the next turn.'}
    zh = run("create-form", FORM, locale="zh-CN")
    assert zh.envelope["summary"].startswith("表单「Who are you?」")


def test_create_form_rejects_bad_defaults_and_options():
    bad = dict(FORM, fields=[
        {"type": "number", "name": "age", "label": "Age", "defaultValue": "3"},
        {"type": "checkbox", "name": "ok", "label": "OK", "defaultValue": "yes"},
        {"type": "select", "name": "s", "label": "S", "options": ["a"], "defaultValue": "b"},
        {"type": "text", "name": "age", "label": "Again"},
    ])
    out = run("create-form", bad)
    message = out.envelope["error"]["message"]
    assert out.envelope["error"]["code"] == "invalid-input"
    for part in ("fields[0].defaultValue", "fields[1].defaultValue", "fields[2].defaultValue", 'fields[3].name: "age"'):
        assert part in message


def test_create_form_validation_must_be_a_registered_validator():
    state = InMemoryStateView(form_validators={"demo": {"player-name"}})
    ok = run("create-form", dict(FORM, validation={"name": "player-name", "data": {"h": "x"}}, notice="Again please."), state)
    assert ok.content["interaction"]["validation"] == {"name": "player-name", "data": {"h": "x"}}
    assert ok.content["interaction"]["notice"] == "Again please."
    bad = run("create-form", dict(FORM, validation={"name": "unknown"}), state)
    assert bad.envelope["error"]["code"] == "invalid-input"
    assert "validation.name" in bad.envelope["error"]["message"]


def test_create_form_action_kind_is_base_or_plugin_kind():
    assert run("create-form", dict(FORM, actionKind="whisper-pack/whisper")).status == "success"
    assert run("create-form", dict(FORM, actionKind="dance")).envelope["error"]["code"] == "invalid-input"


def test_create_choices_needs_two_unique_choices():
    ok = run("create-choices", {"choiceId": "c1", "prompt": "What now?", "choices": [{"id": "a", "label": "Run"}, {"id": "b", "label": "Hide"}]})
    assert ok.content["interaction"]["actionKind"] == "say"
    assert ok.envelope == {"summary": "Offered 2 choices to the player (c1)."}
    one = run("create-choices", {"choiceId": "c1", "prompt": "?", "choices": [{"id": "a", "label": "Run"}]})
    assert one.envelope["error"]["code"] == "invalid-input"
    dup = run("create-choices", {"choiceId": "c1", "prompt": "?", "choices": [{"id": "a", "label": "Run"}, {"id": "a", "label": "Hide"}]})
    assert "choices[1].id" in dup.envelope["error"]["message"]


def test_create_notification_stages_an_alert_ui_block():
    out = run("create-notification", {"level": "success", "title": "Item found", "message": "A brass key."})
    assert [p.kind for p in out.proposals] == ["ui.render"]
    part = out.proposals[0].payload["parts"][0]
    assert part["type"] == "alert" and part["content"] == {"level": "success", "title": "Item found", "message": "A brass key."}
    assert out.envelope["summary"] == 'Notification "Item found" shown.'
    assert out.envelope["staged"]["kinds"] == ["ui.render"]
    assert run("create-notification", {"level": "loud", "title": "t", "message": "m"}).envelope["error"]["code"] == "invalid-input"


def test_render_ui_requires_parts_and_stages_one_block():
    parts = [{"id": "p1", "type": "text", "status": "success", "content": "Hello"}]
    out = run("render-ui", {"parts": parts, "layout": "split"})
    assert out.proposals[0].payload == {"parts": parts, "layout": "split"}
    assert run("render-ui", {"layout": "split"}).envelope["error"]["code"] == "invalid-input"
    assert run("render-ui", {"parts": [dict(parts[0], status="done")]}).envelope["error"]["code"] == "invalid-input"


def test_runtime_done_is_the_only_end_signal():
    out = run("runtime-done", {"reason": "nothing to do"})
    assert out.control == "done"
    assert out.envelope == {"summary": "Done."}
    assert run("runtime-done", {}, locale="zh-CN").envelope == {"summary": "完成。"}


def test_suspend_compiles_the_resume_schema_and_skips_later_calls():
    fields = [
        {"type": "text", "name": "name", "label": "Name", "required": True},
        {"type": "number", "name": "age", "label": "Age", "min": 1, "max": 99, "step": 1, "defaultValue": 21},
        {"type": "select", "name": "side", "label": "Side", "options": [{"value": "l", "label": "Left"}, "r"]},
        {"type": "checkbox", "name": "sure", "label": "Sure", "defaultValue": False},
    ]
    ctx = make_context()
    outs = ToolExecutor(REGISTRY).execute_batch(
        [ToolCall("1", "suspend", json.dumps({"reason": "Tell me", "fields": fields})), ToolCall("2", "runtime-done", "{}")], ctx
    )
    assert outs[0].control == "suspend"
    assert outs[0].content["resumeSchema"] == {
        "type": "object",
        "properties": {
            "name": {"title": "Name", "type": "string", "minLength": 1},
            "age": {"title": "Age", "type": "number", "minimum": 1, "maximum": 99, "default": 21},
            "side": {"title": "Side", "type": "string", "enum": ["l", "r"]},
            "sure": {"title": "Sure", "type": "boolean", "default": False},
        },
        "additionalProperties": False,
        "required": ["name"],
    }
    assert outs[0].envelope == {"summary": "Suspended: waiting for the player's answer."}
    assert outs[1].status == "skipped" and outs[1].envelope["error"]["code"] == "cancelled"


def test_suspend_rejects_empty_fields_and_select_without_options():
    assert run("suspend", {"reason": "r", "fields": []}).envelope["error"]["code"] == "invalid-input"
    out = run("suspend", {"reason": "r", "fields": [{"type": "select", "name": "s", "label": "S", "options": []}]})
    assert "at least one option" in out.envelope["error"]["message"]
    schema_free = run("suspend", {"reason": "r", "fields": [{"type": "text", "name": "a", "label": "A"}]})
    assert "required" not in schema_free.content["resumeSchema"]
