"""The turn and runtime hooks at their points (turns.engine.hooks): PreSchedule drops a runtime,
PreRuntime skips one (guard), PostContextAssembly rewrites an agent's context (the completion
contract is put back), PreLLMCall rewrites one call only, PostRuntime rewrites a result — over
/api/actions with the scripted model. The plugins are in tests/turns/platform_support.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.platform_support import builtin_dir_with_platform
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import RuntimeOutput, TraceEvent, TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def platform(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_platform(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)
    for path in [home / "warden-hooks.jsonl", *home.glob("warden-seen-*.json")]:
        path.unlink(missing_ok=True)
    registry_reset()
    yield home
    registry_reset()


def _turn(api, session) -> list[dict]:
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return frames


def _hook_calls(home: Path) -> list[dict]:
    return [json.loads(line) for line in (home / "warden-hooks.jsonl").read_text(encoding="utf-8").splitlines()]


def test_pre_schedule_drops_and_pre_runtime_skips_and_post_runtime_rewrites(api, platform):
    # given a session with warden's hooks and tally's three post-turn runtimes
    session = session_make(plugins=("narrator", "warden", "tally"), characters=[("hero", "Hero", "player")])
    # when a turn runs
    frames = _turn(api, session)
    # then PreSchedule dropped tally/dropped: it never started and left nothing
    started = [f["payload"]["runtimeId"] for f in frames if f["type"] == "runtime.started"]
    assert "tally/dropped" not in started and "tally/count" in started
    summary = TurnResult.objects.get(session=session).summary
    results = {r["runtimeId"]: r for r in summary["runtimeResults"]}
    assert "tally/dropped" not in results
    assert not PluginData.objects.filter(session=session, plugin_id="tally", namespace="ran").exists()
    # PreRuntime skipped tally/guarded with its reason (guard), streamed as hook.aborted
    assert results["tally/guarded"]["status"] == "skipped"
    assert results["tally/guarded"]["reason"] == "hook-aborted: guarded by warden"
    aborted = [f["payload"] for f in frames if f["type"] == "hook.aborted"]
    assert {"event": "PreRuntime", "pluginId": "warden", "runtimeId": "tally/guarded", "reason": "guarded by warden"} in aborted
    # PostRuntime rewrote tally/count's output; the rest of its result (and its writes) stayed
    output = RuntimeOutput.objects.get(session=session, runtime_id="tally/count").output
    assert output["results"][0]["structured"] == {"count": 99}
    assert results["tally/count"]["status"] == "success"
    assert PluginData.objects.filter(session=session, plugin_id="tally", namespace="seen", key="settings").exists()
    rewrote = {row.payload["event"]: row.payload for row in TraceEvent.objects.filter(session=session, type="hook.rewrote")}
    assert set(rewrote) >= {"PreSchedule", "PostRuntime", "PostContextAssembly", "PreLLMCall"}
    assert "tally/dropped" in rewrote["PreSchedule"]["before"] and "tally/dropped" not in rewrote["PreSchedule"]["after"]
    assert rewrote["PostRuntime"]["after"] == {"status": "success", "output": {"count": 99}}
    # every handler got the common fields: its own plugin's settings and the active plugins
    calls = _hook_calls(platform)
    assert {c["event"] for c in calls} == {"PreSchedule", "PreRuntime", "PostContextAssembly", "PreLLMCall", "PostRuntime"}
    assert all(c["settings"] == {"strict": True} and c["activePluginIds"] == ["narrator", "warden", "tally"] for c in calls)
    assert [c["runtimeId"] for c in calls if c["event"] == "PreSchedule"] == [None]


def test_post_context_assembly_and_pre_llm_call_rewrite_what_the_model_sees(api, platform):
    # given warden's agent runtime (two model calls: a tool call, then text)
    session = session_make(plugins=("narrator", "warden"), characters=[("hero", "Hero", "player")])
    # when a turn runs
    _turn(api, session)
    first = json.loads((platform / "warden-seen-1.json").read_text(encoding="utf-8"))
    second = json.loads((platform / "warden-seen-2.json").read_text(encoding="utf-8"))
    # then the context hook replaced the system prompt; the framework's completion contract is kept
    assert first[0]["role"] == "system" and first[0]["content"].startswith("WARDEN SYSTEM PROMPT")
    assert "[COMPLETION]" in first[0]["content"]
    # its extra message is part of the runtime's context for every call
    assert [m["content"] for m in first if m["role"] == "user"][-2:] == ["CONTEXT NOTE", "CALL NOTE"]
    assert sum(m.get("content") == "CONTEXT NOTE" for m in second) == 1
    # the call hook's message reached each call once: it changed the call, not the transcript
    assert sum(m.get("content") == "CALL NOTE" for m in first) == 1
    assert sum(m.get("content") == "CALL NOTE" for m in second) == 1
    assert second[-1]["role"] == "user" and any(m["role"] == "tool" for m in second)
    # and the rewrite of the model is traced (stored, not streamed)
    rewrites = [row.payload for row in TraceEvent.objects.filter(session=session, type="hook.rewrote")
                if row.payload["event"] == "PreLLMCall"]
    assert len(rewrites) == 2 and all(r["after"]["model"] == "warden-model-x" for r in rewrites)
    assert TurnResult.objects.get(session=session).committed is True


def test_hooks_of_a_plugin_not_active_in_the_session_do_not_run(api, platform):
    # given a session without warden
    session = session_make(plugins=("narrator", "tally"), characters=[("hero", "Hero", "player")])
    # when a turn runs, every tally runtime runs and nothing was rewritten
    _turn(api, session)
    assert not (platform / "warden-hooks.jsonl").exists()
    assert set(PluginData.objects.filter(session=session, plugin_id="tally", namespace="ran").values_list("key", flat=True)) == {
        "dropped", "guarded"}
    assert RuntimeOutput.objects.get(session=session, runtime_id="tally/count").output["results"][0]["structured"] == {"count": 1}
