"""living-world-rules: world rules imported with `+lorebook` reach the rules namespace and the
lorebook (a constant rule is in the narrator's prompt), the manual runtime saves a session rule as
a lorebook entry over plugin-rpc, a bad rule fails without writing, and the list-rules action."""
from __future__ import annotations

import json
import shutil

import pytest

from sessions.models import LorebookEntry
from tests.plugins_app.builtin.catalogue_support import failed_runtimes, play_with, plugin_data
from tests.plugins_app.builtin.catalogue_worlds import world_variant
from tests.plugins_app.builtin.play_support import get_json

pytestmark = pytest.mark.django_db(transaction=True)

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "living-world-rules"]
RULES = [{"schemaVersion": 1, "id": "lamp-oath", "title": "The lamp oath", "kind": "constant", "category": "world",
          "content": "A keeper who lets the lamp go dark may never hold a post on this coast again.",
          "coordinate": {"position": "before_plugin"}}]


@pytest.fixture
def rules_world():
    target = world_variant("reach-rules", files={"data/rules/world-rules.yaml": RULES}, sources={
        "rules": {"kind": "yaml", "path": "data/rules/world-rules.yaml", "schema": "contract:world.rules@1",
                  "to": "contract:world.rules@1+lorebook", "key": "id", "after": "dimensions"}})
    yield "reach-rules"
    shutil.rmtree(target, ignore_errors=True)


def _rpc(client, played, body):
    return client.post(f"/api/sessions/{played.id}/plugin-rpc", json.dumps({"pluginId": "living-world-rules", **body}),
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {played.token}")


def test_world_rules_and_a_session_rule(client, rules_world):
    played = play_with(client, rules_world, PLUGINS, name="Ada Quill", says=["Nell, what happens to a keeper who fails?"])
    assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
    assert not [n for n in played.created.get("worldDataNotices") or [] if n.get("sourceId") == "rules"]
    assert [r["id"] for r in _rpc(client, played, {"kind": "action", "action": "list-rules"}).json()["result"]["rules"]] == ["lamp-oath"]
    narrator = [f["payload"] for f in played.frames("llm.calling", 2) if f["payload"]["runtimeId"] == "narrator"][0]
    assert "may never hold a post on this coast" in json.dumps(narrator["messages"], ensure_ascii=False)
    # a rule saved during play
    rule = {"schemaVersion": 1, "id": "no-names-at-sea", "kind": "triggered", "keys": ["boat", "sea"],
            "content": "Nobody speaks a drowned sailor's name while on the water."}
    saved = _rpc(client, played, {"kind": "runtime", "runtimeId": "living-world-rules", "payload": {"ruleJson": json.dumps(rule)}})
    assert saved.status_code == 200, saved.content
    entry = LorebookEntry.objects.get(session_id=played.id, entry_id="world-rule-no-names-at-sea")
    assert entry.content == rule["content"] and entry.strategy == "selective" and entry.keys == ["boat", "sea"]
    assert plugin_data(played.id, "living-world-rules", "rules")["no-names-at-sea"]["lorebookEntryId"] == entry.entry_id
    bad = _rpc(client, played, {"kind": "runtime", "runtimeId": "living-world-rules", "payload": {"ruleJson": '{"id": "x y"}'}})
    [result] = bad.json()["runtimeResults"]
    assert result["status"] == "failed" and "content" in json.dumps(result), result
    assert "x y" not in plugin_data(played.id, "living-world-rules", "rules")
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "living-world-rules" for s in g["specs"]] == ["living-world-rules.panel"]


def test_zh_session_saves_a_rule(client):
    played = play_with(client, "yanhui-ferry", PLUGINS, name="林照", says=["我四下看看。"])
    rule = {"schemaVersion": 1, "id": "ferry-toll", "content": "过渡口必须先付船钱，赊账的人会被记在船家的账上。"}
    saved = _rpc(client, played, {"kind": "runtime", "runtimeId": "living-world-rules", "payload": {"ruleJson": rule}})
    assert saved.status_code == 200, saved.content
    assert LorebookEntry.objects.get(session_id=played.id, entry_id="world-rule-ferry-toll").strategy == "constant"
    assert not failed_runtimes(played)
