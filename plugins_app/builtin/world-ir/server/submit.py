"""submit-world-facts: this turn's facts in the WorldIR v1 shape (contract world-ir@1, the
runtime's output world-ir-provider@1).

The arguments are checked beyond their JSON Schema: ids unique within the call; every reference
(relation from/to, participantIds, subjectIds, inventory holder/item) names an id of this call
or a roster character; `inventory_change` and `quest_change` events carry their fixed attributes.
Roster characters that are referenced but not listed are added as `character` entities (id and
name from the roster). `schemaVersion` defaults to 1. The result content is the WorldIR object
itself: the runtime's world-ir-provider@1 output, which the turn's result, its runtime output and
its trace (the tool call) keep. No copy is kept in plugin data (issue 18: a per-turn copy nothing
read, written and pruned every turn and carried by every session view).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from plugins_app.toolkit import (
    INVALID_INPUT,
    ZH_CN,
    CallContext,
    Tool,
    ToolError,
    ToolResult,
    instruction_locale_for,
    tool,
)

NAME = "submit-world-facts"
INVENTORY_OPERATIONS = ("gain", "lose", "equip", "unequip")
QUEST_STATUSES = ("accepted", "progressed", "completed", "failed")
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "world-ir.schema.json"


def _parameters() -> dict[str, Any]:
    """The contract schema as tool parameters (schemaVersion optional: the tool supplies it)."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    schema.pop("$schema", None)
    schema.pop("$id", None)
    schema["required"] = [r for r in schema["required"] if r != "schemaVersion"]
    schema["definitions"]["event"]["properties"]["attributes"] = {
        "type": "object",
        "additionalProperties": True,
        "description": "inventory_change: {item, holder, operation: gain|lose|equip|unequip, quantity?}; "
                       "quest_change: {quest, status: accepted|progressed|completed|failed, objectives?, completedObjectives?, giver?, reward?}",
    }
    return schema


PARAMETERS = _parameters()


def _fail(message: str) -> ToolError:
    return ToolError(INVALID_INPUT, message, hint=f"Fix only the named field and call {NAME} again.")


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def facts_check(args: dict[str, Any], roster: dict[str, str]) -> dict[str, Any]:
    """The WorldIR object of valid arguments (roster references declared); raises ToolError."""
    facts = copy.deepcopy(args)
    facts["schemaVersion"] = 1
    for field in ("entities", "relations", "events", "statements"):
        facts.setdefault(field, [])
    seen: dict[str, str] = {}
    for field in ("entities", "relations", "events", "statements"):
        for index, item in enumerate(facts[field]):
            item_id = item["id"].strip()
            if item_id in seen:
                raise _fail(f"{field}[{index}].id: {item_id!r} is already used by {seen[item_id]}; ids are unique in one call")
            seen[item_id] = f"{field}[{index}]"
    entity_types = {e["id"]: e["type"] for e in facts["entities"]}
    known = set(entity_types) | set(roster)
    referenced: list[str] = []

    def ref(where: str, value: Any) -> None:
        if not isinstance(value, str) or value not in known:
            raise _fail(f"{where}: {value!r} is neither an entity id of this call nor a roster character id")
        referenced.append(value)

    for index, relation in enumerate(facts["relations"]):
        ref(f"relations[{index}].from", relation["from"])
        ref(f"relations[{index}].to", relation["to"])
    for index, event in enumerate(facts["events"]):
        for n, pid in enumerate(event.get("participantIds") or []):
            ref(f"events[{index}].participantIds[{n}]", pid)
        attrs = event.get("attributes") or {}
        if event["type"] == "inventory_change":
            item = attrs.get("item")
            if entity_types.get(item) != "item":
                raise _fail(f"events[{index}].attributes.item: {item!r} must be the id of a type \"item\" entity in this call")
            ref(f"events[{index}].attributes.holder", attrs.get("holder"))
            if attrs.get("operation") not in INVENTORY_OPERATIONS:
                raise _fail(f"events[{index}].attributes.operation: must be one of {', '.join(INVENTORY_OPERATIONS)}")
            quantity = attrs.get("quantity")
            if quantity is not None and (not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1):
                raise _fail(f"events[{index}].attributes.quantity: a positive integer, or leave it out")
        elif event["type"] == "quest_change":
            if not isinstance(attrs.get("quest"), str) or not attrs["quest"].strip():
                raise _fail(f"events[{index}].attributes.quest: the quest's name is required")
            if attrs.get("status") not in QUEST_STATUSES:
                raise _fail(f"events[{index}].attributes.status: must be one of {', '.join(QUEST_STATUSES)}")
            for key in ("objectives", "completedObjectives"):
                if key in attrs and not _strings(attrs[key]):
                    raise _fail(f"events[{index}].attributes.{key}: a list of non-empty strings")
    for index, statement in enumerate(facts["statements"]):
        for n, sid in enumerate(statement.get("subjectIds") or []):
            ref(f"statements[{index}].subjectIds[{n}]", sid)
    for cid in dict.fromkeys(referenced):
        if cid in roster and cid not in entity_types:
            facts["entities"].append({"id": cid, "type": "character", "name": roster[cid]})
            entity_types[cid] = "character"
    if len(facts["entities"]) > 32:
        raise _fail("entities: at most 32, roster characters referenced included; keep only what matters downstream")
    return facts


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    roster = {c.id: c.name for c in ctx.state.characters()}
    facts = facts_check(args, roster)
    counts = [len(facts[k]) for k in ("entities", "relations", "events", "statements")]
    if instruction_locale_for(ctx.locale) == ZH_CN:
        summary = "事实已提交：实体 {}，关系 {}，事件 {}，陈述 {}。".format(*counts)
    else:
        summary = "Facts submitted: {} entities, {} relations, {} events, {} statements.".format(*counts)
    return ToolResult(content=facts, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description="Submit this turn's facts once (WorldIR v1): entities, relations, events, statements. "
                    "Roster characters are referenced by id; item and quest changes use inventory_change / quest_change events.",
        parameters=PARAMETERS,
        execute=_execute,
    )
