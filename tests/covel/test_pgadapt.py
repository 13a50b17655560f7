"""covel.pgadapt: the list dumper writes the same array literals as psycopg's, and bulk inserts
(Django's UNNEST path on PostgreSQL) store JSON and text with quotes and backslashes intact."""
import json

import pytest
from psycopg import adapters
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.array import ListDumper as PsycopgListDumper

from covel.pgadapt import ListDumper

TRICKY = ['plain', 'with "quotes"', "back\\slash", 'both \\" mixed', "comma, brace {x} ", "", " ", "NULL",
          "ünïcode ✓", '{"json": "va\\"lue", "n": [1, 2]}']


@pytest.mark.parametrize("value", [
    TRICKY,
    [[s, s.upper()] for s in TRICKY],
    [1, 2, None, 3],
    [None, "x", None],
    [],
])
def test_array_literal_bytes_equal_psycopgs(value):
    tx = Transformer()
    ours = ListDumper(list, tx).upgrade(value, PyFormat.TEXT)
    theirs = PsycopgListDumper(list, tx).upgrade(value, PyFormat.TEXT)
    assert type(ours) is ListDumper  # upgrades keep the subclass
    assert bytes(ours.dump(value)) == bytes(theirs.dump(value))


def test_installed_for_lists_on_the_global_adapters():
    # TurnsConfig.ready installs it; text and automatic formats pick it for a list.
    assert adapters.get_dumper(list, PyFormat.TEXT) is ListDumper
    assert adapters.get_dumper(list, PyFormat.AUTO) is ListDumper


@pytest.mark.hosted_only
@pytest.mark.django_db
def test_bulk_insert_round_trips_quotes_and_backslashes(monkeypatch):
    from django.db import connection

    from covel import pgadapt

    escaped = []
    escape = pgadapt._ArrayElementEscape.sub
    monkeypatch.setattr(pgadapt._ArrayElementEscape, "sub", staticmethod(
        lambda template, value: escaped.append(1) or escape(template, value)))

    from plugins_app.models import PluginData
    from sessions.models import Session

    assert connection.vendor == "postgresql"
    session = Session.objects.create(id="pgadapt-s1", world_id="w", incarnation="i", event_epoch="e")
    values = [{"text": s, "nested": [s, {"k": s}]} for s in TRICKY]
    PluginData.objects.bulk_create([
        PluginData(session=session, plugin_id="p", namespace="n", key=f"k{i}\\\"{i}", value=v)
        for i, v in enumerate(values)
    ])
    assert escaped  # the rows went through the array literal (Django's UNNEST bulk insert)
    rows = list(PluginData.objects.filter(session=session).order_by("id").values_list("key", "value"))
    assert rows == [(f"k{i}\\\"{i}", v) for i, v in enumerate(values)]
    with connection.cursor() as cursor:  # the stored jsonb is the same JSON, not a re-escaped string
        cursor.execute(f"SELECT value::text FROM {PluginData._meta.db_table} WHERE session_id = %s ORDER BY id LIMIT 1",
                       [session.id])
        assert json.loads(cursor.fetchone()[0]) == values[0]
