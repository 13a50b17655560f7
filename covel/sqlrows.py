"""Plain SQL over model tables for per-turn hot paths (issue 18).

Django builds and compiles a queryset in Python on every evaluation: for the handful of reads a
turn makes every time (the session snapshot, the auto snapshot's capture) that was about half of
their CPU in the issue 18 profile, more than the database's own work. ``rows_select_many`` issues
several such SELECTs as ONE plain-SQL statement over the models' table and column names (so a
renamed column or table follows the model), and ``json_column`` / ``datetime_column`` convert
raw values as the fields would: JSON arrives as text on both backends (Django registers jsonb's
loader as text), datetimes aware from PostgreSQL and naive UTC from SQLite. Anything not on a per-turn path
keeps using the ORM.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

from covel import jsontext


class RowsQuery(NamedTuple):
    """One read of rows_select_many: rows of ``model``'s table, ``fields`` in this order (model
    field names); ``where`` SQL over column names with ``%s`` parameters ``params``; ``order``
    an ORDER BY list of column names (``"id DESC"``, ``"created_at, id"``); ``limit`` an optional
    row count."""

    model: Any
    fields: tuple[str, ...]
    where: str
    params: list[Any]
    order: str
    limit: int | None = None


def rows_select_many(queries: list[RowsQuery], scalars: tuple[tuple[str, list[Any]], ...] = ()) -> list[Any]:
    """The rows of every query in ``queries`` read by ONE statement (issue 18: a turn's session
    snapshot was nine round trips): each query becomes a scalar subquery that aggregates its rows
    into a JSON array of arrays (``json_group_array`` on SQLite, ``json_agg`` on PostgreSQL), in
    the query's order. Returns, per query, its rows as lists in ``fields`` order, with values as
    JSON gives them: JSONField values decoded already (do not json_column them again),
    datetimes as ISO text (datetime_column reads it), SQLite booleans as 0/1 (use bool), UUIDs
    as text. ``scalars``: further ``(sql, params)`` scalar subqueries (parenthesised SELECTs of one
    value) read by the same statement; their raw values follow the row lists in the result.
    Hand-rolled because neither Django nor the drivers batch unrelated SELECTs into
    one round trip."""
    from django.db import connection, models

    if not queries and not scalars:
        return []
    postgres = connection.vendor == "postgresql"
    parts, params = [], []
    for query in queries:
        meta = query.model._meta
        wanted = []
        for name in query.fields:
            field = meta.get_field(name)
            column = f's."{field.column}"'
            if isinstance(field, models.JSONField) and not postgres:
                column = f"json({column})"  # stored as text: embed it as JSON, not as a string
            wanted.append(column)
        order_columns = [part.split()[0] for part in query.order.split(",")]
        inner_columns = list(dict.fromkeys([f'"{meta.get_field(name).column}"' for name in query.fields]
                                           + [f'"{column.strip()}"' for column in order_columns]))
        inner = f'SELECT {", ".join(inner_columns)} FROM "{meta.db_table}" WHERE {query.where} ORDER BY {query.order}'
        if query.limit:
            inner += f" LIMIT {int(query.limit)}"
        if postgres:
            # json_agg's own ORDER BY: the subquery's order is not an aggregate's guarantee.
            outer_order = ", ".join(f"s.{part.strip()}" for part in query.order.split(","))
            parts.append(f"(SELECT coalesce(json_agg(json_build_array({', '.join(wanted)}) ORDER BY {outer_order}), "
                         f"'[]'::json)::text FROM ({inner}) s)")
        else:
            # SQLite 3.40 has no ORDER BY inside an aggregate; an ORDERed subquery under an
            # aggregate is not flattened, so json_group_array reads it in that order.
            parts.append(f"(SELECT json_group_array(json_array({', '.join(wanted)})) FROM ({inner}) s)")
        params.extend(query.params)
    for sql, scalar_params in scalars:
        parts.append(sql)
        params.extend(scalar_params)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    count = len(queries)
    return [jsontext.loads(value) if value else [] for value in row[:count]] + list(row[count:])


def model_from_row(model: Any, fields: tuple[str, ...], values: list[Any]) -> Any:
    """An instance of ``model`` as the ORM loads it (``Model.from_db``: saved, not adding) from one
    rows_select_many row: ``values`` in ``fields`` order (model field names, every concrete field
    of the model), datetimes read by datetime_column, SQLite's 0/1 booleans as bool, JSON values
    as decoded. For a row read together with others in one statement (the turn's session row)."""
    from django.db import connection, models

    meta = model._meta
    names, converted = [], []
    for name, value in zip(fields, values):
        field = meta.get_field(name)
        if isinstance(field, models.DateTimeField):
            value = datetime_column(value)
        elif isinstance(field, models.BooleanField) and value is not None:
            value = bool(value)
        names.append(field.attname)
        converted.append(value)
    return model.from_db(connection.alias, names, converted)


def json_column(value: Any) -> Any:
    """A JSONField value as the driver returns it (text), decoded; None stays None."""
    return jsontext.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


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


def rows_insert(model: Any, fields: tuple[str, ...], rows: list[tuple], *,
                prefix: tuple[str, list[Any]] | None = None) -> None:
    """INSERT ``rows`` (tuples in ``fields`` order, model field names) into ``model``'s table as
    multi-row statements, in the caller's transaction (or autocommit). Values are adapted as the
    ORM adapts them — JSONField through ``adapt_json_value`` with the field's encoder,
    DateTimeField through ``adapt_datetimefield_value``, foreign keys and UUIDs through the
    field's ``get_db_prep_save`` — so the rows read back identically;
    other values go to the driver as they are. No defaults are applied and no ids come back: for
    per-turn bulk writes (trace rows, stream frames) whose callers know every column. Raises the
    driver's errors as Django's (IntegrityError on a unique constraint). ``prefix``: ``(sql,
    params)`` put before the first INSERT, e.g. a PostgreSQL ``WITH x AS (UPDATE …)`` that
    runs in the same statement.

    PostgreSQL takes the rows as ONE JSON parameter (``json_populate_recordset`` over the table's
    row type) instead of a parameter per value: psycopg parses a query of more than 50 parameters
    with a Python regex on every execute and adapts each value in Python, ~12% of a worker's CPU
    per turn (issue 18 cluster profile), while orjson encodes the rows in one C call and the server
    parses them. A NULL JSON value is stored as JSON ``null``, as on SQLite and as before."""
    from django.db import connection

    if not rows:
        return
    meta = model._meta
    adapters = _adapters(model, fields)
    columns = ", ".join(f'"{meta.get_field(name).column}"' for name in fields)
    if connection.vendor == "postgresql" and _recordset_fits(model, fields):
        _rows_insert_recordset(model, fields, rows, adapters, columns, prefix)
        return
    head = f'INSERT INTO "{meta.db_table}" ({columns}) VALUES '
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per_statement = max(1, INSERT_BATCH_PARAMS // len(fields))
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            batch = rows[start:start + per_statement]
            params = [value if adapt is None else adapt(value) for row in batch for value, adapt in zip(row, adapters)]
            sql = head + ", ".join([one] * len(batch))
            if prefix is not None and start == 0:
                sql, params = prefix[0] + " " + sql, [*prefix[1], *params]
            cursor.execute(sql, params)


def _recordset_fits(model: Any, fields: tuple[str, ...]) -> bool:
    """Whether every field of ``fields`` round-trips through JSON text unchanged: not binary, and
    JSON without a custom encoder (those keep the per-value parameters)."""
    from django.db import models

    meta = model._meta
    for name in fields:
        field = meta.get_field(name)
        if isinstance(field, models.BinaryField) or (isinstance(field, models.JSONField) and field.encoder is not None):
            return False
    return True


def _rows_insert_recordset(model: Any, fields: tuple[str, ...], rows: list[tuple], adapters: list[Any], columns: str,
                           prefix: tuple[str, list[Any]] | None) -> None:
    """rows_insert on PostgreSQL: one statement, the rows as one JSON array of objects keyed by
    column (covel.jsontext: datetimes as ``str(datetime)``, UUIDs as canonical text), read by the
    columns' own input functions."""
    from django.db import connection, models

    meta = model._meta
    table_columns = [meta.get_field(name).column for name in fields]
    picks = []
    plain: list[Any] = []  # per field: None = the value as it is, else its adapter (FK/UUID prep)
    for name, column, adapt in zip(fields, table_columns, adapters):
        field = meta.get_field(name)
        if isinstance(field, models.JSONField):
            picks.append(f"coalesce(r.\"{column}\", 'null'::jsonb)")
            plain.append(None)
        else:
            picks.append(f'r."{column}"')
            plain.append(None if isinstance(field, models.DateTimeField) else adapt)
    data = [{column: value if adapt is None else adapt(value) for column, value, adapt in zip(table_columns, row, plain)}
            for row in rows]
    sql = (f'INSERT INTO "{meta.db_table}" ({columns}) SELECT {", ".join(picks)} '
           f'FROM json_populate_recordset(NULL::"{meta.db_table}", %s::json) AS r')
    params: list[Any] = [jsontext.dumps(data)]
    if prefix is not None:
        sql, params = prefix[0] + " " + sql, [*prefix[1], *params]
    with _server_binding_cursor(connection) as cursor:
        cursor.execute(sql, params)


def _server_binding_cursor(connection: Any) -> Any:
    """A Django cursor (the connection's execute wrappers and query log apply) over a psycopg
    server-binding ``Cursor``: the parameters travel apart from the statement. Django's psycopg
    cursors bind on the client, quoting every value into the SQL text; for the recordset's one
    JSON parameter (tens of kB a turn) that quoting was ~5% of a hosted worker's CPU. Only this
    statement's shape (typed ``%s::json`` and the prefix's plain values) is known to bind the same
    both ways, so the connection's own cursors stay as configured. psycopg prepares the statement
    after the connection's ``prepare_threshold`` uses (5 by default): one plan per table and
    connection, which PostgreSQL re-plans by itself after a migration."""
    import psycopg

    connection.ensure_connection()
    # _prepare_cursor is how Django's own cursor() wraps a driver cursor (thread check, debug log).
    return connection._prepare_cursor(psycopg.Cursor(connection.connection))


def rows_update(model: Any, fields: tuple[str, ...], rows: list[tuple]) -> None:
    """UPDATE ``fields`` (model field names) of existing rows of ``model``: each row of ``rows`` is
    its new values in ``fields`` order followed by its primary key. ONE executemany (PostgreSQL's
    driver pipelines it into one round trip; SQLite loops in C) instead of ``bulk_update``'s
    CASE WHEN per field and row, which Django builds in Python. Values are adapted as in
    rows_insert; no ``auto_now`` is applied: pass the timestamp."""
    from django.db import connection

    if not rows:
        return
    meta = model._meta
    adapters = _adapters(model, fields) + [None]
    assignments = ", ".join(f'"{meta.get_field(name).column}" = %s' for name in fields)
    sql = f'UPDATE "{meta.db_table}" SET {assignments} WHERE "{meta.pk.column}" = %s'
    params = [[value if adapt is None else adapt(value) for value, adapt in zip(row, adapters)] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def rows_delete(model: Any, pks: list[Any]) -> None:
    """DELETE the rows of ``model`` whose primary key is in ``pks`` (one statement; no signals,
    no cascades: for tables nothing references)."""
    from django.db import connection

    if not pks:
        return
    meta = model._meta
    marks = ", ".join(["%s"] * len(pks))
    with connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM "{meta.db_table}" WHERE "{meta.pk.column}" IN ({marks})', list(pks))


def _adapters(model: Any, fields: tuple[str, ...]) -> list[Any]:
    """Per field of ``fields``: the callable that adapts a value as the ORM would for the driver,
    or None where the driver takes the value as it is (see rows_insert)."""
    from django.db import connection, models

    ops, meta = connection.ops, model._meta
    adapters = []
    for name in fields:
        field = meta.get_field(name)
        if isinstance(field, models.JSONField) and field.encoder is None:
            adapters.append(_json_adapter(connection))
        elif isinstance(field, models.JSONField):
            adapters.append(lambda v, encoder=field.encoder: ops.adapt_json_value(v, encoder))
        elif isinstance(field, models.DateTimeField):
            adapters.append(ops.adapt_datetimefield_value)
        elif isinstance(field, (models.ForeignKey, models.UUIDField)):
            # a UUID key is 32 hex digits on SQLite, a uuid on PostgreSQL: the field says which
            adapters.append(lambda v, field=field: field.get_db_prep_save(v, connection))
        else:
            adapters.append(None)
    return adapters


def _json_adapter(connection) -> Any:
    """A JSONField value (no custom encoder) for the driver, as ``adapt_json_value`` makes it but
    encoded by covel.jsontext (orjson; issue 18: a turn's ~80 trace rows and ~120 frames were the
    largest JSON encoding cost): SQLite stores the text, psycopg gets a ``Jsonb`` that encodes with it."""
    if connection.vendor == "postgresql":
        from psycopg.types.json import Jsonb

        return lambda v: Jsonb(v, dumps=jsontext.dumps_bytes)
    return jsontext.dumps


def set_clause(model: Any, values: dict[str, Any]) -> tuple[str, list[Any]]:
    """``"col" = %s, …`` for ``values`` ({model field name: value}) and its parameters, each value
    adapted by its field's ``get_db_prep_save`` (JSON, datetimes, NULL as the ORM writes them):
    for the hand-written UPDATEs of per-turn statements."""
    from django.db import connection

    parts, params = [], []
    for name, value in values.items():
        field = model._meta.get_field(name)
        parts.append(f'"{field.column}" = %s')
        params.append(field.get_db_prep_save(value, connection))
    return ", ".join(parts), params
