"""npc-graph/rag-retriever function runtime (pre-turn): graph-rag@1 for the people the player's
words name (else the scene's current cast): two hops of open relationships as a markdown list."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import ZH_CN, instruction_locale_for

from . import graph


def _cast_names(value: Any) -> list[str]:
    out = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            out.extend(str(n) for n in [item.get("name"), *(item.get("aliases") or [])] if n)
    return out


def handle(ctx) -> dict[str, Any]:
    nodes = {k: v for k, v in ctx.plugin_data.list(graph.NODES).items() if isinstance(v, dict)}
    edges = ctx.plugin_data.list(graph.EDGES)
    start = graph.matched(nodes, str(ctx.player_message or ""), _cast_names(ctx.inputs.get("currentCast")))
    if not nodes or not start:
        return {"npcContext": "", "matchedNodes": [], "edgeCount": 0}
    found = graph.neighbourhood(start, edges)
    zh = instruction_locale_for(ctx.locale) == ZH_CN
    lines = ["## 相关人物与关系" if zh else "## People and relationships in play"]
    for key in start:
        node = nodes[key]
        lines.append(f"- {node['name']}" + (f"：{node['summary']}" if zh and node.get("summary") else f": {node['summary']}" if node.get("summary") else ""))
    for edge in found:
        lines.append(f"- {edge['fact']} ({edge['relation']}, {float(edge['strength']):+.1f})")
    return {"npcContext": "\n".join(lines), "matchedNodes": [nodes[k]["name"] for k in start], "edgeCount": len(found)}
