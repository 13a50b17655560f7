"""core-quest: the quest log over HTTP with the scripted model (world-ir extracts, the log
registers an accepted goal, the vocabulary names it back, progress closes its objective), the
seeded quests of a world package, and the panel spec."""
from __future__ import annotations

import pytest

from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data, ui_parts
from tests.plugins_app.builtin.play_support import get_json

pytestmark = pytest.mark.django_db(transaction=True)

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "world-ir", "core-quest"]


def test_manifest_runtimes(builtin_plugins):
    record = builtin_plugins.get("core-quest")
    assert record.host_state == "loaded", record.error
    assert {r.id: r.stage for r in record.manifest.runtimes} == {"core-quest/log": "post-turn", "core-quest/vocabulary": "pre-turn"}
    assert record.manifest.contributes.data["quests"]["accepts"] == ["quests@1"]


def test_an_accepted_goal_is_logged_and_advanced(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, kind="act", name="Ada Quill",
                       says=["I promise to find the missing lamp keeper.", "I find the missing lamp keeper at last."])
    assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
    assert completed(played, "core-quest/log") == ["success"] * 3
    records = list(plugin_data(played.id, "core-quest", "quests").values())
    assert len(records) == 1, records
    [quest] = records
    assert quest["name"].startswith("Find the missing lamp keeper") and quest["objectives"][0]["done"] is True
    assert quest["status"] == "completed"
    changes = [c for p in ui_parts(played) if p["type"] == "quest.changes" for c in p["content"]["changes"]]
    assert [c["change"].split(", ")[0] for c in changes] == ["accepted", "objective-done"]
    # turn 2's extraction was told the quest's open objective
    calls = [c for c in played.model_calls(3) if c["runtimeId"] == "world-ir"]
    assert '"type": "quest"' in calls[0]["messages"][0]["content"]
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "core-quest" for s in g["specs"]] == ["core-quest.panel"]


def test_zh_session_logs_a_promise(client):
    played = play_with(client, "yanhui-ferry", PLUGINS, kind="act", name="林照", says=["我答应帮船家找回丢失的船票。"])
    assert not failed_runtimes(played)
    [quest] = plugin_data(played.id, "core-quest", "quests").values()
    assert "船票" in quest["name"] and quest["status"] == "active"
