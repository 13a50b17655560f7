"""Offline `scripted` model behaviour of npc-graph/extractor: one upsert-npc-graph call from this
turn's WorldIR (runtime-inputs.worldIR), or runtime-done.

- nodes: the people, groups and factions of the facts (roster characters keep their roster name;
  summary = the first sentence of their roster description or the entity's description) that the
  `<existing-npcs>` block does not list yet;
- edges: the facts' `relations` between two such ends, with a sentence built from the relation's
  description (or its type) and a strength by type (TRUSTS/ALLY_OF/RESPECTS +0.6, OPPOSES/FEARS −0.6,
  others 0.2);
- nothing new → runtime-done. A refused call is not repeated (runtime-done).
Deterministic; nothing beyond the facts is invented.
"""

from __future__ import annotations

import json
import re
from typing import Any

NAME = "upsert-npc-graph"
PEOPLE = {"character": "individual", "person": "individual", "individual": "individual", "npc": "individual",
          "group": "group", "organization": "group", "faction": "faction"}
STRENGTH = {"TRUSTS": 0.6, "ALLY_OF": 0.6, "RESPECTS": 0.5, "OPPOSES": -0.6, "FEARS": -0.6, "COMPETES_WITH": -0.3}


def _facts(turn: dict[str, Any]) -> dict[str, Any]:
    value = (turn.get("inputs") or {}).get("worldIR")
    if isinstance(value, dict) and isinstance(value.get("value"), dict):
        value = value["value"]
    return value if isinstance(value, dict) else {}


def _recorded(turn: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for message in turn.get("messages") or []:
        content = str(message.get("content") or "")
        block = re.search(r"<existing-npcs>(.*?)(?:</existing-npcs>|$)", content, re.S)
        if block:
            names.update(n.casefold() for n in re.findall(r'"name":\s*"([^"]+)"', block.group(1)))
    return names


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?[.!?。！？])(\s|$)", " ".join(str(text or "").split()))
    return (match.group(1) if match else str(text or ""))[:300]


def upsert_args(turn: dict[str, Any]) -> dict[str, Any]:
    facts = _facts(turn)
    roster = {c.get("id"): c for c in turn.get("characters") or [] if c.get("id")}
    recorded = _recorded(turn)
    names: dict[str, str] = {}
    nodes: list[dict[str, Any]] = []
    for entity in facts.get("entities") or []:
        kind = PEOPLE.get(str(entity.get("type") or "").lower())
        if not kind or not entity.get("id"):
            continue
        person = roster.get(entity["id"]) or {}
        name = str(person.get("name") or entity.get("name") or "").strip()
        if not name:
            continue
        names[entity["id"]] = name
        if name.casefold() in recorded or any(n["name"] == name for n in nodes):
            continue
        node: dict[str, Any] = {"name": name, "type": kind}
        summary = _first_sentence(person.get("description") or entity.get("description") or "")
        if summary:
            node["summary"] = summary
        if person.get("aliases"):
            node["aliases"] = [a for a in person["aliases"] if isinstance(a, str) and a.strip()][:8]
        nodes.append(node)
    edges = []
    for relation in facts.get("relations") or []:
        source, target = names.get(relation.get("from")), names.get(relation.get("to"))
        kind = str(relation.get("type") or "")
        if not source or not target or source == target or not re.match(r"^[A-Z][A-Z0-9_]*$", kind):
            continue
        fact = str(relation.get("description") or f"{source} {kind.lower().replace('_', ' ')} {target}.").strip()
        edges.append({"sourceName": source, "targetName": target, "relation": kind,
                      "strength": STRENGTH.get(kind, 0.2), "fact": fact if len(fact) >= 8 else f"{fact} (recorded)"})
    out: dict[str, Any] = {}
    if nodes:
        out["nodes"] = nodes[:8]
    if edges:
        out["edges"] = edges[:12]
    return out


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    offered = [t["name"] for t in turn.get("tools") or []]
    if NAME not in offered:
        return None
    done = "runtime-done" in offered
    if turn.get("tool_results"):
        return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]} if done else {"text": ""}
    args = upsert_args(turn)
    if not args:
        return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]} if done else {"text": ""}
    return {"tool_calls": [{"name": NAME, "arguments": args}]}
