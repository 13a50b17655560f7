"""world-time: manifest, advance-world-time through the ToolExecutor."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from turns.engine.tools.context import InMemoryStateView
from tests.plugins_app.builtin.support import error_of, payloads

WORLDS = Path(__file__).resolve().parents[3] / "sessions" / "worlds"
NARRATIVE = {"narrative": {"value": "You question the ferryman for a while."}}


def _definition(world: str) -> dict:
    return yaml.safe_load((WORLDS / world / "data" / "time.yaml").read_text(encoding="utf-8"))


def _state(world: str = "hollow-reach-light", tick: int | None = None) -> InMemoryStateView:
    data = {("world-time", "definitions"): {"world": _definition(world)}}
    if tick is not None:
        data[("world-time", "clock")] = {"session": {"tick": tick, "turn": 1, "reason": "x"}}
    return InMemoryStateView(plugin_data=data)


def test_manifest_loads_and_registers_advance_world_time(builtin_plugins):
    record = builtin_plugins.get("world-time")
    assert record.host_state == "loaded"
    assert list(record.registrations.tools) == ["advance-world-time"]
    runtime = builtin_plugins.runtime("world-time/advance")
    assert runtime is not None


def test_advances_by_duration_from_the_initial_time(run_tool):
    outcome = run_tool("world-time", "advance-world-time", {"amount": 25, "unit": "minute", "reason": "Crossed the Neck."},
                       _state(), inputs=NARRATIVE)
    assert outcome.status == "success", outcome.envelope
    content = outcome.content
    assert content["lastDelta"] == 25
    assert content["summary"] == {
        "display": "November 14, A.D. 1891, 18:05 (Night)",
        "unit": "minute",
        "elapsedSinceStart": 25,
        "elapsedThisTurn": 25,
    }
    assert outcome.envelope["summary"] == (
        "World time advanced by 25 minutes: November 14, A.D. 1891, 17:40 (Dusk) → "
        "November 14, A.D. 1891, 18:05 (Night)."
    )
    [clock] = payloads(outcome, "plugin.data")
    assert clock == {"namespace": "clock", "key": "session", "value": {"tick": content["tick"], "turn": 3, "reason": "Crossed the Neck."}}
    assert outcome.envelope["staged"]["kinds"] == ["plugin.data"]


def test_target_time_rolls_over_the_day_in_a_twelve_hour_calendar(run_tool):
    state = _state("yanhui-ferry")
    outcome = run_tool("world-time", "advance-world-time", {"target": {"day": 13, "hour": 1}, "reason": "守到次日丑时。"},
                       state, locale="zh-CN", inputs=NARRATIVE)
    assert outcome.status == "success", outcome.envelope
    # 12 Jan 寅时 (hour 2) → 13 Jan 丑时 (hour 1): 11 shichen of 8 ke each.
    assert outcome.content["lastDelta"] == 11 * 8
    # Labels in the world's own day (issue 20): the shichen and its ke, never a 24-hour "1:00".
    assert outcome.content["display"] == "景和7年正月13日 丑时"
    assert outcome.envelope["summary"] == "世界时间推进了11个时辰：景和7年正月12日 寅时 → 景和7年正月13日 丑时。"


def test_continues_from_the_stored_clock(run_tool):
    first = run_tool("world-time", "advance-world-time", {"amount": 10, "reason": "Talked."}, _state(), inputs=NARRATIVE)
    stored = first.content["tick"]
    outcome = run_tool("world-time", "advance-world-time", {"amount": 1, "unit": "hour", "reason": "Rowed out."},
                       _state(tick=stored), inputs={**NARRATIVE, "currentTime": {"value": {"tick": stored}}})
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["tick"] == stored + 60
    assert outcome.content["summary"]["elapsedSinceStart"] == 70
    assert outcome.content["summary"]["elapsedThisTurn"] == 60


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"target": {"hour": 9}, "reason": "x"}, "Time only moves forward"),
        ({"amount": 2, "unit": "day", "reason": "x"}, "largest step"),
        ({"amount": 2, "unit": "phase", "reason": "x"}, "not phase"),
        ({"amount": 1, "unit": "hour", "target": {"hour": 20}, "reason": "x"}, "not both"),
        ({"target": {"cycle": 1}, "reason": "x"}, "has no cycle"),
    ],
)
def test_rejects_arguments_the_definition_does_not_allow(run_tool, args, fragment):
    outcome = run_tool("world-time", "advance-world-time", args, _state(), inputs=NARRATIVE)
    code, message = error_of(outcome)
    assert code == "invalid-input"
    assert fragment in message
    assert outcome.proposals == []


def test_unavailable_without_definition_or_narrative(run_tool):
    code, message = error_of(run_tool("world-time", "advance-world-time", {"reason": "x"}, InMemoryStateView(), inputs=NARRATIVE))
    assert (code, message) == ("unavailable", "This session has no world time definition, so there is no clock to advance.")
    code, _ = error_of(run_tool("world-time", "advance-world-time", {"reason": "x"}, _state()))
    assert code == "unavailable"


def test_conflict_when_the_clock_moved_after_the_narrative(run_tool):
    inputs = {**NARRATIVE, "currentTime": {"value": {"tick": 1}}}
    code, message = error_of(run_tool("world-time", "advance-world-time", {"amount": 5, "reason": "x"}, _state(tick=500), inputs=inputs))
    assert code == "conflict"
    assert message.startswith("The world clock changed after this turn's story was written.")


def test_random_mode_takes_only_a_reason_and_is_deterministic(run_tool):
    definition = _definition("hollow-reach-light")
    definition["definition"]["evolution"] = {"mode": "random", "defaultStep": 0, "maxStep": 30, "randomRange": {"min": 5, "max": 30}}
    state = InMemoryStateView(plugin_data={("world-time", "definitions"): {"world": definition}})
    first = run_tool("world-time", "advance-world-time", {"reason": "Time drifts."}, state, inputs=NARRATIVE)
    second = run_tool("world-time", "advance-world-time", {"reason": "Time drifts."}, state, inputs=NARRATIVE)
    assert first.status == "success"
    assert 5 <= first.content["lastDelta"] <= 30
    assert first.content["lastDelta"] == second.content["lastDelta"]
    code, message = error_of(run_tool("world-time", "advance-world-time", {"amount": 3, "reason": "x"}, state, inputs=NARRATIVE))
    assert code == "invalid-input" and "submit only `reason`" in message
