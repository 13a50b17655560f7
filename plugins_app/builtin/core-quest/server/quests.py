"""The quest log's records and the pure operations on them (shared by the log and the vocabulary).

A record is `{id, name, description, status: active|completed|failed, objectives: [{id?, text,
done}], giver?, reward?, turn?}` (schemas/quests.schema.json, contract quests@1). A world package's
seed can arrive as one plugin-data row holding the whole list (key = its source id); `expand`
treats its items as records of their own and the first write splits it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NAMESPACE = "quests"
VOCABULARY_LIMIT = 30
DETAILS_LIMIT = 12
STATUSES = ("active", "completed", "failed")
#: WorldIR quest_change status → what it does to the log.
SIGNALS = ("accepted", "progressed", "completed", "failed")


def expand(rows: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(records by quest id, keys of rows that hold a seeded list)."""
    records: dict[str, dict[str, Any]] = {}
    seeded: list[str] = []
    for key, value in rows.items():
        if isinstance(value, list):
            seeded.append(key)
            for item in value:
                if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"] not in rows:
                    records.setdefault(item["id"], dict(item))
        elif isinstance(value, dict) and value.get("name"):
            records[key] = value
    return records, seeded


def norm(text: Any) -> str:
    """Case-, width- and punctuation-folded text for name and objective matching."""
    text = unicodedata.normalize("NFKC", str(text or "")).casefold()
    text = re.sub(r"^(?:the|a|an)\s+", "", text.strip())
    text = re.sub(r"[\s\"'“”‘’「」『』《》.,;:!?，。；：！？、()（）\-–—]+", " ", text)
    return " ".join(text.split())


def resolve(records: dict[str, dict[str, Any]], name: str) -> str | None:
    """The id of the quest called ``name``: same normalized name or id, else the only quest whose
    name contains it or is contained in it; None when nothing or more than one matches."""
    target = norm(name)
    if not target:
        return None
    for key, record in records.items():
        if norm(record.get("name")) == target or norm(key) == target:
            return key
    partial = [key for key, record in records.items()
               if (n := norm(record.get("name"))) and (target in n or n in target)]
    return partial[0] if len(partial) == 1 else None


def quest_id(name: str, taken: set[str]) -> str:
    """An id for a new quest: its ASCII words joined by hyphens, else `quest-<n>` (CJK names)."""
    base = "-".join(re.findall(r"[a-z0-9]+", norm(name)))[:60].strip("-") or f"quest-{len(taken) + 1}"
    key, n = base, 2
    while key in taken:
        key, n = f"{base}-{n}", n + 1
    return key


def _objective_index(objectives: list[dict[str, Any]], text: str) -> int | None:
    target = norm(text)
    for index, objective in enumerate(objectives):
        if norm(objective.get("text")) == target or norm(objective.get("id")) == target:
            return index
    partial = [i for i, o in enumerate(objectives) if (n := norm(o.get("text"))) and target and (target in n or n in target)]
    return partial[0] if len(partial) == 1 else None


def _texts(value: Any) -> list[str]:
    return [v.strip() for v in value if isinstance(v, str) and v.strip()] if isinstance(value, list) else []


def apply(record: dict[str, Any], attrs: dict[str, Any], turn: int | None) -> tuple[dict[str, Any], list[str]]:
    """(record after one quest_change, what changed as short tags). Tags: `objective+` (new
    objective), `objective-done`, `completed`, `failed`, `reopened`, `giver`, `reward`."""
    out = {**record, "objectives": [dict(o) for o in record.get("objectives") or [] if isinstance(o, dict)]}
    tags: list[str] = []
    for text in _texts(attrs.get("objectives")):
        if _objective_index(out["objectives"], text) is None:
            out["objectives"].append({"text": text, "done": False})
            tags.append("objective+")
    for text in _texts(attrs.get("completedObjectives")):
        index = _objective_index(out["objectives"], text)
        if index is None:
            out["objectives"].append({"text": text, "done": True})
            tags.append("objective-done")
        elif not out["objectives"][index].get("done"):
            out["objectives"][index]["done"] = True
            tags.append("objective-done")
    for key in ("giver", "reward"):
        if isinstance(attrs.get(key), str) and attrs[key].strip() and not out.get(key):
            out[key] = attrs[key].strip()
            tags.append(key)
    status = attrs.get("status")
    if status in ("completed", "failed") and out.get("status") != status:
        out["status"] = status
        tags.append(status)
    elif status == "accepted" and out.get("status") in ("completed", "failed"):
        out["status"] = "active"
        tags.append("reopened")
    elif out.get("status", "active") == "active" and out["objectives"] and all(o.get("done") for o in out["objectives"]) \
            and "objective-done" in tags:
        out["status"] = "completed"
        tags.append("completed")
    out.setdefault("status", "active")
    if tags and turn is not None:
        out["turn"] = turn
    return out, tags


def created(name: str, key: str, attrs: dict[str, Any], description: str, turn: int | None) -> dict[str, Any]:
    """A new active quest from an `accepted` event."""
    record: dict[str, Any] = {"id": key, "name": name, "description": description or name, "status": "active", "objectives": []}
    record, _ = apply(record, {**attrs, "status": None}, turn)
    if turn is not None:
        record["turn"] = turn
    return record


def active(records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Active quests, newest first (seeded ones last, in seed order)."""
    items = [r for r in records.values() if r.get("status", "active") == "active"]
    return sorted(items, key=lambda r: -int(r.get("turn") or 0))
