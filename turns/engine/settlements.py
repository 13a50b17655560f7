"""Dimension settlement receipts (spec 004 §维度编辑与待结算恢复, §GET /api/sessions/:id/view
dimensionSettlements; the receipt states of World Model): one receipt per narrative source, stored
as the dimension provider's plugin data ``settlements/<resultId>`` and written only by the
dimension.update applier (turns.engine.appliers.dimensions), in the commit of the turn that settles
or fails to settle it.

Receipt value::

    {resultId, turn (the source's turnNumber), sourceTurnId, status, version (the receipt's own,
     1 on first write, +1 on each change), updateCount, expectedVersions {dimId: version},
     error? {code, message, currentVersions?}}

status: ``settled`` | ``no-change`` (an automatic settlement committed), ``pending-settlement``
(an automatic settlement the commit refused — a version conflict: the narrative stays committed,
the obligation stays open), ``manual`` / ``skipped`` (the player resolved a pending source through
the editor runtime). The last three are what ``dimensions.settlement.changed`` announces.
"""
from __future__ import annotations

from typing import Any

#: The provider plugin's namespace of receipts (world-init's server/common.py SETTLEMENTS_NAMESPACE).
SETTLEMENTS_NAMESPACE = "settlements"
#: Resolved receipts (settled, no-change, manual, skipped) kept per provider; older ones are pruned
#: when a newer one is written, so a session's receipts stay bounded however long it runs (issue 18:
#: plugin data read whole every turn must not grow a row per turn). Pending receipts are never pruned.
RESOLVED_RECEIPTS_KEPT = 32
STATUS_PENDING = "pending-settlement"
STATUS_SETTLED = "settled"
STATUS_NO_CHANGE = "no-change"
STATUS_MANUAL = "manual"
STATUS_SKIPPED = "skipped"
STATUSES = (STATUS_PENDING, STATUS_SETTLED, STATUS_NO_CHANGE, STATUS_MANUAL, STATUS_SKIPPED)
TERMINAL_STATUSES = frozenset({STATUS_SETTLED, STATUS_NO_CHANGE, STATUS_MANUAL, STATUS_SKIPPED})
RESOLUTIONS = (STATUS_MANUAL, STATUS_SKIPPED)
VERSION_CONFLICT = "dimension-version-conflict"
SETTLEMENT_CHANGED = "dimensions.settlement.changed"


def receipt_summary(value: Any) -> dict[str, Any] | None:
    """The public summary of one stored receipt (``dimensionSettlements[]`` item): ``{source:
    {resultId, turnNumber}, status, sourceTurnId, version, error?}``; None for a malformed row."""
    if not isinstance(value, dict) or value.get("status") not in STATUSES or not value.get("resultId"):
        return None
    out: dict[str, Any] = {"source": {"resultId": str(value["resultId"]), "turnNumber": value.get("turn")},
                           "status": value["status"], "sourceTurnId": value.get("sourceTurnId"),
                           "version": int(value.get("version") or 1)}
    error = value.get("error")
    if isinstance(error, dict) and value["status"] == STATUS_PENDING:
        out["error"] = {k: error[k] for k in ("code", "message") if k in error}
    return out


#: The contract of a session's dimension provider; its recovery runtimes by local id.
DIMENSIONS_CONTRACT = "world.dimensions@1"
EDITOR_RUNTIME, TRACKER_RUNTIME = "edit-dimensions", "dimension-tracker"
#: execution.completed abortReason of a player turn whose pending settlements the automatic retry
#: could not settle.
ABORT_SETTLEMENT_PENDING = "dimension-settlement-pending"
ABORT_MESSAGE = ("An earlier turn's world dimensions are still waiting to be settled. Open the dimension "
                 "editor to confirm them by hand or skip that turn, or retry the tracker from that turn; then act again.")


def provider_plugin_id(active_plugins: list[str], registry: Any, *, bound: Any = None) -> str | None:
    """The session's dimension provider: the one the host bound at creation
    (``metadata.dimensionProviderPluginId``, kept even when it is not installed now), else the
    first active plugin (activePlugins order) whose manifest provides world.dimensions@1, or None."""
    if isinstance(bound, str) and bound:
        return bound
    for plugin_id in active_plugins or []:
        record = registry.get(plugin_id) if registry is not None else None
        if record is not None and DIMENSIONS_CONTRACT in record.manifest.provided_contracts:
            return plugin_id
    return None
