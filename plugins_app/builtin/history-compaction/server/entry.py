"""history-compaction entry module: the `history.compact@1` extension `rolling-summary` — the
committed rolling summary for story prompts (`{text, throughTurnId}`, or `{}` before the first
compaction)."""

from __future__ import annotations

from typing import Any

ROLLING_NAMESPACE = "rolling"
ROLLING_KEY = "current"


def rolling_summary(context: dict[str, Any]) -> dict[str, Any]:
    record = ((context.get("pluginData") or {}).get(ROLLING_NAMESPACE) or {}).get(ROLLING_KEY)
    if not isinstance(record, dict) or not record.get("text") or not record.get("throughTurnId"):
        return {}
    return {"text": str(record["text"]), "throughTurnId": str(record["throughTurnId"])}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("history.compact@1", "rolling-summary", rolling_summary)
