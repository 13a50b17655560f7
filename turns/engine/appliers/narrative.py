"""narrative.append: a story message written by a runtime (chat message + prompt history)."""

from __future__ import annotations

import uuid

from sessions.models import ChatMessage, TurnMessage
from turns.engine.appliers.base import CommitContext
from plugins_app.toolkit.proposals import Proposal


def apply_narrative_append(ctx: CommitContext, proposal: Proposal) -> None:
    payload = proposal.payload
    role = payload.get("role") or "assistant"
    message = ChatMessage.objects.create(
        session=ctx.session, message_id=str(uuid.uuid4()), role=role, kind="story", content=payload["text"],
        turn_id=ctx.turn_id, metadata={"pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id,
                                       **({"segments": payload["segments"]} if payload.get("segments") else {})},
    )
    TurnMessage.objects.create(session=ctx.session, turn_id=ctx.turn_id, runtime_id=proposal.runtime_id or "",
                               role=role, content={"text": payload["text"]})
    ctx.messages.append(message)
