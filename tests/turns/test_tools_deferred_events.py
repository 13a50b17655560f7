"""Deferred tools + search-tools, event schemas (files and inline, advertise, the prompt's event
directory), whole-string stray-} repair, warnings as warnings, proposal-invalid at commit and
COVEL_INSTRUCTION_LOCALE — over /api/actions with the scripted model (spec 000 §search-tools,
§emit-event, §模型写错的参数 JSON, §注解与超时, §Proposal 类型, §统一返回格式与错误码). The plugins are
in tests/turns/tools_support.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.tools_support import builtin_dir_with_tools
from turns.models import SessionEvent, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)
    for path in home.glob("lookout-step-*.json"):
        path.unlink()
    registry_reset()
    yield home
    registry_reset()


def _turn(api, session) -> list[dict]:
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return frames


def _step(home: Path, n: int) -> dict:
    return json.loads((home / f"lookout-step-{n}.json").read_text(encoding="utf-8"))


def _of(frames, type_, runtime_id):
    return [f["payload"] for f in frames if f["type"] == type_ and f["payload"].get("runtimeId", runtime_id) == runtime_id
            and (f.get("runtimeId") in (None, runtime_id))]


def test_deferred_tools_are_found_through_search_tools_and_loaded_for_the_next_step(api, plugins):
    # given lookout: 30 plugin tools and emit-event, all deferred
    session = session_make(plugins=("narrator", "lookout"), characters=[("hero", "Hero", "player")])
    # when a turn runs
    frames = _turn(api, session)
    # then the first request carried only the injected search-tools and runtime-done (the pool stayed out)
    first = _step(plugins, 1)
    assert sorted(first["tools"]) == ["runtime-done", "search-tools"]
    # search-tools tells the model how big the pool is and which plugin declared it
    assert first["definitions"]["search-tools"]["description"].startswith('Search the 31 deferred tools of plugin "lookout"')
    # each search loaded its best match, and the next request carried their full schemas
    second = _step(plugins, 2)
    assert second["tools"] == ["runtime-done", "search-tools", "probe-17", "emit-event"]
    summaries = [r["content"]["summary"] for r in second["results"]]
    assert summaries[0].splitlines()[1] == "- probe-17: Ring the harbour bell to warn the town"
    assert summaries[1].splitlines()[1].startswith("- emit-event: ")
    # the tools stay loaded for the rest of the loop
    assert {"probe-17", "emit-event"} <= set(_step(plugins, 4)["tools"])
    # the bell tool ran with the whole-string stray } repaired (spec 000 §模型写错的参数 JSON), and its write committed
    bell = [f["payload"] for f in frames if f["type"] == "tool.completed" and f["payload"].get("tool") == "probe-17"]
    assert bell[0]["output"]["data"] == {"rang": True, "notes": [{"id": "a"}, {"id": "b"}]}
    row = PluginData.objects.get(session=session, plugin_id="lookout", namespace="bell", key="rung")
    assert row.value == {"notes": [{"id": "a"}, {"id": "b"}]}
    # the repaired arguments went back into the history as valid JSON
    sent = [c["arguments"] for m in _assistant_messages(session.id) for c in m["tool_calls"] if c["name"] == "probe-17"]
    assert sent == ['{"notes": [{"id": "a"}, {"id": "b"}]}']
    result = {r["runtimeId"]: r for r in TurnResult.objects.get(session=session).summary["runtimeResults"]}["lookout"]
    assert result["status"] == "success"


def _assistant_messages(session_id: str) -> list:
    """The assistant messages of lookout's last model call (its history, from the llm.calling trace)."""
    calls = [row.payload for row in TraceEvent.objects.filter(session_id=session_id, type="llm.calling", runtime_id="lookout")
             .order_by("seq")]
    return [m for m in calls[-1]["messages"] if m.get("role") == "assistant"]


def test_event_payloads_are_checked_against_file_schemas_and_the_directory_reaches_the_prompt(api, plugins):
    session = session_make(plugins=("narrator", "lookout"), characters=[("hero", "Hero", "player")])
    frames = _turn(api, session)
    # the emit-event definition carries the public topics as an enum and each payload schema
    # (the file one and the inline one) as a titled data.anyOf branch; the internal topic is absent
    params = _step(plugins, 2)["definitions"]["emit-event"]["parameters"]
    assert params["properties"]["topic"]["enum"] == ["lookout.sighted", "lookout.logged"]
    branches = {b["title"]: b for b in params["properties"]["data"]["anyOf"]}
    assert branches["lookout.sighted"]["required"] == ["ship"] and branches["lookout.logged"]["required"] == ["line"]
    # a payload that breaks the file schema failed the call (invalid-input), the valid one was emitted once
    failed = [f["payload"] for f in frames if f["type"] == "tool.failed" and f["payload"].get("tool") == "emit-event"]
    assert [p["error"]["code"] for p in failed] == ["invalid-input"]
    assert failed[0]["error"]["message"] == "event payload rejected: data/ship 5 is not of type 'string'"
    emitted = [f["payload"] for f in frames if f["type"] == "event.emitted"]
    assert [(e["topic"], e["data"]) for e in emitted] == [("lookout.sighted", {"ship": "Gull"})]
    # the prompt's event directory lists the public topics with their required fields, not the internal one
    system = _step(plugins, 1)["system"]
    assert "[EVENTS]" in system and "- lookout.sighted — A ship was sighted from the tower. (required: ship)" in system
    assert "- lookout.logged — A line was written in the log. (required: line)" in system
    assert "lookout.internal" not in system


def test_a_builtin_the_host_lacks_is_a_warning_not_a_failed_call(api, plugins):
    session = session_make(plugins=("narrator", "lookout"), characters=[("hero", "Hero", "player")])
    frames = _turn(api, session)
    failed = [f["payload"] for f in frames if f["type"] == "tool.failed"]
    assert not any("warning" in p for p in failed)
    rows = TraceEvent.objects.filter(session=session, type="runtime.warning", runtime_id="lookout")
    assert [r.payload["warning"]["code"] for r in rows] == ["tool-not-offered"]
    assert 'builtin tool "weather-report" is not installed on this host' in rows[0].payload["warning"]["message"]
    # the trace API reports it with severity warning
    response = api.get(f"/api/traces/{session.id}")
    assert response.status_code == 200
    warnings = [e for e in response.json()["events"] if e["type"] == "runtime.warning"]
    assert [w["diagnostic"]["severity"] for w in warnings] == ["warning"]
    assert warnings[0]["diagnostic"]["warning"]["code"] == "tool-not-offered"


def test_an_invalid_proposal_fails_at_commit_as_proposal_invalid(api, plugins, monkeypatch):
    # given the instruction locale pinned to Chinese for an English session
    monkeypatch.setenv("COVEL_INSTRUCTION_LOCALE", "zh-CN")
    session = session_make(plugins=("narrator", "scribbler"), characters=[("hero", "Hero", "player")])
    frames = _turn(api, session)
    # the call itself succeeded and said its writes are staged (in the pinned language)
    completed = [f["payload"] for f in frames if f["type"] == "tool.completed" and f["payload"].get("tool") == "scribble"]
    assert completed and completed[0]["output"]["staged"]["notice"] == "已暂存，回合结束时生效（可能被拒绝）。"
    assert not [f for f in frames if f["type"] == "tool.failed" and f["payload"].get("tool") == "scribble"]
    # the commit dropped the runtime's writes (both of them) with proposal-invalid, the story stayed
    failed = [f["payload"] for f in frames if f["type"] == "proposal.failed"]
    assert [(p["runtimeId"], p["code"]) for p in failed] == [("scribbler", "proposal-invalid")]
    assert not PluginData.objects.filter(session=session, plugin_id="scribbler").exists()
    summary = TurnResult.objects.get(session=session).summary
    assert summary["failedProposals"][0]["code"] == "proposal-invalid"


def test_instruction_locale_follows_the_session_when_unset(api, plugins, monkeypatch):
    monkeypatch.delenv("COVEL_INSTRUCTION_LOCALE", raising=False)
    session = session_make(plugins=("narrator", "scribbler"), characters=[("hero", "Hero", "player")])
    frames = _turn(api, session)
    completed = [f["payload"] for f in frames if f["type"] == "tool.completed" and f["payload"].get("tool") == "scribble"]
    assert completed[0]["output"]["staged"]["notice"].startswith("Staged: it takes effect when the turn ends")


def test_a_failed_optional_runtime_drops_only_its_own_writes_next_to_others(api, plugins):
    # given two optional post-turn runtimes next to the story: lookout stages a valid write,
    # scribbler an invalid one
    session = session_make(plugins=("narrator", "lookout", "scribbler"), characters=[("hero", "Hero", "player")])
    frames = _turn(api, session)
    turn_id = frames[-1]["payload"]["turnId"]
    # then only scribbler's writes are dropped, reported once
    failed = [f["payload"] for f in frames if f["type"] == "proposal.failed"]
    assert [(p["runtimeId"], p["code"]) for p in failed] == [("scribbler", "proposal-invalid")]
    assert not PluginData.objects.filter(session=session, plugin_id="scribbler").exists()
    # and lookout's write is committed exactly once, with its committed events appended once
    assert PluginData.objects.filter(session=session, plugin_id="lookout", namespace="bell", key="rung").count() == 1
    changed = SessionEvent.objects.filter(session=session, turn_id=turn_id, type="plugin-data.changed")
    assert [e.payload.get("pluginId") for e in changed].count("lookout") == 1
    assert TurnResult.objects.filter(session=session, turn_id=turn_id, committed=True).count() == 1
    assert [f["runtimeId"] for f in TurnResult.objects.get(session=session, turn_id=turn_id).summary["failedProposals"]] == ["scribbler"]
