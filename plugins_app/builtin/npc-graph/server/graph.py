"""The relationship graph's records and pure operations (the tools, the retriever, the script).

nodes/<id> `{id, name, type, summary?, aliases?, attributes?, turn}`; edges/<id> `{id, source,
target, relation, strength, fact, validAt, invalidAt?}` (validAt / invalidAt = session turns);
index/<nodeId> = edge ids touching the node. An edge is open while it has no `invalidAt`.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from typing import Any

NODES, EDGES, INDEX = "nodes", "edges", "index"
NODE_TYPES = ("individual", "group", "faction")
MAX_NODES, MAX_EDGES = 8, 12
CONTEXT_LIMIT = 20
RELATION_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")


def norm(text: Any) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(text or "")).casefold().split())


def node_named(nodes: dict[str, Any], name: str) -> str | None:
    """The id of the node whose name or alias is ``name`` (normalized), else None."""
    target = norm(name)
    for key, node in nodes.items():
        if isinstance(node, dict) and (norm(node.get("name")) == target or target in {norm(a) for a in node.get("aliases") or []}):
            return key
    return None


def open_edges(edges: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in edges.items() if isinstance(v, dict) and v.get("invalidAt") is None}


def current_edge(edges: dict[str, Any], source: str, target: str, relation: str) -> str | None:
    for key, edge in open_edges(edges).items():
        if (edge.get("source"), edge.get("target"), edge.get("relation")) == (source, target, relation):
            return key
    return None


def edge_id(source: str, target: str, relation: str, taken: set[str]) -> str:
    base = f"{source}--{relation.lower().replace('_', '-')}--{target}"[:120]
    key, n = base, 2
    while key in taken:
        key, n = f"{base}-v{n}", n + 1
    return key


def matched(nodes: dict[str, Any], text: str, names: list[str] | None = None) -> list[str]:
    """Node ids whose complete name or alias occurs in ``text`` (else equals one of ``names``)."""
    low = norm(text)
    hits = []
    for key, node in nodes.items():
        if not isinstance(node, dict):
            continue
        labels = [node.get("name"), *(node.get("aliases") or [])]
        if any(norm(label) and norm(label) in low for label in labels):
            hits.append(key)
    if not hits and names:
        wanted = {norm(n) for n in names}
        hits = [key for key, node in nodes.items() if isinstance(node, dict)
                and any(norm(label) in wanted for label in [node.get("name"), *(node.get("aliases") or [])])]
    return hits


def neighbourhood(start: list[str], edges: dict[str, Any], hops: int = 2) -> list[dict[str, Any]]:
    """Open edges within ``hops`` of ``start`` (breadth first over open edges only), newest first,
    then by |strength|, at most CONTEXT_LIMIT."""
    live = open_edges(edges)
    touching: dict[str, list[str]] = {}
    for key, edge in live.items():
        for end in (edge.get("source"), edge.get("target")):
            touching.setdefault(end, []).append(key)
    seen_nodes = set(start)
    found: dict[str, dict[str, Any]] = {}
    queue = deque((n, 0) for n in start)
    while queue:
        node, depth = queue.popleft()
        if depth >= hops:
            continue
        for key in touching.get(node, []):
            edge = live[key]
            found[key] = edge
            other = edge["target"] if edge.get("source") == node else edge.get("source")
            if other not in seen_nodes:
                seen_nodes.add(other)
                queue.append((other, depth + 1))
    ranked = sorted(found.values(), key=lambda e: (-int(e.get("validAt") or 0), -abs(float(e.get("strength") or 0))))
    return ranked[:CONTEXT_LIMIT]
