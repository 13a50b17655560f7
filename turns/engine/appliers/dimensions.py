"""dimension.initialize / dimension.update (DimensionValue rows, ``dimensions.changed``).
Updates are compare-and-set: an ``expectedVersion`` that is not the row's version rejects the
whole proposal (code "conflict")."""

from __future__ import annotations

import copy

from sessions.models import DimensionValue
from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import Proposal

DIMENSIONS_CHANGED = "dimensions.changed"
TOPIC_SESSION = "session"


def apply_dimension_initialize(ctx: CommitContext, proposal: Proposal) -> None:
    p = proposal.payload
    values = p.get("values") or {}
    changed = {}
    for dim_id, definition in p["definitions"].items():
        definition = definition if isinstance(definition, dict) else {}
        value = values.get(dim_id, definition.get("initialValue"))
        row, created = DimensionValue.objects.get_or_create(
            session=ctx.session, dimension_id=dim_id, defaults={"definition": copy.deepcopy(definition), "value": value, "version": 1})
        if not created:
            row.definition = copy.deepcopy(definition)
            row.save(update_fields=["definition", "updated_at"])
        changed[dim_id] = {"value": row.value, "version": row.version}
    ctx.event(DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "snapshot": changed})


def apply_dimension_update(ctx: CommitContext, proposal: Proposal) -> None:
    changed = {}
    for update in proposal.payload["updates"]:
        row = DimensionValue.objects.select_for_update().filter(session=ctx.session, dimension_id=update["id"]).first()
        if row is None:
            raise ProposalRejected("not-found", f"dimension {update['id']!r} does not exist")
        if "expectedVersion" in update and update["expectedVersion"] != row.version:
            raise ProposalRejected("conflict", f"dimension {update['id']!r} is at version {row.version}, not {update['expectedVersion']}")
        row.value = copy.deepcopy(update["value"])
        row.version += 1
        row.save(update_fields=["value", "version", "updated_at"])
        changed[row.dimension_id] = {"value": row.value, "version": row.version}
    ctx.event(DIMENSIONS_CHANGED, TOPIC_SESSION, {"providerPluginId": proposal.plugin_id, "snapshot": changed})
