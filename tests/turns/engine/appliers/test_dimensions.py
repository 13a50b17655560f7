"""The dimension appliers' receipts and declaration changes (turns/engine/appliers/dimensions.py,
turns/engine/settlements.py; spec 004 §维度编辑与待结算恢复, §SSE 协议 world.dimensions.changed)."""
import pytest
from django.db import transaction

from plugins_app.models import PluginData
from plugins_app.toolkit.proposals import Proposal
from sessions.models import DimensionValue
from tests.turns.engine.support import session_create
from turns.engine.appliers import appliers
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.appliers.plugin_data import plugin_data_flush

pytestmark = pytest.mark.django_db

STORM = {"name": "Storm", "schema": {"type": "integer"}, "initialValue": 5, "updateRule": "secret rule"}


def _apply(ctx, kind, payload):
    """Apply one proposal as the commit chain does: in a transaction, its held-back plugin-data
    rows written before it ends."""
    with transaction.atomic():
        appliers()[kind](ctx, Proposal(kind, payload, plugin_id="world-init", runtime_id="world-init/x"))
        plugin_data_flush(ctx)


def _receipt(session, key):
    row = PluginData.objects.filter(session=session, plugin_id="world-init", namespace="settlements", key=key).first()
    return None if row is None else row.value


def test_a_changed_declaration_keeps_the_value_and_announces_world_dimensions_changed():
    session = session_create(plugins=["world-init"])
    ctx = CommitContext(session=session, turn_id="t1")
    _apply(ctx, "dimension.initialize", {"definitions": {"storm": STORM}})
    _apply(ctx, "dimension.initialize", {"definitions": {"storm": STORM}})  # same declaration: no event
    assert [e.type for e in ctx.events] == ["dimensions.changed", "dimensions.changed"]
    DimensionValue.objects.filter(session=session).update(value=2, version=3)
    _apply(ctx, "dimension.initialize", {"definitions": {"storm": {**STORM, "schema": {"type": "integer", "maximum": 9}}}})
    row = DimensionValue.objects.get(session=session)
    assert (row.value, row.version) == (2, 3) and row.definition["schema"]["maximum"] == 9
    [event] = [e for e in ctx.events if e.type == "world.dimensions.changed"]
    assert event.payload == {"providerPluginId": "world-init",
                             "dimensions": {"storm": {"name": "Storm", "schema": {"type": "integer", "maximum": 9}}}}


def test_receipts_settle_go_pending_resolve_and_never_settle_twice():
    session = session_create(plugins=["world-init"])
    DimensionValue.objects.create(session=session, dimension_id="storm", definition=STORM, value=5, version=2)
    ctx = CommitContext(session=session, turn_id="turn-a")
    source = {"resultId": "r1", "turnNumber": 1}
    # an automatic settlement whose version is stale: nothing applied, the receipt is pending
    _apply(ctx, "dimension.update", {"updates": [{"id": "storm", "value": 4, "expectedVersion": 1}], "source": source})
    assert DimensionValue.objects.get(session=session).version == 2
    pending = _receipt(session, "r1")
    assert pending["status"] == "pending-settlement" and pending["sourceTurnId"] == "turn-a" and pending["version"] == 1
    assert pending["error"]["currentVersions"] == {"storm": 2}
    assert ctx.events[-1].type == "dimensions.settlement.changed"
    # the editor's commit-time conflict is refused with the spec's code
    with pytest.raises(ProposalRejected) as refused:
        _apply(ctx, "dimension.update", {"updates": [{"id": "storm", "value": 1, "expectedVersion": 1}],
                                         "settlement": {"resultId": "r1", "resolution": "manual"}})
    assert refused.value.code == "dimension-version-conflict"
    with pytest.raises(ProposalRejected) as plain:
        _apply(ctx, "dimension.update", {"updates": [{"id": "storm", "value": 1, "expectedVersion": 1}], "origin": "editor"})
    assert plain.value.code == "dimension-version-conflict"
    # a manual resolution with a correction: value applied, receipt manual, version 2, sourceTurnId kept
    ctx2 = CommitContext(session=session, turn_id="turn-b")
    _apply(ctx2, "dimension.update", {"updates": [{"id": "storm", "value": 1, "expectedVersion": 2}],
                                      "settlement": {"resultId": "r1", "resolution": "manual"}})
    done = _receipt(session, "r1")
    assert done["status"] == "manual" and done["version"] == 2 and done["sourceTurnId"] == "turn-a" and "error" not in done
    assert DimensionValue.objects.get(session=session).value == 1
    [changed] = [e for e in ctx2.events if e.type == "dimensions.changed"]
    assert changed.payload["settlement"]["status"] == "manual"
    # an ended source is not settled again, and cannot be resolved again
    _apply(ctx2, "dimension.update", {"updates": [{"id": "storm", "value": 9, "expectedVersion": 3}], "source": source})
    assert DimensionValue.objects.get(session=session).value == 1 and _receipt(session, "r1")["version"] == 2
    with pytest.raises(ProposalRejected) as again:
        _apply(ctx2, "dimension.update", {"updates": [], "settlement": {"resultId": "r1", "resolution": "skipped"}})
    assert again.value.code == "settlement-not-pending"
    # an automatic settlement with nothing to change records no-change
    _apply(ctx2, "dimension.update", {"updates": [], "source": {"resultId": "r2", "turnNumber": 2}})
    assert _receipt(session, "r2")["status"] == "no-change"
