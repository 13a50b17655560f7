"""npc-graph: upsert-npc-graph by name (dedupe, word ids, a changed relationship closes its old
version), list-npc-graph, and sessions where the scripted extractor records the people the
story's facts name and the retriever hands the narrator their graph when the player names them."""
from __future__ import annotations

import pytest

from plugins_app.toolkit import CharacterRecord
from tests.plugins_app.builtin.catalogue_support import completed, failed_runtimes, play_with, plugin_data
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.support import error_of, payloads
from turns.engine.tools.context import InMemoryStateView

PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "world-ir", "npc-graph"]
EDGE = {"sourceName": "Nell Marrick", "targetName": "Ada Quill", "relation": "TRUSTS", "strength": 0.5,
        "fact": "Nell Marrick trusts Ada Quill with her father's logbook."}


def _state(nodes=None, edges=None) -> InMemoryStateView:
    return InMemoryStateView(characters=[CharacterRecord(id="player-ada", name="Ada Quill", type="player")],
                             plugin_data={("npc-graph", "nodes"): nodes or {}, ("npc-graph", "edges"): edges or {}})


def _rows(outcome) -> dict:
    [batch] = payloads(outcome, "plugin.data.batch")
    return {(e["namespace"], e["key"]): e["value"] for e in batch["entries"]}


def test_upsert_by_name_and_versioned_edges(run_tool):
    first = run_tool("npc-graph", "upsert-npc-graph", {"nodes": [
        {"name": "Nell Marrick", "type": "individual", "summary": "The keeper's daughter."},
        {"name": "Ada Quill", "type": "individual"}], "edges": [EDGE]}, _state())
    assert first.status == "success", first.envelope
    rows = _rows(first)
    nodes = {k: v for (ns, k), v in rows.items() if ns == "nodes"}
    edges = {k: v for (ns, k), v in rows.items() if ns == "edges"}
    assert sorted(nodes) == ["npc-ada-quill", "npc-nell-marrick"]
    [(edge_key, edge)] = edges.items()
    assert (edge["source"], edge["target"], edge["validAt"]) == ("npc-nell-marrick", "npc-ada-quill", 3)
    # the same tie unchanged is skipped; a changed one closes the old version and opens a new one
    same = run_tool("npc-graph", "upsert-npc-graph", {"edges": [EDGE]}, _state(nodes, edges))
    assert not payloads(same, "plugin.data.batch") and same.content["edges"] == []
    moved = run_tool("npc-graph", "upsert-npc-graph", {"edges": [{**EDGE, "strength": -0.4,
                     "fact": "Nell Marrick no longer trusts Ada Quill since the logbook went missing."}]}, _state(nodes, edges), turn=5)
    changed = _rows(moved)
    assert changed[("edges", edge_key)]["invalidAt"] == 5 and moved.content["closed"] == [edge_key]
    assert [e["strength"] for e in moved.content["edges"]] == [-0.4]
    code, message = error_of(run_tool("npc-graph", "upsert-npc-graph", {"edges": [{**EDGE, "targetName": "Ghost"}]}, _state(nodes, edges)))
    assert code == "invalid-input" and "Ghost" in message
    listed = run_tool("npc-graph", "list-npc-graph", {"name": "Nell Marrick"}, _state(nodes, edges))
    assert [e["fact"] for e in listed.content["edges"]] == [EDGE["fact"]]


@pytest.mark.django_db(transaction=True)
def test_the_story_people_reach_the_graph_and_come_back(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, name="Ada Quill",
                       says=["Nell, where did your father go?", "Nell, tell me about the green light."])
    assert not failed_runtimes(played) and not played.created.get("unmetRequirements")
    assert set(completed(played, "npc-graph/extractor")) <= {"success"}
    nodes = plugin_data(played.id, "npc-graph", "nodes")
    names = {v["name"] for v in nodes.values()}
    assert {"Nell Marrick", "Ada Quill"} <= names and all(k.startswith("npc-") for k in nodes)
    assert len(names) == len(nodes)  # nobody recorded twice across turns
    retrieved = [f["payload"] for f in played.frames("runtime.completed", 3) if f["payload"]["runtimeId"] == "npc-graph/rag-retriever"]
    assert retrieved and retrieved[0]["status"] == "success"
    narrator = [c for c in played.model_calls(3) if c["runtimeId"] == "narrator"][0]
    assert "People and relationships in play" in narrator["messages"][0]["content"]
    specs = get_json(client, played, f"/api/ui-specs?sessionId={played.id}")
    assert [s["id"] for g in specs["right"] if g["pluginId"] == "npc-graph" for s in g["specs"]] == ["npc-graph.panel"]


@pytest.mark.django_db(transaction=True)
def test_zh_session_records_people(client):
    played = play_with(client, "yanhui-ferry", PLUGINS, name="林照", says=["船家，昨夜渡口出了什么事？"])
    assert not failed_runtimes(played)
    assert len(plugin_data(played.id, "npc-graph", "nodes")) >= 2
