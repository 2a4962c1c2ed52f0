"""Audit records made inside audit_at_commit join the chain as the transaction's last writes."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from approvals.models import AuditChainHead, AuditEvent, AuditRecord
from approvals.services import audit_at_commit, audit_record


def _head() -> int:
    head = AuditChainHead.objects.filter(pk=1).first()
    return head.sequence if head else 0


def _chain_intact() -> bool:
    out = StringIO()
    try:
        call_command("verify_audit", stdout=out, stderr=StringIO())
    except SystemExit:
        return False
    return True


def test_records_are_appended_in_order_when_the_block_ends(db, alice):
    before = _head()
    with transaction.atomic(), audit_at_commit():
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 1})
        audit_record(event=AuditEvent.CONFIRMED, actor=alice, result={"n": 2})
        # Nothing is written, and the chain head is not taken, until the block ends.
        assert _head() == before and not AuditRecord.objects.filter(actor=alice).exists()
    records = list(AuditRecord.objects.filter(actor=alice).order_by("sequence"))
    assert [(r.event, r.result, r.sequence) for r in records] == [
        (AuditEvent.PROPOSED, {"n": 1}, before + 1),
        (AuditEvent.CONFIRMED, {"n": 2}, before + 2),
    ]
    assert records[1].previous_hash == records[0].record_hash and records[0].created_at <= records[1].created_at
    assert _head() == before + 2 and _chain_intact()


def test_nested_blocks_join_the_outermost(db, alice):
    with transaction.atomic(), audit_at_commit():
        with audit_at_commit():
            audit_record(event=AuditEvent.PROPOSED, actor=alice)
        assert not AuditRecord.objects.filter(actor=alice).exists()
    assert AuditRecord.objects.filter(actor=alice).count() == 1 and _chain_intact()


def test_a_failed_block_appends_nothing(db, alice):
    before = _head()
    with pytest.raises(RuntimeError), transaction.atomic(), audit_at_commit():
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        raise RuntimeError("the service failed")
    assert _head() == before and not AuditRecord.objects.filter(actor=alice).exists()


def test_a_record_made_in_a_savepoint_that_rolls_back_goes_with_it(db, alice, bob):
    with transaction.atomic(), audit_at_commit():
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        try:
            with transaction.atomic():  # a savepoint inside the block: its record is written at once
                audit_record(event=AuditEvent.PROPOSED, actor=bob)
                assert AuditRecord.objects.filter(actor=bob).exists()
                raise IntegrityError("rolled back to the savepoint")
        except IntegrityError:
            pass
    assert not AuditRecord.objects.filter(actor=bob).exists()
    assert AuditRecord.objects.filter(actor=alice).count() == 1 and _chain_intact()


def test_outside_a_block_a_record_is_written_at_once(db, alice):
    record = audit_record(event=AuditEvent.PROPOSED, actor=alice)
    assert record.pk is not None and AuditRecord.objects.get(pk=record.pk).sequence == _head()
