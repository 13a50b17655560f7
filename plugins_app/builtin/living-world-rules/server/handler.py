"""living-world-rules manual function runtime: save one rule (ctx.manual_payload `{ruleJson}`) at
`rules/<id>` and upsert its lorebook entry; a bad rule raises (the run fails, nothing is written)."""

from __future__ import annotations

import json
from typing import Any

from . import rules as R


def handle(ctx) -> dict[str, Any]:
    payload = ctx.manual_payload or {}
    raw = payload.get("ruleJson", payload.get("rule"))
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"ruleJson: not JSON ({exc.msg} at {exc.pos})") from None
    if isinstance(raw, dict) and isinstance(raw.get("rule"), dict):
        raw = raw["rule"]
    if not isinstance(raw, dict):
        raise ValueError("ruleJson: one rule object (schemaVersion, id, content, …)")
    problems = R.issues(raw)
    if problems:
        raise ValueError("ruleJson: " + "; ".join(problems[:5]))
    rule = {**raw, "content": raw["content"].strip()}
    rule.setdefault("kind", "constant")
    existed = ctx.plugin_data.get(R.NAMESPACE, rule["id"]) is not None
    entry = R.lorebook_entry(rule)
    ctx.plugin_data.set(R.NAMESPACE, rule["id"], {"rule": rule, "lorebookEntryId": entry["id"]})
    return {"rule": rule, "lorebookEntryId": entry["id"], "created": not existed,
            "proposals": [{"type": "lorebook.upsert", "payload": {"entries": [entry]}}]}
