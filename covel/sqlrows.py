"""Plain-SQL reads of model tables for per-turn hot paths (issue 18).

Django builds and compiles a queryset in Python on every evaluation: for the handful of reads a
turn makes every time (the session snapshot, the auto snapshot's capture) that was about half of
their CPU in the issue 18 profile, more than the database's own work. ``rows_select`` issues the
same SELECT as plain SQL over the model's table and column names (so a renamed column or table
follows the model), and ``json_column`` / ``datetime_column`` convert the values as the fields
would: JSON arrives as text on both backends (Django registers jsonb's loader as text),
datetimes aware from PostgreSQL and naive UTC from SQLite. Anything not on a per-turn path
keeps using the ORM.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any


def rows_select(model: Any, fields: tuple[str, ...], where: str, params: list[Any], order: str,
                limit: int | None = None) -> list[tuple]:
    """Rows (tuples in ``fields`` order) of ``model``'s table: ``fields`` are model field names,
    ``where`` SQL over column names with ``%s`` parameters ``params``, ``order`` an ORDER BY list
    of column names (``"id DESC"``), ``limit`` an optional row count. Values come raw from the
    driver: convert JSON with json_column, datetimes with datetime_column, SQLite's 0/1 with bool."""
    from django.db import connection

    meta = model._meta
    columns = ", ".join(f'"{meta.get_field(name).column}"' for name in fields)
    sql = f'SELECT {columns} FROM "{meta.db_table}" WHERE {where} ORDER BY {order}'
    if limit:
        sql += f" LIMIT {int(limit)}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def json_column(value: Any) -> Any:
    """A JSONField value as the driver returns it (text), decoded; None stays None."""
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def datetime_column(value: Any) -> datetime | None:
    """A DateTimeField value as the driver returns it, as an aware datetime: PostgreSQL's aware
    value as is; SQLite's naive UTC (a datetime from Django's declared-type converter, or the text
    ``YYYY-MM-DD HH:MM:SS[.ffffff]``) marked UTC. None stays None."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


#: Rows per INSERT statement of rows_insert (SQLite allows 32,766 parameters per statement).
INSERT_BATCH_PARAMS = 30_000


def rows_insert(model: Any, fields: tuple[str, ...], rows: list[tuple]) -> None:
    """INSERT ``rows`` (tuples in ``fields`` order, model field names) into ``model``'s table as
    multi-row statements, in the caller's transaction (or autocommit). Values are adapted as the
    ORM adapts them — JSONField through ``adapt_json_value`` with the field's encoder,
    DateTimeField through ``adapt_datetimefield_value``, foreign keys and UUIDs through the
    field's ``get_db_prep_save`` — so the rows read back identically;
    other values go to the driver as they are. No defaults are applied and no ids come back: for
    per-turn bulk writes (trace rows, stream frames) whose callers know every column. Raises the
    driver's errors as Django's (IntegrityError on a unique constraint)."""
    from django.db import connection, models

    if not rows:
        return
    ops, meta = connection.ops, model._meta
    adapters = []
    for name in fields:
        field = meta.get_field(name)
        if isinstance(field, models.JSONField):
            adapters.append(lambda v, encoder=field.encoder: ops.adapt_json_value(v, encoder))
        elif isinstance(field, models.DateTimeField):
            adapters.append(ops.adapt_datetimefield_value)
        elif isinstance(field, (models.ForeignKey, models.UUIDField)):
            # a UUID key is 32 hex digits on SQLite, a uuid on PostgreSQL: the field says which
            adapters.append(lambda v, field=field: field.get_db_prep_save(v, connection))
        else:
            adapters.append(None)
    columns = ", ".join(f'"{meta.get_field(name).column}"' for name in fields)
    head = f'INSERT INTO "{meta.db_table}" ({columns}) VALUES '
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per_statement = max(1, INSERT_BATCH_PARAMS // len(fields))
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            batch = rows[start:start + per_statement]
            params = [value if adapt is None else adapt(value) for row in batch for value, adapt in zip(row, adapters)]
            cursor.execute(head + ", ".join([one] * len(batch)), params)
