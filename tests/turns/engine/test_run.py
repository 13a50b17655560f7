import pytest

from sessions.models import ChatMessage, Session, TurnMessage
from tests.turns.engine.support import STORY_PLUGIN, execution_create, plugin_write, registry_from, session_create
from turns.engine.run import execution_run
from turns.engine.trace import RecordingSink
from tests.turns.prompt_support import runtime_prompt
from turns.models import RuntimeOutput, SessionEvent, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def story_registry(tmp_path):
    plugin_write(tmp_path, "teller", STORY_PLUGIN)
    return registry_from(tmp_path)


def test_say_turn_streams_prose_and_commits_player_and_story_messages(story_registry, django_capture_on_commit_callbacks):
    # given a playing session with one story plugin
    session = session_create(plugins=["teller"])
    execution = execution_create(session, "submit_actions", {"actions": [{"kind": "say", "text": "Hello there"}]})
    sink = RecordingSink()

    # when the execution runs with the scripted provider
    with django_capture_on_commit_callbacks(execute=True):
        outcome = execution_run(str(execution.pk), sink, plugin_registry=story_registry)

    # then one committed player turn, streamed deltas, one execution.completed at the end
    assert outcome.committed is True
    types = sink.types()
    assert types[0] == "execution.started"
    assert types[-1] == "execution.completed"
    assert types.count("execution.completed") == 1
    deltas = "".join(p["text"] for p in sink.of_type("narrative.delta"))
    story = ChatMessage.objects.get(session=session, role="assistant")
    assert deltas == story.content and "Hello there" in story.content
    player = ChatMessage.objects.get(session=session, role="user")
    assert player.content == "Hello there" and player.metadata["actions"] == [{"kind": "say", "text": "Hello there"}]
    assert [m.role for m in TurnMessage.objects.filter(session=session).order_by("id")] == ["user", "assistant"]
    result = TurnResult.objects.get(session=session)
    assert (result.committed, result.origin, result.player_turn_index, result.turn_id) == (True, "player", 1, outcome.turn_id)
    assert Session.objects.get(pk=session.pk).completed_player_turns == 1
    output = RuntimeOutput.objects.get(session=session)
    prompt = runtime_prompt(session.id, "teller")
    assert output.runtime_id == "teller" and prompt[0]["role"] == "system"
    assert "You narrate" in prompt[0]["content"]
    traced = set(TraceEvent.objects.filter(session=session).values_list("type", flat=True))
    assert {"runtime.started", "llm.calling", "llm.responded", "step.started", "step.completed", "runtime.completed"} <= traced
    assert "narrative.delta" not in traced
    assert SessionEvent.objects.filter(session=session, type="execution.completed").count() == 1
    assert sink.of_type("execution.completed")[-1] == {"committed": True, "turnId": outcome.turn_id, "origin": "player"}
