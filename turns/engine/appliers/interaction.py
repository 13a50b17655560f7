"""interaction.request: a form / choice / confirmation for the player (InteractionRecord +
``interaction.requested``). Tool results' ``interaction`` fields are committed the same way."""

from __future__ import annotations

from typing import Any

from turns.engine.appliers.base import CommitContext
from plugins_app.toolkit.proposals import Proposal
from turns.models import InteractionRecord

INTERACTION_REQUESTED = "interaction.requested"
TOPIC_INTERACTION = "interaction"


def interaction_record(ctx: CommitContext, spec: dict[str, Any], *, plugin_id: str | None, runtime_id: str | None) -> None:
    """Create (or replace, for the same turn and id) the pending interaction and its event."""
    interaction_id = str(spec.get("interactionId"))
    InteractionRecord.objects.update_or_create(
        session=ctx.session, turn_id=ctx.turn_id, interaction_id=interaction_id,
        defaults={"type": str(spec.get("type") or "form"), "plugin_id": plugin_id or "", "runtime_id": runtime_id or "",
                  "spec": spec, "status": "pending", "answer": None},
    )
    ctx.event(INTERACTION_REQUESTED, TOPIC_INTERACTION, {"turnId": ctx.turn_id, "interaction": spec,
                                                         "pluginId": plugin_id, "runtimeId": runtime_id})


def apply_interaction_request(ctx: CommitContext, proposal: Proposal) -> None:
    interaction_record(ctx, dict(proposal.payload), plugin_id=proposal.plugin_id, runtime_id=proposal.runtime_id)
