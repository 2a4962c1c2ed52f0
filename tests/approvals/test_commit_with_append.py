"""The end of a service's transaction in as few round trips as possible: writes nothing waits for go
with the chain head's lock, and on PostgreSQL the COMMIT goes with the audit append. What must not
change: the whole transaction commits or nothing does, and never inside someone else's transaction."""

import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from approvals.models import AuditChainHead, AuditEvent, AuditRecord, IdempotencyRecord, Preview, PreviewStatus
from approvals.rows import insert_rows
from approvals.services import _audited_transaction, audit_at_commit, audit_record, update_fields_at_commit
from tests.approvals.test_audit_at_commit import _chain_intact, _head
from tests.approvals.test_rows import preview_for
from tests.conftest import propose


class Rollback(Exception):
    pass


def test_an_update_left_for_the_commit_is_written_with_the_append_and_its_values_as_they_were(o12, alice):
    preview = preview_for(o12)
    insert_rows([preview])
    with transaction.atomic(), audit_at_commit():
        preview.status = PreviewStatus.DECLINED
        update_fields_at_commit(preview, ["status"])
        preview.status = PreviewStatus.EXPIRED  # too late: the values were taken at the call
        assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.AWAITING_CUSTOMER
        audit_record(event=AuditEvent.DECLINED, preview=preview, actor=alice)
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.DECLINED
    assert AuditRecord.objects.filter(preview=preview, event=AuditEvent.DECLINED).count() == 1
    assert _chain_intact()


def test_an_update_left_for_the_commit_is_written_without_any_audit_record_too(o12):
    preview = preview_for(o12)
    insert_rows([preview])
    with transaction.atomic(), audit_at_commit():
        preview.failure_reason = "noted"
        update_fields_at_commit(preview, ["failure_reason"])
    assert Preview.objects.get(pk=preview.pk).failure_reason == "noted"


def test_a_failed_block_writes_the_update_it_left_for_the_commit_nowhere(o12):
    preview = preview_for(o12)
    insert_rows([preview])
    with pytest.raises(Rollback), transaction.atomic(), audit_at_commit():
        preview.status = PreviewStatus.DECLINED
        update_fields_at_commit(preview, ["status"])
        raise Rollback
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.AWAITING_CUSTOMER


def test_outside_a_block_an_update_is_written_at_once(o12):
    preview = preview_for(o12)
    insert_rows([preview])
    preview.status = PreviewStatus.DECLINED
    update_fields_at_commit(preview, ["status"])
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.DECLINED


@pytest.mark.postgres
def test_a_keyed_proposal_commits_with_its_audit_append(transactional_db, monkeypatch):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    status_when_django_commits = []
    django_commit = connection._commit

    def spy() -> None:
        status_when_django_commits.append(connection.connection.info.transaction_status.name)
        django_commit()

    monkeypatch.setattr(connection, "_commit", spy)
    response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k-1"})

    assert response.status_code == 201, response.json()
    # The transaction was over when Django's atomic block came to commit it: the COMMIT went with the append.
    assert status_when_django_commits == ["IDLE"]
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    record = IdempotencyRecord.objects.get(key="k-1")
    assert (record.response_status, record.response_body) == (201, response.json())  # the update left for the end
    assert list(AuditRecord.objects.filter(preview=preview).values_list("event", flat=True)) == [AuditEvent.PROPOSED]
    assert _chain_intact()
    replay = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k-1"})
    assert (replay.status_code, replay.json()) == (200, response.json())


def test_inside_an_enclosing_transaction_a_service_commits_nothing_of_its_own(transactional_db):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    before = _head()

    with pytest.raises(Rollback), transaction.atomic():
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k"})
        assert response.status_code == 201, response.json()
        raise Rollback

    assert not Preview.objects.exists() and not IdempotencyRecord.objects.exists()
    assert _head() == before and not AuditRecord.objects.filter(event=AuditEvent.PROPOSED).exists()


@pytest.mark.postgres
def test_a_commit_that_fails_takes_the_whole_transaction_with_it(transactional_db):
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    before = _head()
    # Foreign keys are checked at COMMIT on PostgreSQL: this one fails there, in the append's round trip.
    missing = Preview(pk=uuid.uuid4(), action="refund_order", subject_type="order", subject_id="o-12")

    with pytest.raises(IntegrityError), _audited_transaction():
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 1})
        audit_record(event=AuditEvent.PROPOSED, preview=missing, actor=alice)

    assert _head() == before
    assert not AuditRecord.objects.filter(actor=alice).exists()
    assert AuditChainHead.objects.filter(pk=1, sequence=before).exists() or before == 0
    with _audited_transaction():  # the connection is usable again, and the chain goes on unbroken
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 2})
    assert AuditRecord.objects.get(actor=alice).sequence == before + 1 and _chain_intact()


@pytest.mark.postgres  # on SQLite, releasing the savepoint that began a transaction commits it, whatever we do
def test_with_autocommit_off_the_caller_commits_and_may_roll_back_instead(transactional_db):
    from tests.conftest import agent_client_for
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    before = _head()

    transaction.set_autocommit(False)
    try:
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged", headers={"Idempotency-Key": "k"})
        assert response.status_code == 201, response.json()
        transaction.rollback()  # the caller's decision: the service must not have committed on its own
    finally:
        transaction.set_autocommit(True)

    assert not Preview.objects.exists() and not IdempotencyRecord.objects.exists()
    assert _head() == before and not AuditRecord.objects.filter(event=AuditEvent.PROPOSED).exists()
