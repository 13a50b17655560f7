"""event.emit (domain events → ``event.emitted``) and asset.generate."""

from __future__ import annotations

from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import Proposal

EVENT_EMITTED = "event.emitted"
TOPIC_CUSTOM = "custom"


def apply_event_emit(ctx: CommitContext, proposal: Proposal) -> None:
    payload = proposal.payload
    ctx.event(EVENT_EMITTED, TOPIC_CUSTOM, {"topic": payload["topic"], "data": payload.get("data") or {},
                                            "source": {"pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id}})


def apply_asset_generate(ctx: CommitContext, proposal: Proposal) -> None:
    # Media generation runs in the media app's jobs, which this server does not offer to the
    # commit chain yet; refusing keeps the write explicit instead of silently dropping it.
    raise ProposalRejected("unsupported", "asset.generate is not supported by this server")
