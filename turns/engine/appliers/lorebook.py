"""lorebook.upsert: entries owned by the proposal's source plugin (spec 000 §lorebook.upsert:
the owner is fixed to {kind: plugin, pluginId}; a plugin never writes world/player entries)."""

from __future__ import annotations

from sessions.models import LorebookEntry
from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import Proposal

LOREBOOK_CHANGED = "lorebook.changed"
TOPIC_SESSION = "session"


def apply_lorebook_upsert(ctx: CommitContext, proposal: Proposal) -> None:
    if not proposal.plugin_id:
        raise ProposalRejected("proposal-invalid", "lorebook.upsert needs a source plugin")
    ids = []
    for entry in proposal.payload["entries"]:
        defaults = {
            "keys": list(entry["keys"]), "content": entry["content"], "strategy": entry["strategy"],
            "enabled": entry.get("enabled", True), "metadata": {"extra": entry.get("extra") or {}},
            "title": str((entry.get("extra") or {}).get("title") or "")[:256],
        }
        if "insertionOrder" in entry:
            defaults["insertion_order"] = int(entry["insertionOrder"])
        if isinstance(entry.get("position"), str):
            defaults["position"] = entry["position"][:32]
        LorebookEntry.objects.update_or_create(session=ctx.session, owner=LorebookEntry.OWNER_PLUGIN,
                                               plugin_id=proposal.plugin_id, entry_id=entry["id"], defaults=defaults)
        ids.append(entry["id"])
    ctx.event(LOREBOOK_CHANGED, TOPIC_SESSION, {"pluginId": proposal.plugin_id, "entryIds": ids})
