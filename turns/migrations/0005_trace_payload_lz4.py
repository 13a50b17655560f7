"""PostgreSQL: TOAST-compress trace payloads with lz4 instead of pglz (issue 18).

A full-game turn writes ~220 KB of trace payloads (the prompts of its model calls, kept once, in
``llm.calling`` rows); bulk-inserting one turn's rows took 14 ms with pglz and 7–9 ms with lz4
on the same rows (lz4 stores ~5% more). Only new values are compressed with lz4; existing rows
stay readable as they are. A server built without lz4 keeps pglz. SQLite: nothing to do.
"""
from django.db import migrations

_TABLES = (("turns_traceevent", "payload"), ("covel_sessions_snapshot", "data"))


def _lz4(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        row = cursor.fetchone()
        if not row or not row[0]:
            return
        for table, column in _TABLES:
            cursor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION lz4')


def _pglz(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for table, column in _TABLES:
            cursor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION pglz')


class Migration(migrations.Migration):
    dependencies = [("turns", "0004_trace_event_summary"), ("covel_sessions", "0003_world_data_ledger")]
    operations = [migrations.RunPython(_lz4, _pglz)]
