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
    narrator = [c for c in played.model_calls(2) if c["runtimeId"] == "narrator"][0]
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


FACTS = {"schemaVersion": 1, "summary": "The reach's standing laws.", "entities": [], "relations": [], "events": [],
         "statements": [
             {"id": "lamp-law", "type": "rule", "content": "Whoever tends the lamp may not leave it before dawn."},
             {"id": "gull-rumour", "type": "belief", "content": "Gulls carry the drowned men's voices."},
             {"id": "律-潮", "type": "rule", "content": "No boat leaves the quay against the flood tide."}]}


@pytest.fixture
def world_ir_world(request):
    target = world_variant("reach-facts", files={"data/facts/reach.yaml": FACTS}, sources={
        "facts": {"kind": "yaml", "path": "data/facts/reach.yaml", "to": "contract:world-ir@1", "after": "dimensions"}})
    request.node.world_dir = target
    yield "reach-facts"
    shutil.rmtree(target, ignore_errors=True)


def test_the_world_ir_projection_turns_a_worlds_rule_statements_into_rules(client, world_ir_world):
    import hashlib

    # given a world shipping WorldIR facts (contract:world-ir@1) that no data namespace accepts
    # when a session is created with living-world-rules (its projection rules-from-world-ir reads world-ir@1)
    played = play_with(client, world_ir_world, PLUGINS, name="Ada Quill", says=["What are the laws here?"])
    # then the two rule statements became rules keyed world-ir-<sha256(statement id)>, the belief did not
    rules = plugin_data(played.id, "living-world-rules", "rules")
    expected = {"world-ir-" + hashlib.sha256(sid.encode("utf-8")).hexdigest()[:16]: sid for sid in ("lamp-law", "律-潮")}
    assert set(rules) == set(expected)
    assert {rules[k]["sourceStatementId"] for k in expected} == {"lamp-law", "律-潮"}
    lamp = next(k for k, sid in expected.items() if sid == "lamp-law")
    assert rules[lamp]["content"] == "Whoever tends the lamp may not leave it before dawn."
    # and the projection counts as the source's receiver: no receiver-missing notice or unmet requirement
    assert not [n for n in played.created.get("worldDataNotices") or [] if n.get("sourceId") == "facts"], played.created
    assert not played.created.get("unmetRequirements") and not failed_runtimes(played)
    # the preflight does not run it and says so
    plan = client.post(f"/api/worlds/{world_ir_world}/world-data/preflight", json.dumps({"plugins": PLUGINS}),
                       content_type="application/json").json()
    assert [d["code"] for d in plan["diagnostics"] if d.get("sourceId") == "facts"] == ["projection-deferred"], plan


def test_without_the_projecting_plugin_the_world_ir_source_is_reported_unreceived(client, world_ir_world):
    played = play_with(client, world_ir_world, ["pregame", "world-init", "char-creator", "narrator"], name="Ada Quill",
                       says=["Hello."])
    assert [n["code"] for n in played.created.get("worldDataNotices") or [] if n.get("sourceId") == "facts"] == ["receiver-missing"]


def _rule_id(statement_id: str) -> str:
    import hashlib

    return "world-ir-" + hashlib.sha256(statement_id.encode("utf-8")).hexdigest()[:16]


def test_sync_data_reruns_the_projection_and_keeps_a_changed_rule(client, world_ir_world, request):
    import yaml

    played = play_with(client, world_ir_world, PLUGINS, name="Ada Quill", says=["Hello."])
    assert set(plugin_data(played.id, "living-world-rules", "rules")) == {_rule_id("lamp-law"), _rule_id("律-潮")}
    # the author rewrites one rule, drops the other and adds a third; meanwhile the game has not touched them
    facts = {**FACTS, "statements": [
        {"id": "律-潮", "type": "rule", "content": "No boat leaves the quay against the flood tide, not even the ferry."},
        {"id": "bell-law", "type": "rule", "content": "The harbour bell is rung only for the drowned."}]}
    (request.node.world_dir / "data" / "facts" / "reach.yaml").write_text(yaml.safe_dump(facts, allow_unicode=True), encoding="utf-8")
    sync = lambda body: client.post(f"/api/worlds/{world_ir_world}/sync-data", json.dumps({"sessionId": played.id, **body}),
                                    content_type="application/json")
    dry = sync({})
    assert dry.status_code == 200, dry.content
    assert (dry.json()["upserted"], dry.json()["deleted"], dry.json()["conflicts"]) == (2, 1, []), dry.json()
    assert set(plugin_data(played.id, "living-world-rules", "rules")) == {_rule_id("lamp-law"), _rule_id("律-潮")}  # a dry run
    applied = sync({"dryRun": False}).json()
    assert (applied["upserted"], applied["deleted"]) == (2, 1), applied
    rules = plugin_data(played.id, "living-world-rules", "rules")
    assert set(rules) == {_rule_id("律-潮"), _rule_id("bell-law")}
    assert rules[_rule_id("律-潮")]["content"].endswith("not even the ferry.")
    # a rule the game changed since is a conflict, not overwritten
    from plugins_app.models import PluginData

    row = PluginData.objects.get(session_id=played.id, plugin_id="living-world-rules", namespace="rules", key=_rule_id("bell-law"))
    row.value = {**row.value, "content": "Changed in play."}
    row.save()
    (request.node.world_dir / "data" / "facts" / "reach.yaml").write_text(yaml.safe_dump(FACTS, allow_unicode=True), encoding="utf-8")
    again = sync({"dryRun": False}).json()
    assert [c["reason"] for c in again["conflicts"]] == ["modified"] and again["conflicts"][0]["key"] == _rule_id("bell-law"), again
    assert plugin_data(played.id, "living-world-rules", "rules")[_rule_id("bell-law")]["content"] == "Changed in play."
