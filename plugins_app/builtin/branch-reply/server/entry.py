"""branch-reply entry module: the `prompt.history-transform@1` extension `accepted-branch` — in the
story history a story prompt sees, a reply whose accepted telling is not the original is replaced
by the accepted telling (matched on the reply's text as first written, `turns/<turnKey>.baseText`).
Other messages pass through unchanged."""

from __future__ import annotations

from typing import Any

TURNS = "turns"


def _accepted_tellings(turns: dict[str, Any]) -> dict[str, str]:
    """baseText (stripped) → accepted candidate text, for the turns whose accepted candidate is not the original."""
    out: dict[str, str] = {}
    for record in turns.values():
        if not isinstance(record, dict) or not isinstance(record.get("baseText"), str):
            continue
        chosen = next((c for c in record.get("candidates") or [] if isinstance(c, dict) and c.get("id") == record.get("acceptedId")), None)
        if chosen and chosen.get("source") != "original" and isinstance(chosen.get("text"), str) and chosen["text"].strip():
            out[record["baseText"].strip()] = chosen["text"]
    return out


def accepted_branch(context: dict[str, Any]) -> dict[str, Any]:
    """`{messages}` with each story reply that has an accepted alternative rewritten to it."""
    messages = [dict(m) for m in context.get("messages") or [] if isinstance(m, dict)]
    tellings = _accepted_tellings(((context.get("pluginData") or {}).get(TURNS)) or {})
    if tellings:
        for message in messages:
            if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                message["content"] = tellings.get(message["content"].strip(), message["content"])
    return {"messages": messages}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("prompt.history-transform@1", "accepted-branch", accepted_branch)
