"""director entry module: the director's note as a `prompt.segment@1` provider and, because this
host does not call segment providers yet, a PostContextAssembly hook that puts the same note at the
head of every story runtime's system prompt (other runtimes untouched)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
SEGMENT_ID = "director.direction"
STORY = "story"


@lru_cache(maxsize=4)
def note(locale: str | None) -> str:
    """The note for ``locale`` (zh-* → zh-CN, anything else → en-US)."""
    name = "direction.zh-CN.md" if str(locale or "").lower().startswith("zh") else "direction.en-US.md"
    return (PROMPTS / name).read_text(encoding="utf-8").strip()


def segment(context: dict[str, Any]) -> dict[str, Any]:
    """prompt.segment@1: ``{audience, locale}`` → ``{segment: {id, audience, position, content} | null}``."""
    if (context or {}).get("audience", STORY) != STORY:
        return {"segment": None}
    return {"segment": {"id": SEGMENT_ID, "audience": STORY, "position": "system-prefix", "content": note(context.get("locale"))}}


def post_context_assembly(event: dict[str, Any]) -> dict[str, Any] | None:
    """Story runtimes only: the note before the system prompt (once; a prompt already holding it is kept)."""
    if event.get("outputKind") != STORY:
        return None
    text = note(event.get("locale"))
    system = str(event.get("systemPrompt") or "")
    if text in system:
        return None
    return {"action": "continue", "replace": {"systemPrompt": f"{text}\n\n{system}" if system else text}}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("prompt.segment@1", "direction", segment)
    api.register_hook("PostContextAssembly", post_context_assembly, enforce="normal")
