"""Appending to the audit log is a plain INSERT in the caller's transaction: it commits or rolls back with
it, never commits on its own, and two audited transactions don't wait for each other. The sealer seals
every committed record exactly once, including one whose transaction began first and committed last."""

import threading
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.audit.seal import audit_seal
from approvals.core.services import audit_record, audited_transaction
from approvals.models import AuditEvent, AuditLeaf, AuditRecord, IdempotencyRecord, Preview
from tests.conftest import propose, seal_all


class Rollback(Exception):
    pass


def _intact() -> bool:
    try:
        call_command("verify_audit", stdout=StringIO(), stderr=StringIO())
    except SystemExit:
        return False
    return True


def test_an_audit_record_is_one_insert_of_its_own_row(db, alice):
    with CaptureQueriesContext(connection) as queries:
        record = audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 1})
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["INSERT"]
    assert "approvals_auditrecord" in queries.captured_queries[0]["sql"]
    assert AuditRecord.objects.get(pk=record.pk).result == {"n": 1}


def test_records_roll_back_with_the_transaction_they_were_made_in(db, alice):
    with pytest.raises(Rollback), audited_transaction():
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        raise Rollback
    assert not AuditRecord.objects.filter(actor=alice).exists()


def test_a_keyed_proposal_writes_its_answer_and_its_audit_record(transactional_db):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k-1"})

    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    record = IdempotencyRecord.objects.get(key="k-1")
    assert (record.response_status, record.response_body) == (201, response.json())
    assert list(AuditRecord.objects.filter(preview=preview).values_list("event", flat=True)) == [AuditEvent.PROPOSED]
    seal_all()
    assert _intact()
    replay = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k-1"})
    assert (replay.status_code, replay.json()) == (200, response.json())


def test_inside_an_enclosing_transaction_a_service_commits_nothing_of_its_own(transactional_db):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    before = AuditRecord.objects.count()

    with pytest.raises(Rollback), transaction.atomic():
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k"})
        assert response.status_code == 201, response.json()
        raise Rollback

    assert not Preview.objects.exists() and not IdempotencyRecord.objects.exists()
    assert AuditRecord.objects.count() == before


@pytest.mark.postgres
def test_a_commit_that_fails_takes_the_whole_transaction_with_it(transactional_db):
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    missing = Preview(pk=uuid.uuid4(), action="refund_order", subject_type="order", subject_id="o-12")

    with pytest.raises(IntegrityError), audited_transaction():
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 1})
        # Foreign keys are checked at COMMIT on PostgreSQL: this one fails there.
        audit_record(event=AuditEvent.PROPOSED, preview=missing, actor=alice)

    assert not AuditRecord.objects.filter(actor=alice).exists()
    with audited_transaction():  # the connection is usable again
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 2})
    seal_all()
    assert AuditLeaf.objects.filter(record__actor=alice).count() == 1 and _intact()


@pytest.mark.postgres  # on SQLite, releasing the savepoint that began a transaction commits it, whatever we do
def test_with_autocommit_off_the_caller_commits_and_may_roll_back_instead(transactional_db):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    before = AuditRecord.objects.count()

    transaction.set_autocommit(False)
    try:
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k"})
        assert response.status_code == 201, response.json()
        transaction.rollback()  # the caller's decision: the service must not have committed on its own
    finally:
        transaction.set_autocommit(True)

    assert not Preview.objects.exists() and not IdempotencyRecord.objects.exists()
    assert AuditRecord.objects.count() == before


def _in_thread(target, errors):
    def run():
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.postgres
def test_two_audited_transactions_do_not_wait_for_each_other_and_a_late_commit_is_sealed_once(transactional_db):
    """The first transaction appends and stays open; the second appends and commits meanwhile (with the
    old chain head it waited for the first's COMMIT). The first commits last, with the lower id: the
    sealer leaves both out while the first runs, then seals each exactly once."""
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    first_appended, release_first, second_committed = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first():
        with audited_transaction():
            audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"who": "first"})
            first_appended.set()
            assert release_first.wait(20)

    def second():
        assert first_appended.wait(20)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        with audited_transaction():
            audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"who": "second"})
        second_committed.set()

    threads = [_in_thread(first, errors), _in_thread(second, errors)]
    try:
        assert second_committed.wait(10), f"the second audited transaction waited for the first {errors}"
        assert not errors, errors
        # The first is still open: only the second's record is visible; the sealer does not seal it
        # yet, since the first transaction (which began before it) may still commit.
        assert [r.result["who"] for r in AuditRecord.objects.filter(actor=alice)] == ["second"]
        audit_seal()
        assert not AuditLeaf.objects.filter(record__actor=alice).exists()
    finally:
        release_first.set()
        for thread in threads:
            thread.join(20)
    assert not errors, errors

    seal_all()
    records = {r.result["who"]: r.pk for r in AuditRecord.objects.filter(actor=alice)}
    assert records["first"] < records["second"]  # the first took its id first and committed last
    sealed = list(AuditLeaf.objects.filter(record__actor=alice).values_list("record_id", flat=True))
    assert sorted(sealed) == sorted(records.values())  # each exactly once
    assert AuditLeaf.objects.count() == AuditRecord.objects.count()
    assert list(AuditLeaf.objects.order_by("index").values_list("index", flat=True)) == list(
        range(AuditLeaf.objects.count())
    )
    assert audit_seal() == 0 and _intact()


@pytest.mark.postgres
def test_many_concurrent_appenders_and_a_sealer_running_meanwhile_seal_every_record_once(transactional_db):
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    errors: list[BaseException] = []
    stop = threading.Event()

    def appender(n):
        def run():
            for i in range(15):
                with audited_transaction():
                    audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": n, "i": i})

        return run

    def sealer():
        while not stop.is_set():
            audit_seal()

    sealing = _in_thread(sealer, errors)
    appenders = [_in_thread(appender(n), errors) for n in range(6)]
    for thread in appenders:
        thread.join(60)
    stop.set()
    sealing.join(30)
    assert not errors, errors
    seal_all()
    assert AuditRecord.objects.filter(actor=alice).count() == 90
    assert AuditLeaf.objects.count() == AuditRecord.objects.count()
    assert AuditLeaf.objects.values("record_id").distinct().count() == AuditLeaf.objects.count()
    assert _intact()
