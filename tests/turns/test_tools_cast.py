"""Character delegation, turn-policy imports, delegation to another package's sub-agent through its
write service, and the function runtime's ctx.agents / ctx.tools delegate and services (spec 000
§子 agent（delegate）, §角色委托与策略导入, §导入的服务工具), over POST /api/actions (SSE) and
plugin-rpc with the scripted model. The plugins are in tests/turns/cast_support.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import Character, TurnMessage
from tests.turns.cast_support import builtin_dir_with_cast
from tests.turns.test_actions_helpers import (
    action_body,
    post_action,
    session_make,
    stream_read,
)
from turns.models import RuntimeOutput, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)

FILES = ("troupe-*.json", "casting-*.json", "miller-*.json", "granary-*")


@pytest.fixture(autouse=True)
def home(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_cast(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)

    def clean():
        for pattern in FILES:
            for path in home.glob(pattern):
                path.unlink()

    clean()
    registry_reset()
    yield home
    clean()
    registry_reset()


def _read(home: Path, name: str) -> dict:
    return json.loads((home / name).read_text(encoding="utf-8"))


def _cast_session(**metadata):
    session = session_make(plugins=("narrator", "troupe", "casting"), characters=[("hero", "Hero", "player")])
    Character.objects.create(session=session, character_id="mara-id", name="Mara", type="npc", aliases=["The Lamplighter"],
                             description="Keeper of the lighthouse.")
    Character.objects.create(session=session, character_id="bram-id", name="Bram", type="npc")
    TurnMessage.objects.create(session=session, turn_id="t-old", role="user", content={"text": "I wave at the gulls."})
    TurnMessage.objects.create(session=session, turn_id="t-old", role="assistant", content={"text": "The gulls ignore you."})
    TurnMessage.objects.create(session=session, turn_id="t-mara", role="user", content={"text": "I climb to the lamp room."})
    TurnMessage.objects.create(session=session, turn_id="t-mara", role="assistant",
                               content={"text": "Mara trims the wick and watches you."})
    if metadata:
        session.metadata = {**(session.metadata or {}), "orchestration": metadata}
        session.save(update_fields=["metadata"])
    return session


def _tool_frames(frames, tool):
    return [f for f in frames if f["type"] in ("tool.calling", "tool.completed", "tool.failed") and f["payload"].get("tool") == tool]


def test_a_character_delegation_resolves_the_name_privately_and_keeps_intent_out_of_records(api, home):
    session = _cast_session(maxActors=2)
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    # the actor got its profile, the turn it witnessed (not the one without it), the instruction and the brief
    task = _read(home, "troupe-actor-1.json")["messages"][-1]["content"]
    assert "[CHARACTER]\nName: Mara\nAliases: The Lamplighter\nDescription: Keeper of the lighthouse." in task
    assert "Story: Mara trims the wick and watches you." in task and "gulls" not in task
    assert "[INSTRUCTION]\nBe wary of strangers." in task and "[TASK]\nThe hero knocks at the lighthouse door." in task
    # the director's model read segments without speakers, the character's name and the intent
    first = _read(home, "troupe-director-2.json")["results"][0]
    assert first["name"] == "delegate" and first["content"] == {"data": {
        "character": "Mara", "segments": [{"type": "dialogue", "text": "Who goes there?"},
                                          {"type": "action", "text": "She raises her lantern."}],
        "intent": "Find out whether the hero smuggles oil."}}
    # the other three calls are the character rules: data refused, an id is not a name, runtimeId needs character too
    delegate = [f for f in _tool_frames(frames, "delegate") if f["type"] != "tool.calling"]
    assert [f["type"] for f in delegate] == ["tool.completed", "tool.failed", "tool.failed", "tool.failed"]
    assert [f["payload"]["error"]["code"] for f in delegate[1:]] == ["invalid-input", "not-found", "invalid-input"]
    assert delegate[1]["payload"]["error"]["message"].startswith("data is not accepted")
    assert delegate[2]["payload"]["error"]["message"] == '"mara-id" is an id, not a character name.'
    assert delegate[3]["payload"]["error"]["message"] == "character is required for character-actor@1 targets."
    # the stream, the trace and the turn's tool records keep neither the intent nor the instruction
    assert delegate[0]["payload"]["output"]["data"] == {"character": "Mara", "segments": [
        {"type": "dialogue", "text": "Who goes there?"}, {"type": "action", "text": "She raises her lantern."}]}
    stored = json.dumps([e.payload for e in TraceEvent.objects.filter(session=session)])
    record = json.dumps(TurnResult.objects.get(session=session).summary)
    for private in ("smuggles oil", "Be wary of strangers"):
        assert private not in json.dumps(frames) and private not in stored and private not in record, private
    assert TraceEvent.objects.filter(session=session, runtime_id="troupe/actor", type="subagent.completed").count() == 1


def test_a_turn_policy_import_takes_names_adds_the_action_and_limits_and_answers_names(api, home):
    session = _cast_session(maxActors=2)
    frames = stream_read(post_action(api, action_body(session.id, actions=[{"kind": "say", "text": "Anyone home?"}])))
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    # the tool is the framework's: names in, no provider schema
    [calling, completed] = _tool_frames(frames, "turn-policy")
    assert calling["payload"]["input"] == {"present": ["Mara", "Bram"], "recentSegments": [{"type": "dialogue",
                                                                                           "text": "Who goes there?"}]}
    assert completed["type"] == "tool.completed"
    assert completed["payload"]["output"]["data"] == {"actors": [{"character": "Bram", "why": "closest to the door"},
                                                                 {"character": "Mara"}]}
    # the provider got the resolved cast, the player's action, the session's limits and historyFor
    request = _read(home, "casting-request.json")
    assert request["args"]["present"] == ["Mara", "Bram"]
    assert request["args"]["presentCharacters"] == [{"id": "mara-id", "name": "Mara"}, {"id": "bram-id", "name": "Bram"}]
    assert "Anyone home?" in request["args"]["action"]["text"] and request["args"]["limits"] == {"maxActors": 2}
    assert request["args"]["recentSegments"] == [{"type": "dialogue", "text": "Who goes there?"}]
    assert [r["text"] for r in request["history"]] == ["I climb to the lamp room.", "Mara trims the wick and watches you."]


def test_a_chosen_turn_policy_that_is_gone_is_absent(api, home):
    session = _cast_session(turnPolicy={"pluginId": "elsewhere", "name": "spotlight"})
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True
    assert "turn-policy" not in _read(home, "troupe-director-1.json")["tools"]
    failed = [f for f in _tool_frames(frames, "turn-policy") if f["type"] == "tool.failed"]
    assert failed[0]["payload"]["error"]["code"] == "unavailable"
    assert "chosen turn policy is not available" in failed[0]["payload"]["error"]["message"]


def _granary(session, sacks=10):
    PluginData.objects.create(session=session, plugin_id="granary", namespace="stock", key="barn", value={"sacks": sacks})


def _sacks(session):
    return PluginData.objects.get(session=session, plugin_id="granary", namespace="stock", key="barn").value["sacks"]


def test_delegating_to_another_packages_sub_agent_stages_its_write_service_into_the_callers_commit(api, home):
    session = session_make(plugins=("narrator", "granary", "miller"), characters=[("hero", "Hero", "player")])
    _granary(session)
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    [done] = [f for f in _tool_frames(frames, "delegate") if f["type"] != "tool.calling"]
    assert done["type"] == "tool.completed", done
    assert done["payload"]["output"]["data"] == {"text": "Took two sacks."}
    assert done["payload"]["output"]["staged"]["count"] == 1
    assert _sacks(session) == 8  # granary's own data, committed with miller's turn
    take = TraceEvent.objects.get(session=session, runtime_id="granary/clerk", type="tool.completed")
    assert take.payload["tool"] == "take-sacks" and take.payload["parentCallId"] == done["payload"]["callId"]


def _ledger(api, session, mode):
    body = {"kind": "runtime", "pluginId": "steward", "runtimeId": "steward/ledger", "payload": {"mode": mode}}
    response = api.post(f"/api/sessions/{session.id}/plugin-rpc", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    [item] = response.json()["runtimeResults"]
    assert item["status"] == "ok", json.dumps(item)
    return item["output"]


def test_a_function_runtime_runs_sub_agents_and_services_and_their_writes_commit_with_it(api, home):
    session = session_make(plugins=("narrator", "granary", "steward"))
    _granary(session)
    out = _ledger(api, session, "all")
    assert out["ran"] == {"text": "Took two sacks."}  # ctx.agents.run: the raw output
    assert out["tool"] == {"text": "Took two sacks."}  # ctx.tools.call("delegate"): the full content
    assert out["direct"] == {"took": 1}  # an imported write service through ctx.tools.call
    assert out["missing"] == ["AgentRunFailed", "not-found"]
    assert _sacks(session) == 10 - 2 - 2 - 1
    parents = {e.payload["parentCallId"] for e in TraceEvent.objects.filter(session=session, type="subagent.completed")}
    assert parents == {"agents-1", "fn-1"}


def test_eight_sub_agents_run_at_once_and_a_ninth_is_unavailable(api, home):
    session = session_make(plugins=("narrator", "granary", "steward"))
    _granary(session, sacks=100)
    (home / "granary-hold").write_text("1")
    out = _ledger(api, session, "crowd")
    assert len(list(home.glob("granary-running-*"))) == 8
    assert out["ninth"][0] == "unavailable" and out["ninth"][1].startswith("8 sub-agents are already running")
    assert out["outputs"] == 8 and out["errors"] == []
    assert _sacks(session) == 100 - 8 * 2  # the eight staged writes committed with the function runtime


def test_max_subagent_calls_caps_the_sub_agent_runs_of_one_execution(api, home):
    session = session_make(plugins=("narrator", "granary", "steward"))
    session.metadata = {**(session.metadata or {}), "orchestration": {"maxSubagentCalls": 1}}
    session.save(update_fields=["metadata"])
    _granary(session)
    out = _ledger(api, session, "quota")
    assert out["first"] == {"text": "Took two sacks."}
    assert out["second"][0] == "unavailable" and "maxSubagentCalls" in out["second"][1]
    assert _sacks(session) == 8



def test_delegate_as_the_completion_tool_gives_the_caller_only_the_characters_segments(api, home):
    session = _cast_session()
    session.active_plugins = [*session.active_plugins, "stagehand"]
    session.save(update_fields=["active_plugins"])
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    results = {r["runtimeId"]: r for r in TurnResult.objects.get(session=session).summary["runtimeResults"]}
    assert results["stagehand"]["status"] == "success"
    stored = RuntimeOutput.objects.get(session=session, runtime_id="stagehand").output
    # the persisted runtime result: the projection, and a tool record without instruction and intent
    assert stored["results"][0]["structured"] == {"segments": [{"type": "dialogue", "text": "Who goes there?"},
                                                           {"type": "action", "text": "She raises her lantern."}]}
    assert stored["metaData"]["toolCallList"][0]["input"]["instruction"] == "(private)"
    for text in (json.dumps(frames), json.dumps(stored)):
        assert "smuggles oil" not in text and "Whisper." not in text
