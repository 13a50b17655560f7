"""Steer inside the engine (spec 004 §回合中控制 steer; turns.engine.steer): a TurnControl passed as
``execution_run(cancel=...)`` carries player messages into the story runtime's next model call;
the committed turn saves them, messages no model call took are discarded with a trace row."""

import pytest

from sessions.models import ChatMessage, TurnMessage
from tests.turns.engine.support import NOTES_HANDLER, NOTES_PLUGIN, STORY_PLUGIN, execution_create, plugin_write, registry_from, session_create
from turns.engine.run import execution_run
from turns.engine.steer import TurnControl
from turns.engine.trace import RecordingSink
from tests.turns.prompt_support import model_calls_of, runtime_prompt
from turns.models import RuntimeOutput, TraceEvent

pytestmark = pytest.mark.django_db(transaction=False)

SAY = {"actions": [{"kind": "say", "text": "Hello there"}]}


class SteerOnFirstDelta(RecordingSink):
    """The player's client: sends a steer message while the first prose delta streams."""

    def __init__(self, control: TurnControl, message: str) -> None:
        super().__init__()
        self.control = control
        self.message = message
        self.accepted: bool | None = None

    def emit(self, type, payload, *, turn_id=None, ephemeral=False):
        super().emit(type, payload, turn_id=turn_id, ephemeral=ephemeral)
        if type == "narrative.delta" and self.accepted is None:
            self.accepted = self.control.steer_offer(self.message)


def _registry(tmp_path, manifest=STORY_PLUGIN, files=None, plugin_id="teller"):
    plugin_write(tmp_path, plugin_id, manifest, files)
    return registry_from(tmp_path)


def test_a_steer_during_the_final_prose_costs_one_more_story_call_that_includes_it(tmp_path):
    # given a story turn and a player who interjects while the prose streams
    registry = _registry(tmp_path)
    session = session_create(plugins=["teller"])
    execution = execution_create(session, "submit_actions", SAY)
    control = TurnControl()
    sink = SteerOnFirstDelta(control, "The door creaks.")
    # when
    outcome = execution_run(str(execution.pk), sink, cancel=control, plugin_registry=registry)
    # then step 2 of the story runtime carries the message and its prose is the turn's story
    assert outcome.committed is True and sink.accepted is True
    calls = model_calls_of(session.id)
    assert [c["step"] for c in calls] == [1, 2]
    assert calls[1]["messages"][-1] == {"role": "user", "content": "[steer] The door creaks."}
    assert calls[1]["messages"][-2]["role"] == "assistant"
    assert {"role": "user", "content": "[steer] The door creaks."} not in calls[0]["messages"]
    story = ChatMessage.objects.get(session=session, kind="story")
    assert sink.of_type("narrative.completed")[0]["text"] == story.content
    assert RuntimeOutput.objects.filter(session=session).count() == 1
    assert runtime_prompt(session.id, RuntimeOutput.objects.get(session=session).runtime_id) == calls[1]["messages"]
    applied = TraceEvent.objects.get(session=session, type="steer.applied")
    assert (applied.runtime_id, applied.payload["step"], applied.payload["message"]) == ("teller", 2, "The door creaks.")
    assert [(m.role, m.kind) for m in ChatMessage.objects.filter(session=session).order_by("created_at", "id")] == [
        ("user", "text"), ("user", "steer"), ("assistant", "story")]
    assert [(m.role, m.content) for m in TurnMessage.objects.filter(session=session).order_by("id")] == [
        ("user", {"text": "Hello there"}), ("user", {"text": "[steer] The door creaks.", "steer": True}),
        ("assistant", {"text": story.content})]
    # and once the story finished no later message is accepted
    assert control.steer_offer("Too late") is False


def test_a_message_waiting_before_the_story_runs_joins_its_first_call_in_the_session_language(tmp_path):
    # given a zh session and a message that arrived before the story runtime started
    registry = _registry(tmp_path)
    session = session_create(plugins=["teller"], locale="zh-CN")
    execution = execution_create(session, "submit_actions", SAY)
    control = TurnControl()
    assert control.steer_offer("门开了。") is True
    sink = RecordingSink()
    # when
    outcome = execution_run(str(execution.pk), sink, cancel=control, plugin_registry=registry)
    # then the first model call has it right after the player's message, and no extra step ran
    assert outcome.committed is True
    calls = model_calls_of(session.id)
    assert len(calls) == 1
    assert calls[0]["messages"][-2:] == [{"role": "user", "content": "Hello there"}, {"role": "user", "content": "[插话] 门开了。"}]
    assert ChatMessage.objects.get(session=session, kind="steer").content == "门开了。"


def test_a_steer_with_no_step_left_or_no_story_runtime_is_discarded_and_never_saved(tmp_path):
    # given a story runtime allowed a single model call, interrupted while it streams
    one_step = STORY_PLUGIN.replace("maxSteps: 4", "maxSteps: 1")
    registry = _registry(tmp_path, one_step)
    session = session_create(plugins=["teller"])
    execution = execution_create(session, "submit_actions", SAY)
    control = TurnControl()
    sink = SteerOnFirstDelta(control, "Stop!")
    # when
    outcome = execution_run(str(execution.pk), sink, cancel=control, plugin_registry=registry)
    # then the prose of the only step is committed and the message is discarded, not saved
    assert outcome.committed is True and sink.accepted is True
    assert len(sink.of_type("llm.calling")) == 1
    discarded = TraceEvent.objects.get(session=session, type="steer.discarded")
    assert discarded.payload == {"runtimeId": "teller", "pluginId": "teller", "step": 1, "message": "Stop!", "reason": "max_steps"}
    assert not ChatMessage.objects.filter(session=session, kind="steer").exists()
    assert not TraceEvent.objects.filter(session=session, type="steer.applied").exists()


def test_a_turn_without_an_agent_story_runtime_takes_no_steer(tmp_path):
    # given a session whose only runtime is a function (no story model call)
    registry = _registry(tmp_path, NOTES_PLUGIN, {"handler.py": NOTES_HANDLER}, plugin_id="notes")
    session = session_create(plugins=["notes"])
    execution = execution_create(session, "submit_actions", SAY)
    control = TurnControl()
    control.steer_offer("Hello?")
    # when
    execution_run(str(execution.pk), RecordingSink(), cancel=control, plugin_registry=registry)
    # then the early message was discarded and nothing more is accepted
    discarded = TraceEvent.objects.get(session=session, type="steer.discarded")
    assert discarded.payload == {"message": "Hello?", "reason": "no_story_runtime"}
    assert control.steer_offer("Anyone?") is False
    assert not ChatMessage.objects.filter(session=session, kind="steer").exists()
