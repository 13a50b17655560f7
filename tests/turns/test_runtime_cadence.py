"""Cadence of auto runtimes across turns (turns.engine.cadence, spec 004 §Plugin 摘要 schedule.every,
§事件类型 runtime.skipped 因 cooldown / startTurn / maxTriggerCount): ``every``, ``cooldownTurns`` and
``maxTriggerCount`` decide which logical turns an auto runtime runs in, over /api/actions with the
scripted model. The test plugin ``metronome`` has four post-turn functions that record the logical
turn they ran in."""
from __future__ import annotations

import shutil

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from sessions.models import Session
from tests.sessions.lantern_support import package_write
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import TurnResult

pytestmark = pytest.mark.django_db(transaction=True)

METRONOME_MD = """\
---
id: metronome
kind: plugin
version: 1.0.0
description: Post-turn functions with a cadence (test plugin).
---
Ticks.
"""

HANDLER = """\
def handle(ctx):
    ctx.plugin_data.set("ran", f"{ctx.runtime_id}@{ctx.logical_turn}", ctx.logical_turn)
    return {"turn": ctx.logical_turn}
"""

RUNTIMES = {
    # schedule.every (spec 004: auto runtime 的节奏写在 schedule.every)
    "even": "  stage: post-turn\n  every: 2\n  trigger:\n    type: auto\n",
    "third": "  stage: post-turn\n  trigger:\n    type: auto\n    every: 3\n",
    "cool": "  stage: post-turn\n  trigger:\n    type: auto\n    cooldownTurns: 2\n",
    "capped": "  stage: post-turn\n  trigger:\n    type: auto\n    maxTriggerCount: 2\n",
    "steady": "  stage: post-turn\n  trigger:\n    type: auto\n",
}


@pytest.fixture(autouse=True)
def metronome(settings, tmp_path):
    from plugins_app.discovery import BUILTIN_DIR

    target = tmp_path / "builtin"
    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    files = {"PLUGIN.md": METRONOME_MD}
    for name, schedule in RUNTIMES.items():
        files[f"runtimes/{name}/RUNTIME.md"] = f"---\ntype: function\nschedule:\n{schedule}function:\n  handler: ./handler.py\n---\nTick.\n"
        files[f"runtimes/{name}/handler.py"] = HANDLER
    package_write(target / "metronome", files)
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(target)
    registry_reset()
    yield
    registry_reset()


def _turns(api, session, count: int) -> None:
    for _ in range(count):
        frames = stream_read(post_action(api, action_body(session.id)))
        assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]


def _ran(session) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in PluginData.objects.filter(session=session, plugin_id="metronome", namespace="ran"):
        out.setdefault(row.key.split("@")[0], []).append(row.value)
    return {k: sorted(v) for k, v in out.items()}


def _reasons(session, runtime_id: str) -> dict[int, str | None]:
    """logical turn → the runtime's skip reason in that turn (None when it ran)."""
    out = {}
    for row in TurnResult.objects.filter(session=session, committed=True).order_by("id"):
        result = next(r for r in row.summary["runtimeResults"] if r["runtimeId"] == runtime_id)
        out[row.summary["logicalTurn"]] = result.get("reason") if result["status"] == "skipped" else None
    return out


def test_every_cooldown_and_max_trigger_count_decide_the_turns_an_auto_runtime_runs_in(api):
    # given a session with metronome's five post-turn runtimes
    session = session_make(plugins=("narrator", "metronome"), characters=[("hero", "Hero", "player")])
    # when six player turns run
    _turns(api, session, 6)
    # then each ran on the turns its cadence allows
    assert _ran(session) == {
        "metronome/even": [2, 4, 6],
        "metronome/third": [3, 6],
        "metronome/cool": [1, 3, 5],
        "metronome/capped": [1, 2],
        "metronome/steady": [1, 2, 3, 4, 5, 6],
    }
    # and the turns it sat out carry the reason (runtime.skipped: cooldown / maxTriggerCount / every)
    assert _reasons(session, "metronome/even") == {1: "interval", 2: None, 3: "interval", 4: None, 5: "interval", 6: None}
    assert _reasons(session, "metronome/cool") == {1: None, 2: "cooldown", 3: None, 4: "cooldown", 5: None, 6: "cooldown"}
    assert _reasons(session, "metronome/capped")[3] == "max-trigger-count"
    # the ledger in the session row holds the last triggered turn and the count of the ledgered ones only
    ledger = Session.objects.get(pk=session.pk).metadata["runtimeTriggers"]
    assert ledger == {"metronome/cool": {"lastTurn": 5, "count": 3}, "metronome/capped": {"lastTurn": 2, "count": 2}}



def test_a_runtime_run_by_hand_is_not_judged_by_its_cadence_and_not_counted(api):
    # given metronome/capped has used up its maxTriggerCount in two turns
    session = session_make(plugins=("narrator", "metronome"), characters=[("hero", "Hero", "player")])
    _turns(api, session, 2)
    assert Session.objects.get(pk=session.pk).metadata["runtimeTriggers"]["metronome/capped"]["count"] == 2
    # when the player reruns it by hand (retry_runtime: 按手动触发的方式只重跑指定的 runtime)
    frames = stream_read(post_action(api, action_body(session.id, type="retry_runtime", payload={"runtimeId": "metronome/capped"})))
    done = frames[-1]["payload"]
    # then it ran (the logical turn is completedPlayerTurns + 1 = 3) and the ledger did not move
    assert done["committed"] is True and done["runtimeIds"] == ["metronome/capped"], done
    assert _ran(session)["metronome/capped"] == [1, 2, 3]
    assert Session.objects.get(pk=session.pk).metadata["runtimeTriggers"]["metronome/capped"] == {"lastTurn": 2, "count": 2}
    # and the next player turn still skips it
    _turns(api, session, 1)
    assert _reasons(session, "metronome/capped")[3] == "max-trigger-count"
