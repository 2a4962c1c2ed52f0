"""What the in-process profile scripts (bench.profile_proposals, bench.profile_executions) share: a
database of their own next to DATABASE_URL's, the benchmark's settings, and Django set up with or without
approvals.core.rows' hand-built statements (`--orm-rows`, bench.orm_rows)."""

from __future__ import annotations

import os
import secrets
from typing import Any


def profiling_database() -> Any:
    """Create the profile's own database and point the benchmark's settings at it; drop it afterwards."""
    from .run import Database, bench_environment

    database = Database(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.update(bench_environment(database.url, f"bench-prof-{secrets.token_hex(3)}"))
    database.create()
    return database


def django_setup(*, orm_rows: bool) -> None:
    import django

    if orm_rows:
        from .orm_rows import install

        install()  # before any module imports approvals.core.rows' names
    django.setup()
