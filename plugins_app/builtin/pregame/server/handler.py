"""pregame function runtime: session metadata, a welcome notice and the world summary, then
`preGameDone` (no model call). Output: session.opening@1.

Writes `session/metadata` (`{worldId, worldName, locale, startedTurn}`) and one ui.render welcome
block; the output's `narrativeOutput` (world summary + opening scene, session locale) is the
context char-creator's player-init reads.
"""

from __future__ import annotations

from typing import Any

_WELCOME = {
    "zh": ("欢迎来到{name}", "先看看这个世界，再创建你的角色。"),
    "en": ("Welcome to {name}", "Read about this world first, then create your character."),
}


def opening_text(name: str, summary: str, opening: str, zh: bool) -> str:
    """The world summary and opening scene as one short text in the session language."""
    parts = [p.strip() for p in (summary, opening) if p and p.strip()]
    if not parts:
        return f"故事在{name}开始。" if zh else f"The story begins in {name}."
    if len(parts) == 2 and parts[1].startswith(parts[0][:20]):
        parts = parts[1:]
    return ("\n\n" if not zh else "\n\n").join(parts)


def handle(ctx) -> dict[str, Any]:
    """Function runtime entry (turns.engine.function.FunctionContext)."""
    zh = ctx.locale.lower().startswith("zh")
    world = ctx.world
    name = world.name or world.id or ("这个世界" if zh else "this world")
    text = opening_text(name, world.description, world.opening_scenario, zh)
    title, message = _WELCOME["zh" if zh else "en"]
    ctx.plugin_data.set(
        "session",
        "metadata",
        {"worldId": world.id, "worldName": name, "locale": ctx.locale, "startedTurn": ctx.logical_turn},
    )
    welcome = {
        "type": "ui.render",
        "payload": {
            "parts": [
                {
                    "id": "pregame-welcome",
                    "type": "alert",
                    "status": "success",
                    "content": {"level": "info", "title": title.format(name=name), "message": message},
                },
                {"id": "pregame-world", "type": "markdown", "status": "success", "content": {"text": text}},
            ]
        },
    }
    return {
        "narrativeOutput": text,
        "worldName": name,
        "openingScenario": world.opening_scenario or "",
        "initialized": True,
        "preGameDone": True,
        "proposals": [welcome],
    }
