"""The bag's records and the pure operations on them (shared by the ledger, the vocabulary and
the panel actions). A record is `{id, name, quantity, description?, tags?, equipped?, turn?}`
(schemas/items.schema.json); quantity 0 is a tombstone: kept, not carried."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NAMESPACE = "items"
OPERATIONS = ("gain", "lose", "equip", "unequip")
VOCABULARY_LIMIT = 80


def expand(rows: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(records by item id, keys of seeded rows): a world package's opening gear can arrive as one
    row holding the whole list (its source id as key); its items count as records of their own."""
    records: dict[str, Any] = {}
    seeded: list[str] = []
    for key, value in rows.items():
        if isinstance(value, list):
            seeded.append(key)
            for item in value:
                if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"] not in rows:
                    records.setdefault(item["id"], dict(item))
        elif isinstance(value, dict):
            records[key] = value
    return records, seeded


def norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text or "")).casefold().strip()
    text = re.sub(r"^(?:the|a|an|some)\s+", "", text)
    return " ".join(text.split())


def item_id(name: str, taken: set[str]) -> str:
    """An id for a new item: its ASCII words joined by hyphens, else `item-<n>` (CJK names)."""
    words = re.findall(r"[a-z0-9]+", norm(name))
    base = "-".join(words)[:60].strip("-") or f"item-{len(taken) + 1}"
    key, n = base, 2
    while key in taken:
        key, n = f"{base}-{n}", n + 1
    return key


def find(rows: dict[str, Any], name: str, wanted_id: str | None = None) -> str | None:
    """The key of the record named ``name`` (or with id ``wanted_id``), else None."""
    if wanted_id and wanted_id in rows:
        return wanted_id
    target = norm(name)
    for key, value in rows.items():
        if isinstance(value, dict) and (norm(value.get("name", "")) == target or norm(key) == target):
            return key
    return None


def carried(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Records with quantity above 0, equipped first, then by name."""
    items = [v for v in rows.values() if isinstance(v, dict) and int(v.get("quantity") or 0) > 0]
    return sorted(items, key=lambda v: (not v.get("equipped"), norm(v.get("name", ""))))


def apply(record: dict[str, Any] | None, *, key: str, name: str, operation: str, quantity: int, turn: int | None) -> dict[str, Any]:
    """The record after one change (a new one for an unknown item)."""
    out = dict(record) if record else {"id": key, "name": name, "quantity": 0}
    have = int(out.get("quantity") or 0)
    if operation == "gain":
        out["quantity"] = have + quantity
    elif operation == "lose":
        out["quantity"] = max(0, have - quantity)
        if out["quantity"] == 0:
            out["equipped"] = False
    elif operation == "equip":
        out["quantity"] = max(have, 1)
        out["equipped"] = True
    elif operation == "unequip":
        out["equipped"] = False
    if turn is not None:
        out["turn"] = turn
    return out
