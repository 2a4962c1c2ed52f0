"""What the in-process profile scripts (bench.profile_proposals, bench.profile_executions) share: a
database of their own next to DATABASE_URL's, the benchmark's settings, and Django set up with or without
approvals.rows' hand-built statements (`--orm-rows`, bench.orm_rows)."""

from __future__ import annotations

import os
import secrets
from typing import Any


def profiling_database() -> Any:
    """Create the profile's own database and point the benchmark's settings at it; drop it afterwards."""
    from .run import Database

    database = Database(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": database.url,
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "PAYMENT_GATEWAY": "local",
            "LOG_LEVEL": "WARNING",
            "BENCH_RUN_ID": f"bench-prof-{secrets.token_hex(3)}",
        }
    )
    database.create()
    return database


def django_setup(*, orm_rows: bool) -> None:
    import django

    if orm_rows:
        from .orm_rows import install

        install()  # before any module imports approvals.rows' names
    django.setup()
