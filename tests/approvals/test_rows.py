"""The hot paths' statements (approvals/core/rows.py, amount_in_flight) give what the ORM would."""

import uuid
from contextlib import nullcontext
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.core.rows import (
    column_sql,
    fetch_all,
    fetch_column,
    fetch_one,
    fetch_one_joined,
    fetch_one_related,
    insert_rows,
    statement_cursor,
    update_fields,
)
from approvals.core.selectors import amount_in_flight, amount_in_flight_expression, session_open_siblings
from approvals.models import (
    AgentSession,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    IdempotencyRecord,
    Preview,
    PreviewStatus,
)
from refunds.models import Order
from tests.conftest import agent_client_for


def preview_for(order, *, amount_minor=100, status=PreviewStatus.AWAITING_CUSTOMER, code="", proposal_key=None):
    return Preview(
        action="refund_order",
        actor=order.customer,
        subject_type="order",
        subject_id=order.number,
        subject_version=order.version,
        amount_minor=amount_minor,
        currency=order.currency,
        payload={"order_id": order.number, "amount_minor": amount_minor, "reason": "damaged", "note": "ü €"},
        required_approvals=["customer"],
        status=status,
        failure_code=code,
        proposal_key=proposal_key or uuid.uuid4().hex,
        digest="d" * 64,
        expires_at=timezone.now() + timedelta(minutes=15),
    )


def with_execution(preview, outcome):
    insert_rows([preview])
    Execution.objects.create(preview=preview, outcome=outcome, deadline=timezone.now() + timedelta(days=1))
    return preview


def test_insert_rows_writes_what_save_would(o12):
    preview = preview_for(o12)

    assert insert_rows([preview]) == 1

    assert preview._state.adding is False
    stored = Preview.objects.get(pk=preview.pk)
    assert stored.payload == preview.payload
    assert stored.created_at == preview.created_at  # auto_now_add ran, as in save()
    assert stored.created_at is not None and stored.status_changed_at is not None
    assert (stored.actor_id, stored.amount_minor, stored.required_approvals) == (o12.customer_id, 100, ["customer"])


def test_insert_rows_sets_generated_keys_in_order(alice):
    session = agent_client_for(alice).agent_session
    records = [
        IdempotencyRecord(
            agent_session=session, key=f"k{i}", request_fingerprint="f", response_status=0, response_body={"i": i}
        )
        for i in range(3)
    ]

    assert insert_rows(records) == 3

    assert [IdempotencyRecord.objects.get(pk=r.pk).response_body for r in records] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_skip_conflicts_leaves_out_a_refused_row_and_the_transaction_goes_on(o12):
    first = preview_for(o12, proposal_key="same")
    twin = preview_for(o12, proposal_key="same")
    with transaction.atomic():
        assert insert_rows([first], skip_conflicts=True) == 1
        assert insert_rows([twin], skip_conflicts=True) == 0
        assert twin._state.adding is True
        assert Preview.objects.count() == 1  # the transaction is still usable

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows([preview_for(o12, proposal_key="same")])


def test_update_fields_writes_only_the_named_fields_and_moves_auto_now(o12):
    preview = preview_for(o12)
    insert_rows([preview])
    before = Preview.objects.get(pk=preview.pk).status_changed_at
    preview.status, preview.failure_reason = PreviewStatus.DECLINED, "not written"

    update_fields(preview, ["status", "status_changed_at"])

    stored = Preview.objects.get(pk=preview.pk)
    assert stored.status == PreviewStatus.DECLINED
    assert stored.failure_reason == ""
    assert stored.status_changed_at > before


def test_fetch_one_reads_what_the_orm_reads(o12):
    preview = preview_for(o12)
    insert_rows([preview])

    fetched = fetch_one(Preview, id=preview.pk)
    expected = Preview.objects.get(pk=preview.pk)

    assert fetched is not None and fetched._state.adding is False
    for field in Preview._meta.concrete_fields:
        assert getattr(fetched, field.attname) == getattr(expected, field.attname), field.name
    assert fetch_one(Order, number=o12.number, customer_id=o12.customer_id).pk == o12.pk
    assert fetch_one(Order, number=o12.number, customer_id=o12.customer_id + 1) is None
    assert fetch_one(Order, number="no-such-order", customer_id=o12.customer_id) is None


def test_fetch_one_joined_reads_both_rows_in_one_statement_as_the_orm_would(o12):
    preview = with_execution(preview_for(o12, status=PreviewStatus.APPROVED), ExecutionOutcome.IN_PROGRESS)
    other = with_execution(preview_for(o12, status=PreviewStatus.APPROVED), ExecutionOutcome.PENDING)

    with CaptureQueriesContext(connection) as queries:  # in the test's transaction, which the lock needs
        fetched = fetch_one_joined(Preview, Execution, lock=True, id=preview.pk)

    assert len(queries) == 1
    assert fetched is not None
    fetched_preview, fetched_execution = fetched
    expected = Preview.objects.select_related("execution").get(pk=preview.pk)
    for field in Preview._meta.concrete_fields:
        assert getattr(fetched_preview, field.attname) == getattr(expected, field.attname), field.name
    for field in Execution._meta.concrete_fields:
        assert getattr(fetched_execution, field.attname) == getattr(expected.execution, field.attname), field.name
    assert fetched_execution.outcome == ExecutionOutcome.IN_PROGRESS
    assert fetch_one_joined(Preview, Execution, id=other.pk)[1].outcome == ExecutionOutcome.PENDING
    if connection.vendor == "postgresql":
        assert queries[0]["sql"].endswith("FOR UPDATE")  # both rows: see fetch_one_joined


def test_fetch_all_reads_every_matching_row_as_the_orm_would(alice_agent):
    insert_rows(
        [
            IdempotencyRecord(
                agent_session=alice_agent.agent_session,
                key=f"k{i}",
                request_fingerprint="f",
                response_status=i,
                response_body={"i": i},
            )
            for i in range(3)
        ]
    )

    fetched = fetch_all(IdempotencyRecord, agent_session_id=alice_agent.agent_session.pk)
    expected = list(IdempotencyRecord.objects.filter(agent_session=alice_agent.agent_session))

    assert len(fetched) == 3
    for field in IdempotencyRecord._meta.concrete_fields:
        assert sorted(str(getattr(r, field.attname)) for r in fetched) == sorted(
            str(getattr(r, field.attname)) for r in expected
        ), field.name
    assert all(r._state.adding is False for r in fetched)
    assert fetch_all(IdempotencyRecord, agent_session_id=alice_agent.agent_session.pk, key="none") == []


def test_fetch_one_related_reads_the_row_and_its_foreign_key_in_one_statement(alice_agent):
    session = alice_agent.agent_session
    with CaptureQueriesContext(connection) as queries:
        fetched = fetch_one_related(AgentSession, "user", token_hash=session.token_hash)
        assert fetched.user.username == session.user.username  # cached: no second statement
    assert len(queries) == 1
    expected = AgentSession.objects.select_related("user").get(pk=session.pk)
    for model_field, fetched_row, expected_row in [
        *((f, fetched, expected) for f in AgentSession._meta.concrete_fields),
        *((f, fetched.user, expected.user) for f in type(expected.user)._meta.concrete_fields),
    ]:
        assert getattr(fetched_row, model_field.attname) == getattr(expected_row, model_field.attname), model_field
    assert fetch_one_related(AgentSession, "user", token_hash="0" * 64) is None
    with pytest.raises(ValueError):
        fetch_one_related(Preview, "supersedes", id=uuid.uuid4())  # a key to its own model


def test_a_proposals_open_siblings_are_the_sessions_other_open_previews_on_it_oldest_first(o12, ord4417, alice_agent):
    session = alice_agent.agent_session

    def proposed(order, status=PreviewStatus.AWAITING_CUSTOMER, agent_session=session):
        preview = preview_for(order, status=status)
        preview.agent_session = agent_session
        insert_rows([preview])
        return preview

    first, second, this = proposed(o12), proposed(o12, PreviewStatus.APPROVED), proposed(o12)
    proposed(o12, PreviewStatus.DECLINED)
    proposed(ord4417)
    proposed(o12, agent_session=None)
    Preview.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    Preview.objects.filter(pk=second.pk).update(created_at=timezone.now() - timedelta(minutes=1))

    siblings = session_open_siblings(this)
    assert siblings == [first.pk, second.pk] and all(isinstance(pk, uuid.UUID) for pk in siblings)
    assert session_open_siblings(first) == [second.pk, this.pk]
    assert fetch_column(Preview, "id", "SELECT id FROM approvals_preview WHERE id = %s", [str(uuid.uuid4())]) == []


def test_fetch_one_joined_is_none_without_the_joined_row(o12):
    preview = preview_for(o12)
    insert_rows([preview])  # no execution yet

    assert fetch_one_joined(Preview, Execution, id=preview.pk) is None
    assert fetch_one_joined(Preview, Execution, id=uuid.uuid4()) is None


def test_insert_rows_leaves_a_db_default_to_the_database(o12):
    record = AuditRecord(event="proposed", subject_type="order", subject_id=o12.number, result={"n": 1})

    assert insert_rows([record]) == 1

    stored = AuditRecord.objects.get(pk=record.pk)
    assert stored.result == {"n": 1}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_xact_id_if_assigned()::text::bigint")
            in_test_transaction = cursor.fetchone()[0]
        assert stored.transaction_id == in_test_transaction  # the column's DEFAULT, pg_current_xact_id()
    else:
        assert stored.transaction_id == 0


@pytest.mark.parametrize(
    ("outcome", "counts"),
    [
        (ExecutionOutcome.PENDING, False),  # nothing is reserved until the checks passed under lock
        (ExecutionOutcome.IN_PROGRESS, True),
        (ExecutionOutcome.EFFECT_UNKNOWN, True),
        (ExecutionOutcome.EFFECT_UNRECORDED, True),
        (ExecutionOutcome.SUCCEEDED, False),  # in the order's refunded amount instead
        (ExecutionOutcome.REFUSED_BEFORE_EFFECT, False),
        (ExecutionOutcome.FAILED_AFTER_CHECK, False),
    ],
)
def test_the_amount_in_flight_counts_executions_whose_effect_may_exist_unrecorded(o12, ord4417, outcome, counts):
    with_execution(preview_for(o12, amount_minor=300, status=PreviewStatus.APPROVED), outcome)
    in_progress = ExecutionOutcome.IN_PROGRESS
    always = with_execution(preview_for(o12, amount_minor=40, status=PreviewStatus.APPROVED), in_progress)
    with_execution(preview_for(ord4417, amount_minor=5000, status=PreviewStatus.APPROVED), in_progress)
    insert_rows([preview_for(o12, amount_minor=700, status=PreviewStatus.AWAITING_CUSTOMER)])  # no execution
    expected = 340 if counts else 40

    assert amount_in_flight(subject_type="order", subject_id=o12.number) == expected
    assert amount_in_flight(subject_type="order", subject_id=o12.number, exclude=always.pk) == expected - 40
    assert amount_in_flight(subject_type="order", subject_id=o12.number, exclude=str(always.pk)) == expected - 40
    in_flight = amount_in_flight_expression(subject_type="order", subject_id_field="number")
    order = Order.objects.annotate(in_flight_minor=in_flight).get(number=o12.number, customer_id=o12.customer_id)
    assert order.in_flight_minor == expected
    assert order.remaining_minor == o12.remaining_minor


@pytest.mark.parametrize("logged", [False, True], ids=["driver cursor", "Django cursor, queries logged"])
def test_a_statement_error_is_djangos_whichever_cursor_runs_it(o12, logged):
    insert_rows([preview_for(o12, proposal_key="same")])
    with CaptureQueriesContext(connection) if logged else nullcontext() as queries:
        with pytest.raises(IntegrityError), transaction.atomic():
            insert_rows([preview_for(o12, proposal_key="same")])
    if logged:
        assert any("INSERT" in q["sql"] for q in queries.captured_queries)
    assert Preview.objects.count() == 1  # the connection goes on


def test_a_statement_cursor_answers_like_djangos(o12):
    with statement_cursor() as cursor:
        cursor.execute(f"SELECT {column_sql(Order, 'currency')} FROM {Order._meta.db_table} WHERE id = %s", [o12.pk])
        assert cursor.fetchone() == ("EUR",)


@pytest.mark.postgres
def test_a_locked_join_waited_for_reads_the_newest_joined_row(transactional_db, o12):
    """Under READ COMMITTED a statement that waited for a row lock reads the newest version of the rows it
    locks, but only joins the others as its snapshot had them: fetch_one_joined locks both, so an attempt
    that waited for another attempt's preview lock sees the execution that attempt left."""
    import threading
    import time

    from django.db import connections

    preview = with_execution(preview_for(o12, status=PreviewStatus.APPROVED), ExecutionOutcome.IN_PROGRESS)
    holding, waited, seen = threading.Event(), [], []

    def first_attempt():
        try:
            with transaction.atomic():
                _preview, execution = fetch_one_joined(Preview, Execution, lock=True, id=preview.pk)
                execution.outcome = ExecutionOutcome.SUCCEEDED
                update_fields(execution, ["outcome"])
                holding.set()
                # Commit only once the second attempt's statement is waiting for this lock (pg_locks is
                # read afresh by every statement, unlike pg_stat_activity within a transaction).
                deadline = time.monotonic() + 10
                with connection.cursor() as cursor:
                    while time.monotonic() < deadline:
                        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                        if cursor.fetchone()[0]:
                            waited.append(True)
                            break
                        time.sleep(0.01)
        finally:
            connections.close_all()

    thread = threading.Thread(target=first_attempt)
    thread.start()
    assert holding.wait(10)
    with transaction.atomic():
        _preview, execution = fetch_one_joined(Preview, Execution, lock=True, id=preview.pk)
        seen.append(execution.outcome)
    thread.join()

    assert waited == [True]  # the second read did wait for the first attempt's lock
    assert seen == [ExecutionOutcome.SUCCEEDED]
