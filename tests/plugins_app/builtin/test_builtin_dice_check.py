"""dice-check: the roller's pool reaches the narrator, a risky act emits one check.resolved receipt
(scripted narrator), the background recorder settles it against the same pool, a quiet turn rolls
nothing, and the player's /roll action."""
from __future__ import annotations

import json
import time

import pytest

from jobs.models import RuntimeJob

from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data
from tests.plugins_app.builtin.play_support import get_json

pytestmark = pytest.mark.django_db(transaction=True)

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "dice-check"]
OUTCOME_WORDS = {"critical-success": "makes it look easy", "success": "manages it", "failure": "does not go the way",
                 "critical-failure": "goes badly wrong"}


def _checks(session_id: str, count: int, seconds: float = 15) -> dict:
    """The recorder's rows once its event jobs finished (none may still run when the test ends)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = plugin_data(session_id, "dice-check", "checks")
        running = RuntimeJob.objects.filter(session_id=session_id, status__in=("queued", "running")).exists()
        if len(rows) >= count and not running:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"the recorder wrote {len(plugin_data(session_id, 'dice-check', 'checks'))} checks")


def _rpc(client, played, payload):
    return client.post(f"/api/sessions/{played.id}/plugin-rpc", json.dumps(
        {"kind": "action", "pluginId": "dice-check", "action": "roll", "payload": payload}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {played.token}")


def test_a_risky_act_is_settled_by_the_pool(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, kind="act", name="Ada Quill",
                       says=["I climb the iron ladder to the lamp room.", "I look around the gallery."])
    assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
    assert completed(played, "dice-check/roller") == ["success"] * 3
    pool = plugin_data(played.id, "dice-check", "rolls")
    assert all(len(v["dice"]) == 3 and all(1 <= d <= 20 for d in v["dice"]) for v in pool.values())
    # the narrator read the pool, and emitted one receipt on the risky turn only
    context = [c for c in played.model_calls(2) if c["runtimeId"] == "narrator"][0]
    assert "#1 = {}".format(pool["turn-1"]["dice"][0]) in json.dumps(context["messages"], ensure_ascii=False)
    emitted = [(i, f["payload"]["input"]) for i in range(len(played.streams))
               for f in played.frames("tool.calling", i) if f["payload"]["tool"] == "emit-event"]
    assert [i for i, _ in emitted] == [2], emitted
    [item] = emitted[0][1]["data"]["checks"]
    assert set(item) >= {"action", "modifier", "difficulty", "outcome"} and "roll" not in item
    [check] = _checks(played.id, 1).values()
    assert check["roll"] == pool["turn-1"]["dice"][0] and check["dc"] == 12
    assert check["outcome"] == item["outcome"] and "claimed" not in check
    prose = [f["payload"]["text"] for f in played.frames("narrative.completed", 2)][0]
    assert OUTCOME_WORDS[check["outcome"]] in prose
    message = plugin_data(played.id, "dice-check", "message")
    assert message["turn-1"]["checks"][0]["notation"].startswith("d20 ")
    # the player's own roll
    rolled = _rpc(client, played, {"notation": "2d6"})
    assert rolled.status_code == 200, rolled.content
    result = rolled.json()["result"]
    assert len(result["dice"]) == 2 and all(1 <= d <= 6 for d in result["dice"]) and result["total"] == sum(result["dice"])
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "dice-check" for s in g["specs"]] == ["dice-check.panel"]
    bad = _rpc(client, played, {"notation": "lots"})
    assert bad.status_code == 200 and bad.json()["result"]["code"] == "invalid-input"


def test_zh_receipt(client):
    played = play_with(client, "yanhui-ferry", PLUGINS, kind="act", name="林照", says=["我撬开船舱的木门。"])
    assert not failed_runtimes(played)
    [check] = _checks(played.id, 1).values()
    assert check["outcomeLabel"] in ("大成功", "成功", "失败", "大失败")
