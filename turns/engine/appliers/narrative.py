"""narrative.append: a story message written by a runtime (chat message + prompt history)."""

from __future__ import annotations

import re
import uuid
from typing import Any

from sessions.models import ChatMessage, TurnMessage
from turns.engine.appliers.base import CommitContext
from plugins_app.toolkit.proposals import Proposal


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n+")


def story_segments(text: str) -> list[dict[str, Any]]:
    """Segments of a plain-text story (spec 004 §消息历史): one ``{kind: "narration", text}`` per
    paragraph (blank-line separated, trimmed); the message content is these joined by blank lines."""
    return [{"kind": "narration", "text": part.strip()} for part in _PARAGRAPH_BREAK.split(text) if part.strip()]


def story_content(segments: list[dict[str, Any]], fallback: str) -> str:
    """The content of a story message: its segments' texts joined by a blank line."""
    texts = [s.get("text") for s in segments if isinstance(s, dict) and isinstance(s.get("text"), str)]
    return "\n\n".join(texts) if texts else fallback


def apply_narrative_append(ctx: CommitContext, proposal: Proposal) -> None:
    payload = proposal.payload
    role = payload.get("role") or "assistant"
    segments = payload.get("segments") or story_segments(payload["text"])
    message = ChatMessage(
        session=ctx.session, message_id=str(uuid.uuid4()), role=role, kind="story",
        content=story_content(segments, payload["text"]), turn_id=ctx.turn_id,
        metadata={"pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id, "segments": segments},
    )
    ctx.message_add(message, TurnMessage(session=ctx.session, turn_id=ctx.turn_id, runtime_id=proposal.runtime_id or "",
                                         role=role, content={"text": payload["text"]}))
    ctx.messages.append(message)
