"""The event table of story-events and its ledger (shared by evaluate, intake, plot and the tool).

Storage (plugin data of story-events):
- `_hidden.events`: world-authored events (contract story.events@1) delivered by the host from a
  `visibility: hidden` world data source — one row per event, or one row holding the file's list;
- `_hidden.planned`: events planted during play (`{event, plannedTurn}` per id), written by intake;
- `ledger/<eventId>`: `{eventId, title?, turn, count}` for each event that fired — ids and public
  titles only, never payloads.
Hidden namespaces never reach a player view (spec 004 §插件数据); payloads leave them only as the
turn's cue.
"""

from __future__ import annotations

from typing import Any

HIDDEN_EVENTS = "_hidden.events"
HIDDEN_PLANNED = "_hidden.planned"
PUBLIC_EVENTS = "events"
LEDGER = "ledger"
PLANNED_LIMIT = 6
PER_PLAN_LIMIT = 2


def text_in(value: Any, locale: str | None) -> str:
    """A text field (string or {locale: text}) in ``locale``: exact, same language, en-US, first."""
    if isinstance(value, str):
        return value.strip()
    if not isinstance(value, dict) or not value:
        return ""
    locale = locale or ""
    lang = locale.split("-")[0].lower()
    for key in (locale, *[k for k in value if k.split("-")[0].lower() == lang], "en-US", "en", next(iter(value))):
        if isinstance(value.get(key), str) and value[key].strip():
            return value[key].strip()
    return ""


def _rows(rows: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for value in rows.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get("id"), str) and "when" in item and "payload" in item:
                out.append(item)
    return out


def world_events(ctx) -> list[dict[str, Any]]:
    """World-authored events (hidden bucket; a public `events` row from an older import counts too)."""
    seen: dict[str, dict[str, Any]] = {}
    for item in [*_rows(ctx.plugin_data.list(HIDDEN_EVENTS)), *_rows(ctx.plugin_data.list(PUBLIC_EVENTS))]:
        seen.setdefault(item["id"], {**item, "origin": "world"})
    return list(seen.values())


def planned_events(ctx) -> list[dict[str, Any]]:
    out = []
    for key, row in ctx.plugin_data.list(HIDDEN_PLANNED).items():
        if isinstance(row, dict) and isinstance(row.get("event"), dict):
            out.append({**row["event"], "origin": "planned", "plannedTurn": row.get("plannedTurn"), "once": True})
    return out


def ledger(ctx) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in ctx.plugin_data.list(LEDGER).items() if isinstance(v, dict)}


def ledger_view(ctx, turn: int, locale: str | None) -> dict[str, Any]:
    """The `ledger` field of story-event-cue@1: what a planner may know."""
    fired = ledger(ctx)
    revealed = [{k: v for k, v in {"eventId": key, "title": row.get("title"), "lastTurn": row.get("turn")}.items() if v is not None}
                for key, row in sorted(fired.items(), key=lambda kv: kv[1].get("turn") or 0)]
    planned = []
    for event in planned_events(ctx):
        if event["id"] in fired:
            continue
        item = {"eventId": event["id"], "plannedTurn": event.get("plannedTurn")}
        title = text_in(event.get("title"), locale)
        if title:
            item["title"] = title
        planned.append({k: v for k, v in item.items() if v is not None})
    return {"turn": turn, "revealed": revealed, "planned": planned}
