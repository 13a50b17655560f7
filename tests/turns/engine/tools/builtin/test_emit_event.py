"""emit-event: the four outcomes in order, with the exact texts."""

from tests.turns.engine.tools.support import REGISTRY, make_context, run
from turns.engine.tools import EventTopic, InMemoryStateView, ToolCall, ToolExecutor
from turns.engine.tools.builtin.emit_event import model_parameters_for

SCHEMA = {"type": "object", "required": ["skill"], "properties": {"skill": {"type": "string"}}, "additionalProperties": False}
STATE = InMemoryStateView(event_topics=[
    EventTopic("check.requested", "dice-check", SCHEMA),
    EventTopic("image.generate.requested", "dashscope-image-gen", None, advertise=False),
])


def test_success_emits_one_event_through_the_events_channel():
    out = run("emit-event", {"topic": "check.requested", "data": {"skill": "stealth"}}, STATE)
    assert out.status == "success"
    assert out.events == [{"topic": "check.requested", "data": {"skill": "stealth"}}]
    assert out.proposals == []
    assert out.envelope["summary"] == 'event "check.requested" emitted and recorded for this turn. Do not emit it again.'
    assert out.envelope["staged"]["kinds"] == ["event"]


def test_second_emit_in_the_same_loop_is_a_recorded_no_op():
    ctx = make_context(STATE)
    call = ToolCall("1", "emit-event", '{"topic": "check.requested", "data": {"skill": "x"}}')
    first, second = ToolExecutor(REGISTRY).execute_batch([call, ToolCall("2", call.name, call.arguments)], ctx)
    assert first.events and second.events == []
    assert second.status == "success"
    assert second.envelope == {
        "summary": 'event "check.requested" was already emitted this turn and is recorded. '
        "Do not emit it again; continue with the task."
    }


def test_already_emitted_wins_over_unknown_topic():
    ctx = make_context(InMemoryStateView(), emitted_event_topics={"gone.topic"})
    out = ToolExecutor(REGISTRY).execute_one(ToolCall("1", "emit-event", '{"topic":"gone.topic"}'), ctx)
    assert out.status == "success"


def test_unknown_or_internal_topic_is_refused_without_counting_as_failure():
    out = run("emit-event", {"topic": "image.generate.requested"}, STATE)
    assert out.envelope == {"error": {"code": "refused", "message": (
        'unknown topic "image.generate.requested"; no active plugin consumes it, so it cannot be emitted. '
        "Do not retry it. Available topics: check.requested")}}
    assert out.counts_as_failure is False
    none = run("emit-event", {"topic": "x"}, InMemoryStateView())
    assert none.envelope["error"]["message"].endswith("Available topics: (none — no consumer plugin active)")


def test_payload_failing_the_schema_is_invalid_input():
    out = run("emit-event", {"topic": "check.requested", "data": {"skill": 3}}, STATE)
    assert out.envelope["error"]["code"] == "invalid-input"
    assert out.envelope["error"]["message"] == "event payload rejected: data/skill 3 is not of type 'string'"
    assert out.counts_as_failure is True


def test_model_parameters_show_the_public_topic_enum_and_payload_schema():
    params = model_parameters_for(STATE.event_topics())
    assert params["properties"]["topic"]["enum"] == ["check.requested"]
    assert params["properties"]["data"]["properties"] == SCHEMA["properties"]
    two = model_parameters_for([EventTopic("a.b", "p", SCHEMA), EventTopic("c.d", "p", {"$ref": "#/x"})])
    assert [b["title"] for b in two["properties"]["data"]["anyOf"]] == ["a.b", "c.d"]
    assert two["properties"]["data"]["anyOf"][1] == {"type": "object", "title": "c.d"}
