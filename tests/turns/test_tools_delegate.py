"""delegate over /api/actions with the scripted model (spec 000 §子 agent（delegate）): the
sub-agent (schedule.subagentOnly) runs inside the calling runtime with the brief and data as its
task, its own cut-down tools, its write-service writes staged into the caller's commit, events
pointing back at the call, failures refused with the spec's codes, and at most 8 at once. The
plugins are in tests/turns/tools_support.py (captain delegates, larder provides the write service)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.tools_support import builtin_dir_with_tools
from turns.models import TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)
    for path in home.glob("captain-*.json"):
        path.unlink()
    registry_reset()
    yield home
    registry_reset()


def _read(home: Path, name: str) -> dict:
    return json.loads((home / f"captain-{name}.json").read_text(encoding="utf-8"))


def _play(api):
    session = session_make(plugins=("narrator", "larder", "captain"), characters=[("hero", "Hero", "player")])
    PluginData.objects.create(session=session, plugin_id="larder", namespace="stock", key="bread", value=5)
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return session, frames


def _delegate_frames(frames):
    return [f for f in frames if f["type"] in ("tool.completed", "tool.failed") and f["payload"].get("tool") == "delegate"]


def test_delegate_runs_the_sub_agent_and_stages_its_writes_into_the_caller(api, plugins):
    session, frames = _play(api)
    # the caller is offered delegate; the sub-agent got the brief and data as its task and only its
    # read-only tools and service imports (no sync-characters, no delegate)
    assert "delegate" in _read(plugins, "bridge-1")["tools"]
    scout = _read(plugins, "scout-1")
    assert sorted(scout["tools"]) == ["list-characters", "runtime-done", "take-bread"]
    task = scout["messages"][-1]["content"]
    assert task.startswith("[TASK]\nCount the gulls.") and '"harbour": "north"' in task
    # the caller read the sub-agent's output, with this delegation's staged write
    first, second = _delegate_frames(frames)
    assert first["type"] == "tool.completed"
    assert first["payload"]["output"]["data"] == {"text": "Twelve gulls."}
    assert first["payload"]["output"]["staged"]["count"] == 1 and first["payload"]["output"]["staged"]["kinds"] == ["plugin.data"]
    # the write committed with the caller's turn, as the provider's data
    assert PluginData.objects.get(session=session, plugin_id="larder", namespace="stock", key="bread").value == 4
    # an unknown target is refused with not-found and does not fail the caller
    assert second["type"] == "tool.failed" and second["payload"]["error"]["code"] == "not-found"
    results = {r["runtimeId"]: r for r in TurnResult.objects.get(session=session).summary["runtimeResults"]}
    assert results["captain/bridge"]["status"] == "success"
    assert "captain/scout" not in results  # a sub-agent is not a scheduled runtime of the turn
    # the sub-agent's events point back at the delegate call; subagent.completed records the run
    call_id = first["payload"]["callId"]
    scout_rows = TraceEvent.objects.filter(session=session, runtime_id="captain/scout")
    tool_rows = [r.payload for r in scout_rows if r.type == "tool.completed"]
    assert {r["tool"] for r in tool_rows} == {"take-bread", "list-characters"}
    assert all(r["parentCallId"] == call_id for r in tool_rows)
    done = [r.payload for r in scout_rows if r.type == "subagent.completed"]
    assert len(done) == 1 and done[0]["status"] == "success" and done[0]["parentCallId"] == call_id


def test_a_ninth_delegate_while_eight_sub_agents_run_is_unavailable(api, plugins, monkeypatch):
    # given the execution's 8 sub-agent slots all taken (8 sub-agents running)
    import threading

    from turns.engine import delegate

    busy = threading.BoundedSemaphore(delegate.MAX_CONCURRENT_SUBAGENTS)
    for _ in range(delegate.MAX_CONCURRENT_SUBAGENTS):
        assert busy.acquire(blocking=False)
    monkeypatch.setattr(delegate, "_slots", lambda env: busy)
    # when the caller delegates, the 9th is refused at once (spec: 超过的调用立刻得到 unavailable)
    session, frames = _play(api)
    first = _delegate_frames(frames)[0]
    assert first["type"] == "tool.failed" and first["payload"]["error"]["code"] == "unavailable"
    assert first["payload"]["error"]["message"].startswith("8 sub-agents are already running")
    assert not (plugins / "captain-scout-1.json").exists()
    assert PluginData.objects.get(session=session, plugin_id="larder", namespace="stock", key="bread").value == 5
