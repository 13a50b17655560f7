"""event.emit (domain events → ``event.emitted``) and asset.generate."""

from __future__ import annotations

from turns.engine import ports
from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import Proposal

EVENT_EMITTED = "event.emitted"
ASSET_GENERATED = "asset.generated"
TOPIC_CUSTOM = "custom"
TOPIC_MEDIA = "media"


def apply_event_emit(ctx: CommitContext, proposal: Proposal) -> None:
    payload = proposal.payload
    ctx.event(EVENT_EMITTED, TOPIC_CUSTOM, {"topic": payload["topic"], "data": payload.get("data") or {},
                                            "source": {"pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id}})


def apply_asset_generate(ctx: CommitContext, proposal: Proposal) -> None:
    """asset.generate (spec 000 §Proposal 类型; spec 004 §图像/媒体生成输出).

    With ``ref`` (a function runtime's ``effects.assetGenerations[]``, already in the media
    library): ``asset.generated`` ``{pluginId, runtimeId, kind, modality, ref, meta, prompt?}``.
    Without (a request ``{kind, prompt, options?}``): a media generation job is staged through the
    ``asset_generation_stage`` port (turns.assets), which answers with ``asset.progress`` now and
    ``asset.generated`` when the job is done."""
    payload = proposal.payload
    if not proposal.plugin_id:
        raise ProposalRejected("proposal-invalid", "asset.generate needs a source plugin")
    ref = payload.get("ref")
    if isinstance(ref, dict):
        out = {"pluginId": proposal.plugin_id, "runtimeId": proposal.runtime_id, "kind": payload["kind"],
               "modality": payload.get("modality") or payload["kind"], "ref": ref, "meta": payload.get("meta") or {}}
        if "prompt" in payload:
            out["prompt"] = payload["prompt"]
        ctx.event(ASSET_GENERATED, TOPIC_MEDIA, out)
        return
    if not isinstance(payload.get("prompt"), str) or not payload["prompt"].strip():
        raise ProposalRejected("proposal-invalid", "asset.generate without a ref needs a prompt to generate from")
    ctx.events.extend(ports.asset_generation_stage(session=ctx.session, plugin_id=proposal.plugin_id,
                                                   runtime_id=proposal.runtime_id, turn_id=ctx.turn_id, payload=payload))
