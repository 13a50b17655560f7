"""The retry family over HTTP (spec 004 §Actions（SSE 桥接） retry_turn / retry_runtime /
retry_failed_runtimes, §重试的事件与状态, §批量恢复的边界, §流里的拒绝; issue 17): each retry type
against a runtime that really failed, with its source turn's inputs, the scope fields on its events,
and every rejection code with nothing written. Test plugins: tests/turns/lifecycle_support.py."""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import ChatMessage, Session
from tests.turns.lifecycle_support import (
    act, ask, builtin_dir_with_lifecycle_plugins, completed, fail, heal, rejected, reset_files, say,
)
from tests.turns.test_actions_helpers import session_make
from turns.models import InteractionRecord, RuntimeOutput, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_lifecycle_plugins(tmp_path / "builtin"))
    reset_files()
    registry_reset()
    yield
    reset_files()
    registry_reset()


def _session(**kwargs):
    return session_make(plugins=("teller", "flaky", "solo", "asker"), **kwargs)


def _data(session, plugin_id, namespace, key):
    row = PluginData.objects.filter(session=session, plugin_id=plugin_id, namespace=namespace, key=key).first()
    return row.value if row is not None else None


def _written(session) -> dict:
    """Row counts of everything a turn writes."""
    return {"turns": TurnResult.objects.filter(session=session).count(),
            "chat": ChatMessage.objects.filter(session=session).count(),
            "outputs": RuntimeOutput.objects.filter(session=session).count(),
            "data": PluginData.objects.filter(session=session).count(),
            "answered": InteractionRecord.objects.filter(session=session).exclude(status="pending").count(),
            "turnsPlayed": Session.objects.get(pk=session.pk).completed_player_turns}


def _played_with_failure(api, runtime_id="flaky/echo", mode="raise", text="I light the lamp."):
    """A session whose first turn committed with ``runtime_id`` failed; returns (session, turn id)."""
    session = _session()
    fail(runtime_id, mode)
    done = completed(say(api, session.id, text))
    heal()
    assert done["committed"] is True and done["failedRuntimeIds"] == [runtime_id], done
    return session, done["turnId"]


# --- runtime outcomes ------------------------------------------------------------------------------


def test_a_runtime_reporting_its_own_failure_is_failed_everywhere(api):
    # given solo returns {"status": "failed", ...} (it reports its own failure, it does not raise)
    session = _session()
    fail("solo", "report")
    # when a turn runs
    frames = say(api, session.id)
    # then the stream, the trace, the turn result and failedRuntimeIds all say failed
    done = completed(frames)
    assert done["committed"] is True and done["failedRuntimeIds"] == ["solo"]
    [runtime_failed] = [f["payload"] for f in frames if f["type"] == "runtime.failed"]
    assert runtime_failed["runtimeId"] == "solo"
    assert runtime_failed["error"] == {"code": "runtime_reported_failure", "message": "solo reported a failure"}
    [solo_completed] = [f["payload"] for f in frames if f["type"] == "runtime.completed" and f["payload"]["runtimeId"] == "solo"]
    assert solo_completed["status"] == "failed"
    turn = TurnResult.objects.get(session=session, turn_id=done["turnId"])
    [summary] = [r for r in turn.summary["runtimeResults"] if r["runtimeId"] == "solo"]
    assert summary["status"] == "failed" and summary["error"]["code"] == "runtime_reported_failure"
    assert TraceEvent.objects.filter(session=session, type="runtime.failed", runtime_id="solo").count() == 1
    assert RuntimeOutput.objects.get(session=session, runtime_id="solo").status == "failed"
    assert _data(session, "solo", "solo", "runs") is None  # its writes were not committed


# --- retry_failed_runtimes -------------------------------------------------------------------------


def test_retry_failed_runtimes_reruns_the_failed_runtime_with_the_source_turns_inputs(api):
    # given turn 1 committed while flaky/echo failed (it needs the story as its input)
    session, source = _played_with_failure(api)
    assert _data(session, "flaky", "echo", "1") is None
    before = _written(session)
    # when the player retries it
    frames = act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/echo"], "retryFromTurnId": source})
    # then it ran with turn 1's story and committed, without a new player turn or story
    done = completed(frames)
    assert done["committed"] is True and done["origin"] == "manual"
    assert done["sourceTurnId"] == source and done["runtimeIds"] == ["flaky/echo"]
    assert done["sourceCommitted"] is True and done["sourceFailedRuntimeIds"] == []
    assert _data(session, "flaky", "echo", "1") == "The tale goes on: I light the lamp."
    started = [f["payload"] for f in frames if f["type"] in ("execution.started", "runtime.started", "runtime.completed")]
    assert started and all(p["sourceTurnId"] == source and p["runtimeIds"] == ["flaky/echo"] for p in started)
    assert all(p["sourceFailedRuntimeIds"] == ["flaky/echo"] for p in started)  # in flight: the set before it
    assert [p["runtimeId"] for p in started if "runtimeId" in p and "status" not in p] == ["flaky/echo"]
    after = _written(session)
    assert after["turnsPlayed"] == before["turnsPlayed"] and after["chat"] == before["chat"]
    assert after["turns"] == before["turns"] + 1
    retry = TurnResult.objects.get(session=session, turn_id=done["turnId"])
    assert retry.origin == "manual" and retry.committed is True
    assert retry.summary["retry"] == {"runtimeIds": ["flaky/echo"], "sourceTurnId": source}
    # and the trace rows of the attempt carry the same scope; the source's record is unchanged
    rows = TraceEvent.objects.filter(session=session, turn_id=done["turnId"], type="runtime.completed")
    assert [r.payload["sourceTurnId"] for r in rows] == [source]
    source_row = TurnResult.objects.get(session=session, turn_id=source)
    assert [r["status"] for r in source_row.summary["runtimeResults"] if r["runtimeId"] == "flaky/echo"] == ["failed"]
    # when it is retried once more, it is no longer failed
    again = rejected(act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/echo"], "retryFromTurnId": source}))
    assert again["code"] == "retry_target_not_failed"


def test_retry_failed_runtimes_keeps_what_still_fails_and_drops_what_recovered(api):
    # given turn 1 committed with two failed runtimes
    session = _session()
    fail("flaky/echo")
    fail("flaky/tally")
    done = completed(say(api, session.id))
    source = done["turnId"]
    assert sorted(done["failedRuntimeIds"]) == ["flaky/echo", "flaky/tally"]
    # when both are retried while echo still fails
    heal()
    fail("flaky/echo", "report")
    frames = act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/tally", "flaky/echo"], "retryFromTurnId": source})
    # then tally recovered and echo stays in the failed set (sorted targets, one execution)
    done = completed(frames)
    assert done["committed"] is True and done["runtimeIds"] == ["flaky/echo", "flaky/tally"]
    assert done["failedRuntimeIds"] == ["flaky/echo"] and done["sourceFailedRuntimeIds"] == ["flaky/echo"]
    assert _data(session, "flaky", "tally", "runs") == 1
    # and a retry of the recovered one is refused, of the remaining one accepted
    heal()
    refused = rejected(act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/tally"], "retryFromTurnId": source}))
    assert refused["code"] == "retry_target_not_failed"
    last = completed(act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/echo"], "retryFromTurnId": source}))
    assert last["committed"] is True and last["sourceFailedRuntimeIds"] == []


# --- retry_runtime ---------------------------------------------------------------------------------


def test_retry_runtime_with_a_source_turn_accepts_a_runtime_id_without_a_slash(api):
    # given solo (runtime id "solo") reported a failure in turn 1
    session, source = _played_with_failure(api, "solo", "report")
    # when it is retried from that turn
    done = completed(act(api, session.id, "retry_runtime", {"runtimeId": "solo", "retryFromTurnId": source}))
    # then it ran once and committed, the player turn count unchanged
    assert done["committed"] is True and done["runtimeIds"] == ["solo"] and done["sourceFailedRuntimeIds"] == []
    assert _data(session, "solo", "solo", "runs") == 1
    assert Session.objects.get(pk=session.pk).completed_player_turns == 1


def test_retry_runtime_without_a_source_reads_the_latest_player_turn(api):
    # given two committed turns (echo worked)
    session = _session()
    completed(say(api, session.id, "First."))
    completed(say(api, session.id, "Second."))
    PluginData.objects.filter(session=session, plugin_id="flaky", namespace="echo").delete()
    # when flaky/echo is run again by hand
    done = completed(act(api, session.id, "retry_runtime", {"runtimeId": "flaky/echo"}))
    # then it read the latest turn's story (its required input), not nothing
    assert done["committed"] is True and "sourceTurnId" not in done and done["runtimeIds"] == ["flaky/echo"]
    rows = list(PluginData.objects.filter(session=session, plugin_id="flaky", namespace="echo").values_list("key", "value"))
    assert rows == [("3", "The tale goes on: Second.")]  # logical turn: completedPlayerTurns + 1


def test_retry_runtime_of_a_builtin_runtime_reads_the_previous_narrative(api, settings):
    # given the real narrator and codex (played by the offline scripted model) and one committed turn
    import shutil
    from pathlib import Path

    from plugins_app.discovery import BUILTIN_DIR

    for plugin_id in ("narrator", "codex"):
        shutil.copytree(BUILTIN_DIR / plugin_id, Path(settings.COVEL_BUILTIN_PLUGINS_DIR) / plugin_id)
    registry_reset()
    session = session_make(plugins=("narrator", "codex"), characters=[("hero", "Hero", "player")])
    assert completed(say(api, session.id, "I open the old chest."))["committed"] is True
    # when codex (a runtime id without a slash) is run again by hand
    frames = act(api, session.id, "retry_runtime", {"runtimeId": "codex"})
    # then it ran with the narrative it needs as input instead of being skipped
    done = completed(frames)
    assert done["committed"] is True and done["runtimeIds"] == ["codex"]
    assert [f["payload"]["status"] for f in frames if f["type"] == "runtime.completed"] == ["success"]
    assert "runtime.skipped" not in [f["type"] for f in frames]


# --- retry_turn ------------------------------------------------------------------------------------


def test_retry_turn_after_a_failed_answered_turn_keeps_the_players_answer(api):
    # given a committed turn that offered a choice
    session = _session()
    ask(tools=[{"tool": "create-choices", "args": {"choiceId": "path", "prompt": "Which way?", "choices": [
        {"id": "left", "label": "Take the left path"}, {"id": "right", "label": "Take the right path"}]}}])
    asked = completed(say(api, session.id, "I reach the fork."))
    answer = {"kind": "say", "interaction": {"turnId": asked["turnId"], "interactionId": "path", "type": "choice"},
              "fields": {"selectedId": "left"}}
    # and the turn that reads the answer fails in its story
    fail("teller")
    failed = act(api, session.id, payload={"actions": [answer]})
    assert failed[0]["type"] == "interaction.submitted"
    failed_turn = completed(failed)
    assert failed_turn["committed"] is False
    heal()
    # then the answer is saved and the execution offers retry_turn from that turn
    status = api.get(f"/api/sessions/{session.id}/execution").json()
    assert status["state"] == "failed" and status["retry"] == {"type": "retry_turn", "payload": {"recoverFromTurnId": failed_turn["turnId"]}}
    assert InteractionRecord.objects.get(session=session, interaction_id="path").status == "answered"
    again = rejected(act(api, session.id, payload={"actions": [answer]}))
    assert again["code"] == "interaction_already_submitted"
    # when the player retries
    frames = act(api, session.id, "retry_turn", {"recoverFromTurnId": failed_turn["turnId"]})
    # then the turn ran again from the recorded answer, once, without submitting it again
    done = completed(frames)
    assert done["committed"] is True and done["origin"] == "player"
    assert "interaction.submitted" not in [f["type"] for f in frames]
    assert _data(session, "teller", "seen", "2") == "Take the left path"  # the player's action, not an opening
    [message] = ChatMessage.objects.filter(session=session, role="user", turn_id=done["turnId"])
    assert message.content == "Take the left path"
    assert Session.objects.get(pk=session.pk).completed_player_turns == 2
    # and recovering the same turn again is refused
    refused = rejected(act(api, session.id, "retry_turn", {"recoverFromTurnId": failed_turn["turnId"]}))
    assert refused["code"] == "recovery_unavailable"


def test_a_failed_retry_turn_is_retried_from_its_own_record_with_the_same_answer(api):
    # given an answered turn that failed, and its retry_turn that failed too
    session = _session()
    ask(tools=[{"tool": "create-choices", "args": {"choiceId": "path", "prompt": "Which way?", "choices": [
        {"id": "left", "label": "Take the left path"}, {"id": "right", "label": "Take the right path"}]}}])
    asked = completed(say(api, session.id))["turnId"]
    fail("teller", "report")
    first = completed(act(api, session.id, payload={"actions": [
        {"kind": "say", "interaction": {"turnId": asked, "interactionId": "path", "type": "choice"}, "fields": {"selectedId": "right"}}]}))
    second = completed(act(api, session.id, "retry_turn", {"recoverFromTurnId": first["turnId"]}))
    assert first["committed"] is False and second["committed"] is False
    heal()
    # when the player follows the execution's retry descriptor
    retry = api.get(f"/api/sessions/{session.id}/execution").json()["retry"]
    assert retry == {"type": "retry_turn", "payload": {"recoverFromTurnId": second["turnId"]}}
    done = completed(act(api, session.id, retry["type"], retry["payload"]))
    # then the answer reaches the story once; neither older attempt can be recovered any more
    assert done["committed"] is True
    assert _data(session, "teller", "seen", "2") == "Take the right path"
    assert Session.objects.get(pk=session.pk).completed_player_turns == 2
    for stale in (first["turnId"], second["turnId"]):
        assert rejected(act(api, session.id, "retry_turn", {"recoverFromTurnId": stale}))["code"] == "recovery_unavailable"


def test_retry_turn_without_a_source_runs_a_new_turn_without_input(api):
    session = _session()
    completed(say(api, session.id))
    done = completed(act(api, session.id, "retry_turn", {}))
    assert done["committed"] is True
    assert _data(session, "teller", "seen", "2") is None and PluginData.objects.filter(
        session=session, plugin_id="teller", namespace="seen", key="2").exists()
    assert Session.objects.get(pk=session.pk).completed_player_turns == 2


# --- rejections ------------------------------------------------------------------------------------


def _refused(api, session, type, payload, code, **extra):
    before = _written(session)
    payload_out = rejected(act(api, session.id, type, payload, **extra))
    assert payload_out["code"] == code, payload_out
    assert payload_out["message"]
    assert _written(session) == before
    return payload_out


def test_retry_sources_are_checked_with_their_codes(api):
    # given turn 1 committed with flaky/echo failed, a retry of it, a failed turn 2 and a later turn 3
    session, source = _played_with_failure(api)
    fail("flaky/tally")
    tally_failed = completed(say(api, session.id))["turnId"]
    heal()
    retry = completed(act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/tally"],
                                                                        "retryFromTurnId": tally_failed}))["turnId"]
    fail("teller")
    broken = completed(say(api, session.id))["turnId"]
    heal()
    # then every rejection names its reason and writes nothing
    ids = {"runtimeIds": ["flaky/echo"]}
    _refused(api, session, "retry_failed_runtimes", {**ids, "retryFromTurnId": "no-such-turn"}, "retry_source_not_found")
    _refused(api, session, "retry_failed_runtimes", {**ids, "retryFromTurnId": broken}, "retry_source_not_committed")
    _refused(api, session, "retry_failed_runtimes", {**ids, "retryFromTurnId": retry}, "retry_source_not_original")
    _refused(api, session, "retry_failed_runtimes", {**ids, "retryFromTurnId": source}, "retry_source_stale")
    _refused(api, session, "retry_runtime", {"runtimeId": "flaky/echo", "retryFromTurnId": source}, "retry_source_stale")
    _refused(api, session, "retry_runtime", {"runtimeId": "solo", "retryFromTurnId": tally_failed}, "retry_target_not_failed")
    _refused(api, session, "retry_failed_runtimes", {"runtimeIds": ["ghost/runtime"], "retryFromTurnId": tally_failed},
             "retry_target_not_active")
    _refused(api, session, "retry_runtime", {"runtimeId": "ghost"}, "retry_target_not_active")
    _refused(api, session, "retry_turn", {"recoverFromTurnId": "no-such-turn"}, "recovery_unavailable")
    _refused(api, session, "retry_turn", {"recoverFromTurnId": source}, "recovery_unavailable")  # it committed


def test_a_deactivated_target_is_refused_but_stays_in_the_failed_set(api):
    # given turn 1 committed with flaky/echo and solo failed; then solo's plugin is turned off
    session = _session()
    fail("flaky/echo")
    fail("solo")
    source = completed(say(api, session.id))["turnId"]
    heal()
    Session.objects.filter(pk=session.pk).update(active_plugins=["teller", "flaky", "asker"])
    # then solo cannot be retried, and the failed set still lists it
    _refused(api, session, "retry_failed_runtimes", {"runtimeIds": ["solo"], "retryFromTurnId": source}, "retry_target_not_active")
    done = completed(act(api, session.id, "retry_failed_runtimes", {"runtimeIds": ["flaky/echo"], "retryFromTurnId": source}))
    assert done["sourceFailedRuntimeIds"] == ["solo"]


def test_an_input_already_committed_is_refused_in_the_stream(api):
    session = _session()
    completed(act(api, session.id, payload={"actions": [{"kind": "say", "text": "Once."}], "inputMessageId": "msg-1"}))
    _refused(api, session, "submit_actions", {"actions": [{"kind": "say", "text": "Once."}], "inputMessageId": "msg-1"},
             "input_already_committed")
