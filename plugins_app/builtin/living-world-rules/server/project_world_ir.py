"""Projection `rules-from-world-ir`: WorldIR `rule` statements as world rules (pure function; the
host runs it over a world's `contract:world-ir@1` data when a session is created,
sessions.world_data_projections)."""

from __future__ import annotations

import hashlib
from typing import Any


def project(facts: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """`{rules: [rule]}` for the `type: rule` statements of one WorldIR object; rule id
    `world-ir-<first 16 hex of sha256(statement id)>`, `sourceStatementId` the original id."""
    out = []
    for statement in (facts or {}).get("statements") or []:
        if not isinstance(statement, dict) or statement.get("type") != "rule" or not str(statement.get("content") or "").strip():
            continue
        sid = str(statement.get("id") or "")
        out.append({"schemaVersion": 1, "id": "world-ir-" + hashlib.sha256(sid.encode("utf-8")).hexdigest()[:16],
                    "sourceStatementId": sid, "content": statement["content"].strip(), "kind": "constant", "category": "world"})
    return {"rules": out}


def handle(facts: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return project(facts)
