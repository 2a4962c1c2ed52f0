"""Trigram indexes for the console's substring search, on PostgreSQL only.

The console finds previews by a part of an order or invoice number, of a customer's username or email, or
of a payload field an action makes searchable (`Action.searchable_payload_fields`). Django's `icontains`
is `UPPER(column::text) LIKE UPPER('%…%')`, which no B-tree index serves: on a million previews each
search was a scan of the whole history (docs/scaling.md). A GIN index over the same expression with
pg_trgm's `gin_trgm_ops` serves that `LIKE` for a term of three characters or more.

`TrigramSearchIndex` is a migration operation: the engine's migration indexes the subject and the
customers' names, and an action that declares a searchable payload field indexes it in a migration of its
own (invoices does for `recipient`). The index is built `CONCURRENTLY` (the migration must say
`atomic = False`), so writes go on while it is built; on SQLite the operation does nothing.
"""

from __future__ import annotations

from typing import Any

from django.db.migrations.operations.base import Operation


def payload_field_expression(field: str) -> str:
    """The SQL Django writes for `payload__<field>__icontains`, without the table's name."""
    return f"UPPER((\"payload\" ->> '{field}')::text)"


def column_expression(column: str) -> str:
    """The SQL Django writes for `<column>__icontains`, without the table's name."""
    return f'UPPER("{column}"::text)'


class TrigramSearchIndex(Operation):
    reversible = True
    reduces_to_sql = False

    def __init__(self, name: str, model: str, expression: str) -> None:
        self.name = name
        self.model = model  # "app_label.ModelName", read from the migration state for its table's name
        self.expression = expression

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (
            self.__class__.__qualname__,
            [],
            {"name": self.name, "model": self.model, "expression": self.expression},
        )

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # a database index only: the models do not declare it

    def _table(self, state: Any) -> str:
        app_label, model_name = self.model.split(".")
        return str(state.apps.get_model(app_label, model_name)._meta.db_table)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        quote = schema_editor.quote_name
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(self.name)} ON {quote(self._table(to_state))} "
            f"USING gin (({self.expression}) gin_trgm_ops)"
        )

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.name)}")

    def describe(self) -> str:
        return f"Trigram search index {self.name} on {self.model}"
