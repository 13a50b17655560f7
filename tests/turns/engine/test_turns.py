import pytest

from plugins_app.models import PluginData
from sessions.models import Character, ChatMessage, Session
from tests.turns.engine.support import (
    BOOM_HANDLER, BOOM_PLUGIN, GATE_HANDLER, GATE_PLUGIN, NOTES_HANDLER, NOTES_PLUGIN, STORY_PLUGIN,
    execution_create, plugin_write, registry_from, session_create,
)
from turns.engine.run import execution_run
from turns.engine.trace import RecordingSink
from turns.models import InteractionRecord, TurnResult

pytestmark = pytest.mark.django_db


@pytest.fixture
def registry(tmp_path):
    plugin_write(tmp_path, "teller", STORY_PLUGIN)
    plugin_write(tmp_path, "gate", GATE_PLUGIN, {"handler.py": GATE_HANDLER})
    plugin_write(tmp_path, "notes", NOTES_PLUGIN, {"handler.py": NOTES_HANDLER})
    plugin_write(tmp_path, "boom", BOOM_PLUGIN, {"handler.py": BOOM_HANDLER})
    return registry_from(tmp_path)


def run(session, registry, type, payload):
    sink = RecordingSink()
    execution = execution_create(session, type, payload)
    outcome = execution_run(str(execution.pk), sink, plugin_registry=registry)
    return outcome, sink


def test_setup_form_answer_completes_setup_and_runs_the_opening_continuation(registry):
    # given a new session in setup with a form-asking setup runtime
    session = session_create(plugins=["gate", "teller"], phase="setup")

    # when start_session runs
    outcome, sink = run(session, registry, "start_session", {})

    # then the form is requested, setup stays pending, nothing is counted
    assert outcome.committed is True and outcome.origin == "player"
    requested = sink.of_type("interaction.requested")
    assert [r["interaction"]["interactionId"] for r in requested] == ["hero"]
    session.refresh_from_db()
    assert session.phase == "setup"
    assert session.setup_runtimes["gate"] == {"state": "pending", "generation": 1, "attempts": 0, "pluginVersion": "1.0.0"}
    form_turn = outcome.turn_id

    # when the player answers the form
    answer = {"kind": "act", "interaction": {"turnId": form_turn, "interactionId": "hero", "type": "form"}, "fields": {"name": "Ada"}}
    outcome, sink = run(session, registry, "submit_actions", {"actions": [answer]})

    # then setup is done, the phase is playing and the continuation wrote the opening on the same stream
    session.refresh_from_db()
    assert session.phase == "playing" and session.completed_player_turns == 0
    assert session.setup_runtimes["gate"]["state"] == "done" and session.setup_runtimes["gate"]["resolution"] == "completed"
    assert Character.objects.get(session=session, character_id="hero").name == "Ada"
    assert InteractionRecord.objects.get(session=session, interaction_id="hero").status == "answered"
    types = sink.types()
    assert types[0] == "interaction.submitted" and types.count("execution.started") == 2 and types.count("execution.completed") == 1
    assert sink.of_type("interaction.submitted")[0]["results"][0]["filledNarrative"] == "I am Ada."
    assert outcome.origin == "continuation" and len(outcome.turn_ids) == 2
    assert sink.of_type("execution.completed")[0]["turnId"] == outcome.turn_ids[1]
    origins = dict(TurnResult.objects.filter(session=session).values_list("turn_id", "origin"))
    assert origins[outcome.turn_ids[1]] == "continuation"
    assert ChatMessage.objects.get(session=session, role="user").content == "I am Ada."
    opening = ChatMessage.objects.get(session=session, role="assistant", turn_id=outcome.turn_ids[1])
    assert "Ada" in opening.content

    # when the player plays a turn, then the counter advances once
    outcome, _ = run(session, registry, "submit_actions", {"actions": [{"kind": "say", "text": "Look around"}]})
    session.refresh_from_db()
    assert outcome.committed and session.completed_player_turns == 1


def test_runtime_that_raises_commits_nothing_of_its_own(registry):
    # given a playing session with a story, a counting and an exploding post-turn runtime
    session = session_create(plugins=["teller", "notes", "boom"])

    # when a turn runs
    outcome, sink = run(session, registry, "submit_actions", {"actions": [{"kind": "say", "text": "Hi"}]})

    # then the turn commits, the counter is written, the raising runtime's write is not
    assert outcome.committed is True
    assert outcome.failed_runtime_ids == ["boom"]
    assert PluginData.objects.get(session=session, plugin_id="notes", namespace="stats", key="turns").value == 1
    assert not PluginData.objects.filter(session=session, plugin_id="boom").exists()
    failed = sink.of_type("runtime.failed")
    assert [f["runtimeId"] for f in failed] == ["boom"] and "kaboom" in failed[0]["error"]["message"]
    assert sink.of_type("execution.completed")[0]["failedRuntimeIds"] == ["boom"]
    assert [c["pluginId"] for c in sink.of_type("plugin-data.changed")] == ["notes"]


def test_input_message_id_already_committed_is_rejected_without_writes(registry):
    # given a committed turn with an inputMessageId
    session = session_create(plugins=["teller"])
    payload = {"actions": [{"kind": "say", "text": "Once"}], "inputMessageId": "msg-1"}
    run(session, registry, "submit_actions", payload)

    # when the same input is sent again
    outcome, sink = run(session, registry, "submit_actions", payload)

    # then a single error.occurred, nothing written
    assert outcome.rejected is True
    assert sink.types() == ["error.occurred"]
    assert sink.frames[0][1]["code"] == "input_already_committed"
    assert ChatMessage.objects.filter(session=session, role="user").count() == 1
    assert Session.objects.get(pk=session.pk).completed_player_turns == 1


def test_a_turn_whose_input_records_cannot_be_written_still_commits_and_logs_it(registry, monkeypatch, caplog):
    # given a database that refuses the interaction-record insert (best effort, spec 004 §统一翻译层)
    from django.db import DatabaseError

    session = session_create(plugins=["teller"])
    original = InteractionRecord.objects.bulk_create

    def refuse(rows, *args, **kwargs):
        if any(r.status == InteractionRecord.STATUS_INPUT for r in rows):
            raise DatabaseError("disk full")
        return original(rows, *args, **kwargs)

    monkeypatch.setattr(InteractionRecord.objects, "bulk_create", refuse)
    # when the player says something
    with caplog.at_level("WARNING", logger="covel.turns"):
        outcome, sink = run(session, registry, "submit_actions", {"actions": [{"kind": "say", "text": "Once"}]})
    # then the turn committed whole, without the records, and the failure is a warning
    assert outcome.committed is True
    assert ChatMessage.objects.filter(session=session, role="user").count() == 1
    assert ChatMessage.objects.filter(session=session, kind="story").count() == 1
    assert not InteractionRecord.objects.filter(session=session, status=InteractionRecord.STATUS_INPUT).exists()
    assert "interaction records not written" in caplog.text
    # and the next turn records its input again
    monkeypatch.setattr(InteractionRecord.objects, "bulk_create", original)
    assert run(session, registry, "submit_actions", {"actions": [{"kind": "say", "text": "Twice"}]})[0].committed is True
    assert InteractionRecord.objects.filter(session=session, status=InteractionRecord.STATUS_INPUT, type="message").count() == 1


def test_failing_setup_runtime_is_blocked_after_max_trigger_count(tmp_path):
    # given a setup runtime that always raises and may be tried twice
    plugin_write(tmp_path, "flaky", """
        ---
        id: flaky
        kind: plugin
        version: 2.0.0
        description: Always fails.
        runtime:
          type: function
          schedule:
            stage: setup
            trigger:
              type: auto
              maxTriggerCount: 2
          function:
            handler: ./handler.py
        ---
        Flaky.
        """, {"handler.py": "def handle(ctx):\n    raise ValueError('broken setup')\n"})
    registry = registry_from(tmp_path)
    session = session_create(plugins=["flaky"], phase="setup")

    # when start_session runs twice
    run(session, registry, "start_session", {})
    session.refresh_from_db()
    assert session.setup_runtimes["flaky"]["state"] == "pending" and session.setup_runtimes["flaky"]["attempts"] == 1
    run(session, registry, "start_session", {})

    # then the runtime is blocked with its last error, and a third start_session does not run it
    session.refresh_from_db()
    state = session.setup_runtimes["flaky"]
    assert (state["state"], state["attempts"], state["reason"]) == ("blocked", 2, "max-trigger-count")
    assert "broken setup" in state["lastError"]
    _, sink = run(session, registry, "start_session", {})
    assert "runtime.started" not in sink.types()
    assert session.phase == "setup"


def test_retry_turn_is_a_new_player_turn_that_counts_once_committed(registry):
    # given a playing session with one committed player turn
    session = session_create(plugins=["teller"])
    run(session, registry, "submit_actions", {"actions": [{"kind": "say", "text": "Hello"}]})
    session.refresh_from_db()
    assert session.completed_player_turns == 1

    # when the player retries with an empty retry_turn (a new main-loop turn on the committed context)
    outcome, sink = run(session, registry, "retry_turn", {})

    # then it commits as a player turn and the player-turn count advances once
    assert outcome.committed is True and outcome.origin == "player"
    session.refresh_from_db()
    assert session.completed_player_turns == 2
    assert TurnResult.objects.filter(session=session, committed=True).count() == 2
    assert sink.types().count("execution.completed") == 1
