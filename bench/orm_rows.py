"""The plain ORM in place of approvals.core.rows' hand-built statements, to measure what they buy.

`install()` replaces `fetch_one`, `fetch_one_joined`, `fetch_all`, `insert_rows`, `update_fields` and
`statement_cursor` in
`approvals.core.rows` by what the ORM does for the same call, before any module imports them (call it before
`django.setup()`). The profile scripts take `--orm-rows` for it: the difference in CPU per proposal and
per execution is the hand-built statements' gain (docs/benchmarks.md keeps them only where it is about
5 % or more).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


def install() -> None:
    from django.db import IntegrityError, connection, transaction
    from django.db.models.expressions import RawSQL

    import approvals.core.rows as rows

    def fetch_one(model: Any, *, lock: bool = False, extra: dict[str, Any] | None = None, **equals: Any) -> Any:
        queryset = model._default_manager.filter(**equals)
        if lock:
            queryset = queryset.select_for_update()
        if extra:
            queryset = queryset.annotate(**{name: RawSQL(sql, params) for name, (sql, params) in extra.items()})
        return next(iter(queryset[:1]), None)

    def fetch_one_joined(
        model: Any, joined: Any, *, lock: bool = False, extra: dict[str, Any] | None = None, **equals: Any
    ) -> Any:
        # The ORM joins a reverse one-to-one with an outer join, which PostgreSQL can't lock: two queries.
        instance = fetch_one(model, lock=lock, extra=extra, **equals)
        if instance is None:
            return None
        related = fetch_one(joined, lock=lock, pk=instance.pk)
        return None if related is None else (instance, related)

    def fetch_all(model: Any, **equals: Any) -> list[Any]:
        return list(model._default_manager.filter(**equals))

    def insert_rows(instances: Sequence[Any], *, skip_conflicts: bool = False) -> int:
        if not skip_conflicts:
            type(instances[0])._default_manager.bulk_create(instances)
            return len(instances)
        try:
            with transaction.atomic():
                instances[0].save(force_insert=True)
        except IntegrityError:
            return 0
        return 1

    def update_fields(instance: Any, names: Sequence[str]) -> None:
        instance.save(update_fields=list(names))

    @contextmanager
    def statement_cursor() -> Iterator[Any]:
        with connection.cursor() as cursor:
            yield cursor

    rows.fetch_one = fetch_one  # type: ignore[assignment]  # the measurement's stand-in
    rows.fetch_one_joined = fetch_one_joined  # type: ignore[assignment]  # the measurement's stand-in
    rows.fetch_all = fetch_all  # type: ignore[assignment]  # the measurement's stand-in
    rows.insert_rows = insert_rows
    rows.update_fields = update_fields
    rows.statement_cursor = statement_cursor  # type: ignore[assignment]  # the measurement's stand-in
