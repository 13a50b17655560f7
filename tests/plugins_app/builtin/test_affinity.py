"""affinity: update-affinity through the ToolExecutor."""

from __future__ import annotations

import pytest

from turns.engine.tools.context import InMemoryStateView
from plugins_app.toolkit.state import CharacterRecord
from tests.plugins_app.builtin.support import error_of, payloads


def test_manifest_loads(builtin_plugins):
    record = builtin_plugins.get("affinity")
    assert record.host_state == "loaded" and list(record.registrations.tools) == ["update-affinity"]


def test_unknown_names_start_at_zero_and_known_ones_accumulate(run_tool):
    state = InMemoryStateView(
        characters=[CharacterRecord(id="npc-pei-zhao", name="裴照", aliases=("裴巡检",))],
        plugin_data={("affinity", "affinity"): {"npc-lian": {"id": "npc-lian", "name": "Lian", "score": 95, "tier": "devoted", "history": []}}},
    )
    args = {"changes": [
        {"name": "lian", "delta": 10, "reason": "You shielded her."},
        {"name": "裴巡检", "delta": -3, "reason": "你当众顶撞了他。"},
        {"name": "Harbor Master", "delta": 4, "reason": "You paid the fee."},
    ]}
    outcome = run_tool("affinity", "update-affinity", args, state)
    assert outcome.status == "success", outcome.envelope
    assert outcome.envelope["summary"] == (
        "Affinity updated (3):\nLian: 95 → 100 (Devoted)\n裴照: 0 → -3 (Neutral)\nHarbor Master: 0 → 4 (Neutral)"
    )
    [batch] = payloads(outcome, "plugin.data.batch")
    records = {e["key"]: e["value"] for e in batch["entries"]}
    assert set(records) == {"npc-lian", "npc-pei-zhao", "npc-harbor-master"}
    assert records["npc-lian"]["score"] == 100  # clamped
    assert records["npc-lian"]["history"] == [{"turn": 3, "delta": 5, "reason": "You shielded her."}]
    assert records["npc-pei-zhao"]["name"] == "裴照" and records["npc-pei-zhao"]["tier"] == "neutral"
    assert all(e["namespace"] == "affinity" for e in batch["entries"])


def test_chinese_summary_and_tiers(run_tool):
    state = InMemoryStateView(plugin_data={("affinity", "affinity"): {"npc-a": {"id": "npc-a", "name": "韩四娘", "score": -55}}})
    outcome = run_tool("affinity", "update-affinity", {"changes": [{"name": "韩四娘", "delta": -20, "reason": "你骗了她。"}]}, state, locale="zh-CN")
    assert outcome.envelope["summary"] == "好感度已更新（1 人）：\n韩四娘: -55 → -75 (敌视)"


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ([{"name": "A", "delta": 0, "reason": "x"}], "changes/0/delta"),
        ([{"name": "A", "delta": 21, "reason": "x"}], "changes/0/delta"),
        ([{"name": f"N{i}", "delta": 1, "reason": "x"} for i in range(6)], "changes"),
        ([{"name": "Lian", "delta": 1, "reason": "x"}, {"name": " lian", "delta": 2, "reason": "y"}], "already appears in changes[0]"),
    ],
)
def test_rejects_invalid_changes(run_tool, changes, fragment):
    outcome = run_tool("affinity", "update-affinity", {"changes": changes})
    code, message = error_of(outcome)
    assert code == "invalid-input" and fragment in message
    assert outcome.proposals == []
