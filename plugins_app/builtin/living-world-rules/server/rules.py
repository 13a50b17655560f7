"""World rules (contract world.rules@1): reading the `rules` rows, checking one rule and its
lorebook entry. A row is a rule, a `{rule, lorebookEntryId?}` wrapper, or a world file's list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

NAMESPACE = "rules"
ENTRY_PREFIX = "world-rule-"
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "rules.schema.json").read_text(encoding="utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
#: The plain-rule branch alone, for readable messages (oneOf only says "not valid under any").
_RULE_VALIDATOR = jsonschema.Draft202012Validator({**SCHEMA["$defs"]["rule"], "$defs": SCHEMA["$defs"]})


def issues(value: Any) -> list[str]:
    """Schema problems of one rule (or wrapper) as `path: message` lines; [] when valid."""
    out = []
    validator = _RULE_VALIDATOR if isinstance(value, dict) and "rule" not in value else _VALIDATOR
    for error in sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "/".join(str(p) for p in error.absolute_path) or "(rule)"
        out.append(f"{path}: {error.message}")
    return out


def flatten(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rule of the namespace, unwrapped, in key order, enabled ones first."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(rows):
        for item in rows[key] if isinstance(rows[key], list) else [rows[key]]:
            rule = item.get("rule") if isinstance(item, dict) and isinstance(item.get("rule"), dict) else item
            if isinstance(rule, dict) and isinstance(rule.get("id"), str) and isinstance(rule.get("content"), str):
                out.setdefault(rule["id"], rule)
    return sorted(out.values(), key=lambda r: r.get("enabled") is False)


def lorebook_entry(rule: dict[str, Any]) -> dict[str, Any]:
    """The lorebook.upsert entry of a rule (constant → always on, else selective on its keys)."""
    constant = rule.get("kind", "constant") == "constant" or not rule.get("keys")
    entry: dict[str, Any] = {"id": ENTRY_PREFIX + rule["id"], "keys": [k for k in rule.get("keys") or [] if isinstance(k, str)],
                             "content": rule["content"], "strategy": "constant" if constant else "selective",
                             "enabled": rule.get("enabled", True) is not False,
                             "extra": {"source": "living-world-rules", "ruleId": rule["id"], "category": rule.get("category")}}
    position = (rule.get("coordinate") or {}).get("position")
    if isinstance(position, str):
        entry["position"] = position
    if isinstance(rule.get("insertionOrder"), (int, float)):
        entry["insertionOrder"] = rule["insertionOrder"]
    return entry
