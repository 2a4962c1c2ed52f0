"""Shared fixtures. Tests marked `postgres` need real row locks: on SQLite they are skipped,
unless REQUIRE_POSTGRES=1 (as in CI), where running them on anything else is an error."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from approvals.core.services import agent_session_create
from tests.factories import OrderFactory, UserFactory

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from rest_framework.response import _MonkeyPatchedResponse

    from approvals.models import AgentSession, Preview
    from refunds.models import Order

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ON_POSTGRES:
        return
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        raise pytest.UsageError("REQUIRE_POSTGRES=1 but DATABASE_URL does not point at PostgreSQL")
    skip = pytest.mark.skip(reason="needs PostgreSQL row locks: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _flush_past_the_audit_truncate_trigger() -> Iterator[None]:
    """PostgreSQL refuses TRUNCATE of the audit tables (a statement-level trigger). A transactional test's
    teardown empties every table with TRUNCATE: only there, in the flush's own transaction, the
    triggers are skipped (`SET LOCAL session_replication_role`, as the superuser the tests run as)."""
    if not ON_POSTGRES:
        yield
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        statements = original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET LOCAL session_replication_role = replica", *statements] if statements else statements

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


def seal_all(timeout: float = 30.0) -> int:
    """Seal every audit record there is. On PostgreSQL a record is sealed once no older transaction on
    the server is still running: other test runs on the same server may hold a seal back a moment."""
    import time

    from approvals.audit.seal import audit_seal
    from approvals.models import AuditLeaf, AuditRecord

    sealed, deadline = 0, time.monotonic() + timeout
    while True:
        sealed += audit_seal()
        if AuditLeaf.objects.count() >= AuditRecord.objects.count() or time.monotonic() > deadline:
            return sealed
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _login_counters_start_empty() -> None:
    """Login attempts are counted per client address in the (per-process) cache: one test's wrong
    passwords from the test client's 127.0.0.1 must not pause the next test's logins."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def alice(db: None) -> User:
    return UserFactory.create(username="alice")


@pytest.fixture
def bob(db: None) -> User:
    return UserFactory.create(username="bob")


@pytest.fixture
def o12(alice: User) -> Order:
    """Seed 000: Alice's order in EUR."""
    return OrderFactory.create(number="o-12", customer=alice, currency="EUR", total_minor=1000)


@pytest.fixture
def o17(bob: User) -> Order:
    """Seed 000: Bob's order in USD."""
    return OrderFactory.create(number="o-17", customer=bob, currency="USD", total_minor=1000)


@pytest.fixture
def ord4417(alice: User) -> Order:
    """Seed 001: delivered two days after it was placed."""
    return OrderFactory.create(number="ORD-4417", customer=alice, currency="EUR", total_minor=2499)


@contextmanager
def tampering() -> Iterator[None]:
    """Let a test edit what the database normally refuses to change (audit records, a preview's
    content), as someone with the database's superuser rights could: on PostgreSQL the guarding
    triggers are skipped for the duration, so the application's own checks are what is tested."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = origin")


class AgentClient(APIClient):
    """An API client with an agent session's bearer token, and the session it belongs to."""

    agent_session: AgentSession
    token: str


def agent_client_for(user: User, tools: Iterable[str] = ("refund_order",), **kwargs: Any) -> AgentClient:
    session, token = agent_session_create(user=user, tools=list(tools), **kwargs)
    client = AgentClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.agent_session = session
    client.token = token
    return client


@pytest.fixture
def alice_agent(alice: User) -> AgentClient:
    return agent_client_for(alice)


@pytest.fixture
def bob_agent(bob: User) -> AgentClient:
    return agent_client_for(bob)


def events(preview: Preview) -> list[str]:
    """The preview's audit events, in order."""
    from approvals.models import AuditRecord

    return list(AuditRecord.objects.filter(preview=preview).order_by("id").values_list("event", flat=True))


def assert_nothing_moved(order: Order, *, refunded_minor: int = 0, version: int = 1) -> None:
    """No refund reached the ledger or the local gateway, and the order is as it was."""
    from refunds.models import LocalGatewayRefund, Refund

    order.refresh_from_db()
    assert Refund.objects.count() == 0
    assert LocalGatewayRefund.objects.count() == 0
    assert order.refunded_minor == refunded_minor
    assert order.version == version


def propose(
    client: APIClient, name: str = "refund_order", headers: dict[str, str] | None = None, **arguments: Any
) -> _MonkeyPatchedResponse:
    """POST a tool call with object arguments; returns the response."""
    # A test response (with .json()): the stubs type APIClient.post as returning a Request.
    return client.post(
        "/api/agent/tool-calls", {"name": name, "arguments": arguments}, format="json", headers=headers or {}
    )


def give_up_execution(preview: Preview, *, effect_possible: bool = False, error: str = "timeout") -> Preview:
    """Drive an approved preview's execution as a worker that gave up after transient errors: with
    `effect_possible` the effect is unknown, else nothing was done (a retryable refusal)."""
    from django.db import transaction

    from approvals.core.errors import TransientExecutionError
    from approvals.core.services import Outcome, execution_attempt_failed, execution_transition
    from approvals.models import Execution, Preview

    with transaction.atomic():
        locked = Preview.objects.select_for_update().get(pk=preview.pk)
        execution = Execution.objects.select_for_update().get(pk=preview.pk)
        execution_transition(execution, locked, Outcome.IN_PROGRESS, token=None, lease_owner="test-worker")
    failure = TransientExecutionError(f"Gave up after 6 attempts: {error}", effect_possible=effect_possible)
    failure.fencing_token = execution.fencing_token
    execution_attempt_failed(preview_id=preview.pk, error=failure, will_retry=False)
    preview.refresh_from_db()
    return preview


def execution_callbacks(callbacks: Iterable[Callable[[], Any]]) -> list[Callable[[], Any]]:
    """The on_commit callbacks that publish an execution, without the transition listeners' and the outbox's
    (webhooks, notifications)."""
    return [
        callback
        for callback in callbacks
        if not getattr(callback, "is_transition_notice", False) and not getattr(callback, "is_outbox_dispatch", False)
    ]
