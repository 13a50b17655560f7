"""The plugin-data appliers with the commit's row cache: batches with distinct and repeated keys,
and the cache being dropped after a savepoint rollback (turns/engine/appliers/plugin_data.py)."""
import re

import pytest
from django.db import transaction

from plugins_app.models import PluginData
from tests.turns.engine.support import session_create
from turns.engine.appliers import appliers
from turns.engine.appliers.base import CommitContext, ProposalRejected
from turns.engine.appliers.plugin_data import plugin_data_flush, plugin_data_forget, plugin_data_prefetch
from plugins_app.toolkit.proposals import Proposal

pytestmark = pytest.mark.django_db


def _apply(ctx, proposal):
    appliers()[proposal.kind](ctx, proposal)


def _value(session, namespace, key):
    row = PluginData.objects.filter(session=session, plugin_id="notes", namespace=namespace, key=key).first()
    return None if row is None else (row.value, row.version)


def test_batch_with_distinct_keys_creates_updates_and_deletes_in_one_go():
    # given a session with two stored keys and a prefetched commit context
    session = session_create(plugins=["notes"])
    PluginData.objects.create(session=session, plugin_id="notes", namespace="n", key="old", value=1)
    PluginData.objects.create(session=session, plugin_id="notes", namespace="n", key="gone", value=2)
    ctx = CommitContext(session=session, turn_id="t1")
    batch = Proposal("plugin.data.batch", {"entries": [
        {"namespace": "n", "key": "old", "value": 10},
        {"namespace": "n", "key": "new", "value": {"a": 1}},
        {"namespace": "n", "key": "gone", "delete": True},
    ]}, plugin_id="notes")
    plugin_data_prefetch(ctx, [batch])

    # when the batch is applied, then a single plugin.data reads the cached row after it
    with transaction.atomic():
        _apply(ctx, batch)
        _apply(ctx, Proposal("plugin.data", {"namespace": "n", "key": "new", "value": {"a": 2}}, plugin_id="notes"))
        plugin_data_flush(ctx)

    assert _value(session, "n", "old") == (10, 2)
    assert _value(session, "n", "new") == ({"a": 2}, 2)
    assert _value(session, "n", "gone") is None
    changes = [e.payload["changes"] for e in ctx.events]
    assert changes[0] == [{"namespace": "n", "key": "old", "op": "set", "version": 2},
                          {"namespace": "n", "key": "new", "op": "set", "version": 1},
                          {"namespace": "n", "key": "gone", "op": "delete"}]
    assert changes[1] == [{"namespace": "n", "key": "new", "op": "set", "version": 2}]


def test_batch_with_a_repeated_key_applies_entries_in_order():
    # given a stored key
    session = session_create(plugins=["notes"])
    PluginData.objects.create(session=session, plugin_id="notes", namespace="n", key="k", value=1)
    ctx = CommitContext(session=session, turn_id="t1")
    batch = Proposal("plugin.data.batch", {"entries": [
        {"namespace": "n", "key": "k", "delete": True},
        {"namespace": "n", "key": "k", "value": 5},
        {"namespace": "n", "key": "k", "value": 6},
    ]}, plugin_id="notes")
    plugin_data_prefetch(ctx, [batch])

    # when the batch is applied
    with transaction.atomic():
        _apply(ctx, batch)
        plugin_data_flush(ctx)

    # then the key was deleted, created anew and updated once
    assert _value(session, "n", "k") == (6, 2)
    assert [c.get("version") for c in ctx.events[0].payload["changes"]] == [None, 1, 2]


def test_forgotten_cache_reads_the_rows_a_rollback_left():
    # given a context whose cache saw a write that a savepoint then rolled back
    session = session_create(plugins=["notes"])
    ctx = CommitContext(session=session, turn_id="t1")
    write = Proposal("plugin.data", {"namespace": "n", "key": "k", "value": 1}, plugin_id="notes")
    plugin_data_prefetch(ctx, [write])
    with transaction.atomic():
        with pytest.raises(ProposalRejected):
            with transaction.atomic():
                _apply(ctx, write)
                _apply(ctx, Proposal("plugin.data", {"namespace": "_x", "key": "k", "value": 1}, plugin_id="notes"))
        plugin_data_forget(ctx)

        # when the same key is written again in the same commit
        _apply(ctx, write)
        plugin_data_flush(ctx)

    # then it is created anew (version 1), not updated from the rolled-back row
    assert _value(session, "n", "k") == (1, 1)


def test_a_commits_changes_reach_the_database_in_at_most_three_statements():
    # given a stored key and a commit whose proposals update it, create two keys and delete one of
    # them again, and delete another stored key
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    session = session_create(plugins=["notes"])
    PluginData.objects.create(session=session, plugin_id="notes", namespace="n", key="old", value=1)
    PluginData.objects.create(session=session, plugin_id="notes", namespace="n", key="gone", value=2)
    ctx = CommitContext(session=session, turn_id="t1")
    proposals = [
        Proposal("plugin.data", {"namespace": "n", "key": "old", "value": 10}, plugin_id="notes"),
        Proposal("plugin.data", {"namespace": "n", "key": "a", "value": "A"}, plugin_id="notes"),
        Proposal("plugin.data", {"namespace": "n", "key": "brief", "value": "B"}, plugin_id="notes"),
        Proposal("plugin.data.delete", {"namespace": "n", "key": "brief"}, plugin_id="notes"),
        Proposal("plugin.data.delete", {"namespace": "n", "key": "gone"}, plugin_id="notes"),
        Proposal("plugin.data", {"namespace": "n", "key": "old", "value": 11}, plugin_id="notes"),
    ]
    plugin_data_prefetch(ctx, proposals)

    # when they are applied and flushed
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        for proposal in proposals:
            _apply(ctx, proposal)
        written_before_flush = len(queries.captured_queries)
        plugin_data_flush(ctx)

    # then nothing was written before the flush, the flush wrote one DELETE, one INSERT and one
    # UPDATE, and the rows are the last values (the created-then-deleted key never stored)
    assert written_before_flush == 0
    # (an executemany is captured as "N times: <sql>")
    statements = [re.sub(r"^\d+ times: ", "", q["sql"]).split()[0].upper() for q in queries.captured_queries]
    verbs = [verb for verb in statements if verb in ("INSERT", "UPDATE", "DELETE")]
    assert sorted(verbs) == ["DELETE", "INSERT", "UPDATE"]
    assert _value(session, "n", "old") == (11, 3)
    assert _value(session, "n", "a") == ("A", 1)
    assert _value(session, "n", "brief") is None and _value(session, "n", "gone") is None
    assert [c["op"] for e in ctx.events for c in e.payload["changes"]] == ["set", "set", "set", "delete", "delete", "set"]
