"""The browser tests' helpers (tests/browser.py)."""

import os

import pytest
from django.db import connections

from tests.browser import chromium, requires_chromium

pytestmark = [pytest.mark.browser, requires_chromium]


# SQLite never closes an in-memory test database's connection; the teardown that failed was PostgreSQL's.
@pytest.mark.postgres
def test_connections_opened_while_chromium_runs_are_closed_with_it(transactional_db):
    """Playwright's event loop gives the connections opened under it a context of their own, which the
    test database's teardown never sees: left open, one kept PostgreSQL from dropping the database."""
    with chromium():
        opened = connections["default"]
        opened.ensure_connection()
        assert opened.connection is not None
    assert opened.connection is None


def test_the_orm_is_allowed_under_playwrights_loop_only_while_chromium_runs(monkeypatch):
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    with chromium():
        assert os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] == "true"
    assert "DJANGO_ALLOW_ASYNC_UNSAFE" not in os.environ
