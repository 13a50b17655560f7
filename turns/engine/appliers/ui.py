"""ui.render: a UI block in the chat (message kind "ui"), ``ui.rendered`` and one
``ui.part.update`` per part."""

from __future__ import annotations

import uuid

from sessions.models import ChatMessage
from turns.engine.appliers.base import CommitContext
from plugins_app.toolkit.proposals import Proposal

UI_RENDERED = "ui.rendered"
UI_PART_UPDATE = "ui.part.update"
TOPIC_UI = "ui"


def apply_ui_render(ctx: CommitContext, proposal: Proposal) -> None:
    block = dict(proposal.payload)
    message = ChatMessage(
        session=ctx.session, message_id=str(uuid.uuid4()), role="system", kind="ui", content="", turn_id=ctx.turn_id,
        metadata={"block": block, "pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id},
    )
    ctx.message_add(message)
    ctx.messages.append(message)
    ctx.event(UI_RENDERED, TOPIC_UI, {"messageId": message.message_id, "block": block, "pluginId": proposal.plugin_id,
                                      "runtimeId": proposal.runtime_id})
    for part in block.get("parts") or []:
        ctx.event(UI_PART_UPDATE, TOPIC_UI, {"messageId": message.message_id, "part": part})
