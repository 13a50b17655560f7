"""upsert-npc-graph and list-npc-graph (spec 000: nodes and edges by name; ids made by the tool).

upsert-npc-graph `{nodes?: [{name, type, summary?, aliases?, attributes?}] ≤ 8, edges?: [{sourceName,
targetName, relation, strength, fact}] ≤ 12}`: nodes are matched by normalized name or alias (a
known node gains the new summary, aliases and attributes; a new one gets `wordId("npc", name)`);
every edge end must name a node recorded or created in this call. An open edge with the same ends
and relation and the same strength and fact is skipped; a changed one is closed (`invalidAt` = this
turn) and a new version opened. Reads include earlier calls of the same execution (the staged
view), so repeated calls never duplicate. Writes: one `plugin.data.batch` (nodes, edges, index).
list-npc-graph `{name?}`: the nodes and open edges (around ``name`` when given, two hops).
"""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import (INVALID_INPUT, PLUGIN_DATA_BATCH, ZH_CN, CallContext, Proposal, Tool, ToolError, ToolResult,
                                 instruction_locale_for, tool, word_id)

from . import graph

UPSERT, LIST = "upsert-npc-graph", "list-npc-graph"

UPSERT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "nodes": {"type": "array", "maxItems": graph.MAX_NODES, "items": {
            "type": "object", "required": ["name", "type"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 120},
                           "type": {"enum": list(graph.NODE_TYPES)},
                           "summary": {"type": "string", "maxLength": 400},
                           "aliases": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 8},
                           "attributes": {"type": "object"}}}},
        "edges": {"type": "array", "maxItems": graph.MAX_EDGES, "items": {
            "type": "object", "required": ["sourceName", "targetName", "relation", "strength", "fact"], "additionalProperties": False,
            "properties": {"sourceName": {"type": "string", "minLength": 1}, "targetName": {"type": "string", "minLength": 1},
                           "relation": {"type": "string", "pattern": graph.RELATION_RE.pattern},
                           "strength": {"type": "number", "minimum": -1, "maximum": 1},
                           "fact": {"type": "string", "minLength": 8, "maxLength": 400}}}},
    },
    "additionalProperties": False,
}
LIST_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}


def _fail(message: str) -> ToolError:
    return ToolError(INVALID_INPUT, message, hint=f"Fix only the named entry and call {UPSERT} again.")


def upsert(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    turn = int(ctx.logical_turn or 0)
    nodes = {k: v for k, v in ctx.state.plugin_data_list(ctx.plugin_id, graph.NODES).items() if isinstance(v, dict)}
    edges = {k: v for k, v in ctx.state.plugin_data_list(ctx.plugin_id, graph.EDGES).items() if isinstance(v, dict)}
    index = {k: list(v) for k, v in ctx.state.plugin_data_list(ctx.plugin_id, graph.INDEX).items() if isinstance(v, list)}
    if not args.get("nodes") and not args.get("edges"):
        raise _fail("nodes/edges: nothing to record; call runtime-done instead when nothing changed")
    writes: dict[tuple[str, str], Any] = {}
    created, updated, opened, closed = [], [], [], []
    for n, item in enumerate(args.get("nodes") or []):
        key = graph.node_named(nodes, item["name"])
        if key is None:
            key = word_id("npc", item["name"], set(nodes))
            node = {"id": key, "name": item["name"].strip(), "type": item["type"]}
            created.append(key)
        else:
            node = dict(nodes[key])
            updated.append(key)
        if item.get("summary"):
            node["summary"] = item["summary"].strip()
        aliases = [a for a in dict.fromkeys([*(node.get("aliases") or []), *(item.get("aliases") or [])]) if graph.norm(a) != graph.norm(node["name"])]
        if aliases:
            node["aliases"] = aliases
        if item.get("attributes"):
            node["attributes"] = {**(node.get("attributes") or {}), **item["attributes"]}
        node["turn"] = turn
        nodes[key] = node
        writes[(graph.NODES, key)] = node
    for n, item in enumerate(args.get("edges") or []):
        ends = []
        for field in ("sourceName", "targetName"):
            key = graph.node_named(nodes, item[field])
            if key is None:
                raise _fail(f"edges[{n}].{field}: {item[field]!r} is neither a recorded node nor one of this call's nodes")
            ends.append(key)
        source, target = ends
        if source == target:
            raise _fail(f"edges[{n}]: sourceName and targetName are the same node")
        current = graph.current_edge(edges, source, target, item["relation"])
        if current is not None:
            old = edges[current]
            if abs(float(old.get("strength") or 0) - float(item["strength"])) < 1e-9 and graph.norm(old.get("fact")) == graph.norm(item["fact"]):
                continue
            edges[current] = {**old, "invalidAt": turn}
            writes[(graph.EDGES, current)] = edges[current]
            closed.append(current)
        key = graph.edge_id(source, target, item["relation"], set(edges))
        edge = {"id": key, "source": source, "target": target, "relation": item["relation"], "strength": item["strength"],
                "fact": item["fact"].strip(), "validAt": turn}
        edges[key] = edge
        writes[(graph.EDGES, key)] = edge
        opened.append(key)
        for end in ends:
            index.setdefault(end, [])
            if key not in index[end]:
                index[end].append(key)
                writes[(graph.INDEX, end)] = index[end]
    entries = [{"namespace": ns, "key": key, "value": value} for (ns, key), value in writes.items()]
    proposals = [Proposal(PLUGIN_DATA_BATCH, {"entries": entries})] if entries else []
    content = {"nodes": [nodes[k] for k in dict.fromkeys(created + updated)], "edges": [edges[k] for k in opened], "closed": closed}
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    summary = (f"关系图谱：新增节点 {len(created)}，更新 {len(updated)}，新关系 {len(opened)}，关闭旧版本 {len(closed)}。" if zh else
               f"Graph: {len(created)} new nodes, {len(updated)} updated, {len(opened)} relationships recorded, {len(closed)} superseded.")
    return ToolResult(content=content, proposals=proposals, summary=summary)


def list_graph(args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    nodes = {k: v for k, v in ctx.state.plugin_data_list(ctx.plugin_id, graph.NODES).items() if isinstance(v, dict)}
    edges = ctx.state.plugin_data_list(ctx.plugin_id, graph.EDGES)
    name = (args or {}).get("name")
    if name:
        start = graph.matched(nodes, "", [name])
        found = graph.neighbourhood(start, edges)
        ids = set(start) | {e["source"] for e in found} | {e["target"] for e in found}
        return {"nodes": [nodes[k] for k in nodes if k in ids], "edges": found}
    return {"nodes": list(nodes.values()), "edges": list(graph.open_edges(edges).values())}


def build() -> list[Tool]:
    return [
        tool(name=UPSERT, description="Record people/groups/factions and their relationships by name in one batch "
                                      "(≤8 nodes, ≤12 edges); a changed relationship closes its old version.",
             parameters=UPSERT_PARAMETERS, execute=upsert),
        tool(name=LIST, description="List the relationship graph (around one name, two hops, when given).",
             parameters=LIST_PARAMETERS, execute=list_graph, annotations={"readOnly": True, "idempotent": True, "concurrencySafe": True}),
    ]
