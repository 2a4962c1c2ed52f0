"""tests/event_loops.py: connections opened under an event loop on the test's thread are closed with it."""

import asyncio

import pytest
from django.db import connections

from tests.event_loops import run

# SQLite never closes an in-memory test database's connection; the teardown that failed was PostgreSQL's.
pytestmark = pytest.mark.postgres


def test_a_connection_opened_in_a_task_the_coroutine_starts_is_closed_with_the_loop(transactional_db, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the ORM's synchronous calls, under the loop

    async def queried_in_a_task():
        def query():
            opened = connections["default"]
            opened.ensure_connection()
            return opened

        async def task():
            return query()

        return await asyncio.create_task(task())

    opened = run(queried_in_a_task())
    assert opened is not connections["default"]  # the loop's own, which the teardown would not see
    assert opened.connection is None
