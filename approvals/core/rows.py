"""Fixed-shape statements on the hot paths, with their SQL built once per model instead of per call.

Building and compiling a query with the ORM costs about 0.35 ms of CPU per statement on the benchmark
machine, three to four times the statement's round trip, and the proposal and execution paths run the
same few statements on every call (docs/benchmarks.md). These helpers do what the ORM does for them
(the model's own columns, `pre_save` and `get_db_prep_save` on the way in, the backend's and the
field's converters and `from_db` on the way out), with the SQL text built from the model's metadata
once per process. Values always travel as parameters. Use the ORM everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, TypeVar

from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import AutoField, BigAutoField, Field, Model, SmallAutoField
from django.db.models.constants import OnConflict
from django.db.models.expressions import DatabaseDefault

M = TypeVar("M", bound=Model)
J = TypeVar("J", bound=Model)

_AUTO_FIELDS = (AutoField, BigAutoField, SmallAutoField)


def _db() -> BaseDatabaseWrapper:
    """The default connection itself. Each attribute read through `django.db.connection`, a proxy, looks
    the connection up again in an asgiref local (about 15 µs each, a dozen or more per statement), so the
    helpers look it up once per call."""
    return connections[DEFAULT_DB_ALIAS]


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)


def _column_field(model: type[Model], name: str) -> Field:
    """The model's field of that name that has a column (not a reverse relation or a generic key)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field):
        raise FieldDoesNotExist(f"{model._meta.label}.{name} has no column of its own")
    return field


@contextmanager
def statement_cursor() -> Iterator[Any]:
    """A cursor for one hot-path statement.

    Django's cursor wrapper costs about 40 µs of CPU a statement on the benchmark machine, a third of a
    round trip. When nothing logs or wraps queries (CaptureQueriesContext, DEBUG, `execute_wrapper`
    all do, and then get Django's cursor), the backend's own cursor is used, with what Django's wrapper
    does for a statement kept: the health check, the broken-transaction check and the translation of
    the driver's errors into django.db's.
    """
    db = _db()
    if db.queries_logged or db.execute_wrappers:
        with db.cursor() as cursor:
            yield cursor
        return
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        cursor = db.create_cursor()
        try:
            yield cursor
        finally:
            cursor.close()


@cache
def _insert_fields(model: type[Model]) -> tuple[Field, ...]:
    return tuple(f for f in model._meta.local_concrete_fields if not f.generated and not isinstance(f, _AUTO_FIELDS))


@cache
def _insert_statement(
    model: type[Model], *, rows: int, skip_conflicts: bool, left_to_database: tuple[bool, ...]
) -> tuple[str, tuple[Field, ...]]:
    meta = model._meta
    fields = tuple(f for f, omitted in zip(_insert_fields(model), left_to_database, strict=True) if not omitted)
    on_conflict = OnConflict.IGNORE if skip_conflicts else None
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    returning, _params = connection.ops.return_insert_columns([meta.pk])
    sql = " ".join(
        part
        for part in (
            connection.ops.insert_statement(on_conflict=on_conflict),
            _quoted(meta.db_table),
            "(" + ", ".join(_quoted(f.column) for f in fields) + ")",
            "VALUES " + ", ".join([row] * rows),
            connection.ops.on_conflict_suffix_sql(fields, on_conflict, None, None),
            returning,
        )
        if part
    )
    return sql, fields


def insert_statement(instances: Sequence[Model], *, skip_conflicts: bool = False) -> tuple[str, list[Any]]:
    """The `INSERT ... RETURNING <primary key>` of the instances (all of one model), and its parameters
    (insert_rows runs it). A field left to its `db_default` is left out, so that the column's own
    DEFAULT fills it (it must be left to the database in every row or in none)."""
    model = type(instances[0])
    if skip_conflicts and len(instances) != 1:
        raise ValueError("skip_conflicts needs one row at a time, to know which one went in")
    fields = _insert_fields(model)
    values = [[field.pre_save(instance, add=True) for field in fields] for instance in instances]
    left_to_database = tuple(isinstance(value, DatabaseDefault) for value in values[0])
    if any(tuple(isinstance(value, DatabaseDefault) for value in row) != left_to_database for row in values[1:]):
        raise ValueError("a field must be left to its database default in every row or in none")
    sql, _fields = _insert_statement(
        model, rows=len(instances), skip_conflicts=skip_conflicts, left_to_database=left_to_database
    )
    db = _db()
    params = [
        field.get_db_prep_save(value, connection=db)
        for row in values
        for field, value, omitted in zip(fields, row, left_to_database, strict=True)
        if not omitted
    ]
    return sql, params


def mark_inserted(instances: Sequence[Model], keys: Sequence[Any]) -> None:
    """The instances are saved rows now, with these primary keys where the database chose them."""
    generated_key = isinstance(instances[0]._meta.pk, _AUTO_FIELDS)
    for instance, key in zip(instances, keys, strict=True):
        if generated_key:
            instance.pk = key
        instance._state.adding = False
        instance._state.db = DEFAULT_DB_ALIAS


def insert_rows(instances: Sequence[Model], *, skip_conflicts: bool = False) -> int:
    """INSERT the instances (all of one model) in one statement, as `save(force_insert=True)` would.

    With `skip_conflicts`, a row that a unique constraint refuses is left out instead of raising
    (ON CONFLICT DO NOTHING): no savepoint is needed to go on in the same transaction. Returns how
    many rows went in; each inserted instance is then saved in Django's eyes (its primary key set).
    """
    if not instances:
        return 0
    sql, params = insert_statement(instances, skip_conflicts=skip_conflicts)
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        keys = [row[0] for row in cursor.fetchall()]
    if len(keys) == len(instances):
        mark_inserted(instances, keys)
    return len(keys)


@cache
def _update_statement(model: type[Model], names: tuple[str, ...]) -> tuple[str, tuple[Field, ...]]:
    meta = model._meta
    fields = tuple(_column_field(model, name) for name in names)
    assignments = ", ".join(f"{_quoted(f.column)} = %s" for f in fields)
    return f"UPDATE {_quoted(meta.db_table)} SET {assignments} WHERE {_quoted(meta.pk.column)} = %s", fields


def update_fields(instance: Model, names: Sequence[str]) -> None:
    """UPDATE the named fields of a saved instance, as `save(update_fields=names)` would."""
    sql, fields = _update_statement(type(instance), tuple(names))
    db = _db()
    params = [field.get_db_prep_save(field.pre_save(instance, add=False), connection=db) for field in fields]
    params.append(instance._meta.pk.get_db_prep_value(instance.pk, db))
    with statement_cursor() as cursor:
        cursor.execute(sql, params)


def column_sql(model: type[Model], name: str) -> str:
    """A model field's column, qualified by its table, to refer to from a subquery."""
    return f"{_quoted(model._meta.db_table)}.{_quoted(_column_field(model, name).column)}"


Converters = tuple[list[tuple[Callable[..., Any], Any]], ...]


def _read_columns(model: type[Model]) -> tuple[list[str], tuple[str, ...], Converters]:
    """A model's concrete columns (qualified by its table), their attnames, and each one's converters."""
    table = model._meta.db_table
    columns = model._meta.concrete_fields
    converters = []
    for field in columns:
        column = field.get_col(table)
        field_converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        converters.append([(convert, column) for convert in field_converters])
    selected = [f"{_quoted(table)}.{_quoted(f.column)}" for f in columns]
    return selected, tuple(f.attname for f in columns), tuple(converters)


def fetch_column(model: type[Model], name: str, sql: str, params: Sequence[Any]) -> list[Any]:
    """The first column of every row `sql` selects, holding `model`'s field `name`, converted as the ORM
    converts that field's values (a UUID stored as text comes back a UUID)."""
    db = _db()
    column = _column_field(model, name).get_col(model._meta.db_table)
    converters = db.ops.get_db_converters(column) + column.get_db_converters(db)
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    values = []
    for value, *_rest in rows:
        for convert in converters:
            value = convert(value, column, db)
        values.append(value)
    return values


def _instance_from(
    db: BaseDatabaseWrapper, model: type[M], attnames: tuple[str, ...], converters: Converters, row: Sequence[Any]
) -> M:
    values = []
    for value, field_converters in zip(row, converters, strict=True):
        for convert, column in field_converters:
            value = convert(value, column, db)
        values.append(value)
    return model.from_db(DEFAULT_DB_ALIAS, attnames, values)


@cache
def _select_statement(
    model: type[Model],
    names: tuple[str, ...],
    lock: bool,
    extra_columns: tuple[str, ...],
    joined: type[Model] | None = None,
    joined_on: str | None = None,
) -> tuple[str, tuple[Any, ...], tuple[Field, ...]]:
    table = _quoted(model._meta.db_table)
    selected, attnames, converters = _read_columns(model)
    readers: tuple[Any, ...] = ((model, attnames, converters),)
    source = table
    if joined is not None:
        joined_selected, joined_attnames, joined_converters = _read_columns(joined)
        selected += joined_selected
        readers += ((joined, joined_attnames, joined_converters),)
        joined_table, joined_key = _quoted(joined._meta.db_table), _quoted(joined._meta.pk.column)
        key = _column_field(model, joined_on).column if joined_on else model._meta.pk.column
        source += f" JOIN {joined_table} ON {joined_table}.{joined_key} = {table}.{_quoted(key)}"
    selected += [f"({sql})" for sql in extra_columns]
    where = " AND ".join(f"{table}.{_quoted(_column_field(model, name).column)} = %s" for name in names)
    sql = f"SELECT {', '.join(selected)} FROM {source} WHERE {where}"
    if lock:
        sql += " FOR UPDATE"
    return sql, readers, tuple(_column_field(model, name) for name in names)


def _fetch_row(
    model: type[Model],
    lock: bool,
    extra: dict[str, tuple[str, Sequence[Any]]] | None,
    joined: type[Model] | None,
    equals: dict[str, Any],
    joined_on: str | None = None,
) -> list[Model] | None:
    db = _db()
    lock = lock and db.features.has_select_for_update
    extra = extra or {}
    sql, readers, fields = _select_statement(
        model, tuple(equals), lock, tuple(subquery for subquery, _params in extra.values()), joined, joined_on
    )
    params = [value for _sql, subquery_params in extra.values() for value in subquery_params]
    params += [field.get_db_prep_value(value, db) for field, value in zip(fields, equals.values(), strict=True)]
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    instances, start = [], 0
    for reader_model, attnames, converters in readers:
        instances.append(_instance_from(db, reader_model, attnames, converters, row[start : start + len(attnames)]))
        start += len(attnames)
    for name, value in zip(extra, row[start:], strict=True):
        setattr(instances[0], name, value)
    return instances


def fetch_one(
    model: type[M], *, lock: bool = False, extra: dict[str, tuple[str, Sequence[Any]]] | None = None, **equals: Any
) -> M | None:
    """The one row whose fields equal `equals` (by field name or attname), or None: `.filter(...).first()`
    without the ordering, for lookups by a unique key. `lock` adds FOR UPDATE where the database has it.

    `extra` names scalar subqueries (SQL and its parameters) read in the same statement, as `annotate()`
    would; each becomes an attribute of the instance.
    """
    instances = _fetch_row(model, lock, extra, None, equals)
    return None if instances is None else instances[0]  # type: ignore[return-value]  # the row is of `model`


def fetch_all(model: type[M], **equals: Any) -> list[M]:
    """Every row whose fields equal `equals`, in no particular order: `list(.filter(...))` without the
    ordering, with its SQL built once."""
    db = _db()
    sql, readers, fields = _select_statement(model, tuple(equals), False, ())
    params = [field.get_db_prep_value(value, db) for field, value in zip(fields, equals.values(), strict=True)]
    with statement_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    ((_model, attnames, converters),) = readers
    return [_instance_from(db, model, attnames, converters, row) for row in rows]


def fetch_one_joined(
    model: type[M],
    joined: type[J],
    *,
    lock: bool = False,
    extra: dict[str, tuple[str, Sequence[Any]]] | None = None,
    **equals: Any,
) -> tuple[M, J] | None:
    """As fetch_one, together with the row of `joined` whose primary key is a one-to-one key to it, in one
    statement (`select_related` of a reverse one-to-one, without the ORM's compiling); None when either
    row is missing.

    `lock` locks both rows (FOR UPDATE of the join). It must: under READ COMMITTED, a statement that
    waited for a lock reads the newest version of the rows it locks, but the rows it only joins as its
    snapshot had them before the wait, so an execution read beside its preview's lock alone could be
    one that a concurrent attempt has moved on since (tests/approvals/test_rows.py shows it; four
    concurrent attempts then failed an executed invoice send)."""
    instances = _fetch_row(model, lock, extra, joined, equals)
    if instances is None:
        return None
    return instances[0], instances[1]  # type: ignore[return-value]  # read as `model`, then `joined`


def fetch_one_related(model: type[M], related: str, **equals: Any) -> M | None:
    """As fetch_one, with the row its foreign key `related` points to read in the same statement and cached
    on the instance, as `select_related(related)` would (an inner join: a row whose key is null is not
    found)."""
    field = _column_field(model, related)
    target = field.related_model
    assert isinstance(target, type), "a foreign key's model is resolved once the apps are ready"
    if target is model or field.target_field != target._meta.pk:  # type: ignore[attr-defined]  # a ForeignKey has target_field
        raise ValueError(f"{model._meta.label}.{related} must point to another model's primary key")
    instances = _fetch_row(model, False, None, target, equals, joined_on=related)
    if instances is None:
        return None
    instance, related_instance = instances
    field.set_cached_value(instance, related_instance)  # type: ignore[attr-defined]  # a ForeignKey's
    return instance  # type: ignore[return-value]  # the row is of `model`
