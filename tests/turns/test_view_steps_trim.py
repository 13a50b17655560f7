"""turns.selectors_view.view_steps_closers_trim: what a closing /view step leaves out, and when it
keeps everything (the whole view is covered in tests/plugins_app/builtin/test_plugin_turns.py)."""
from __future__ import annotations

from turns.selectors_view import view_steps_closers_trim


def _step(n: int, kind: str, runtime: str = "narrator", turn: str = "t1", **fields):
    return {"id": str(n), "type": kind, "turnId": turn, "timestamp": "2026-12-05T00:00:00.000Z",
            "runtimeId": runtime, **fields}


def test_a_closing_step_leaves_out_what_its_opening_step_says():
    steps = view_steps_closers_trim([
        _step(1, "runtime.started", stage="narrative"),
        _step(2, "llm.calling", provider="scripted", slot="story"),
        _step(3, "llm.responded", provider="scripted", model="scripted", slot="story", durationMs=2),
        _step(4, "tool.calling", tool="roll"),
        _step(5, "tool.completed", tool="roll", durationMs=0),
        _step(6, "runtime.completed", stage="narrative", durationMs=3),
    ])
    assert steps[2] == _step(3, "llm.responded", model="scripted", durationMs=2)  # calling named no model
    assert steps[4] == _step(5, "tool.completed", durationMs=0)
    assert steps[5] == _step(6, "runtime.completed", durationMs=3)


def test_parallel_tool_calls_errors_other_turns_and_unpaired_closers_keep_their_fields():
    steps = view_steps_closers_trim([
        _step(1, "tool.calling", tool="a"),
        _step(2, "tool.calling", tool="b"),
        _step(3, "tool.completed", tool="b"),  # two calls open: which one ended is not known here
        _step(4, "llm.calling", provider="p", slot="s"),
        _step(5, "llm.responded", provider="p", slot="s", severity="error", error={"message": "x"}),
        _step(6, "runtime.started", stage="post-turn", turn="t1"),
        _step(7, "runtime.completed", stage="post-turn", turn="t2"),  # another turn's
        _step(8, "runtime.completed", stage="pre-turn", runtime="other"),  # its start is outside the window
        _step(9, "llm.calling", provider="p", slot="s", runtime="r2"),
        _step(10, "llm.responded", provider="q", slot="s", runtime="r2"),  # a fallback answered: differs
    ])
    assert steps[2]["tool"] == "b"
    assert steps[4]["provider"] == "p" and steps[4]["slot"] == "s"
    assert steps[6]["stage"] == "post-turn" and steps[7]["stage"] == "pre-turn"
    assert steps[9]["provider"] == "q" and "slot" not in steps[9]
