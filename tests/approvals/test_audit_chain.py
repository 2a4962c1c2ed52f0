"""The audit log is a hash chain; PostgreSQL refuses to edit or delete it; verify_audit finds tampering."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from approvals.audit_chain import GENESIS
from approvals.models import AuditChainHead, AuditRecord, Preview
from approvals.services import audit_record
from tests.conftest import propose, tampering


def _verify():
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_audit", stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


@pytest.fixture
def some_history(alice_agent, o12, ord4417):
    propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    propose(alice_agent, order_id="ORD-4417", amount_minor=24990, reason="damaged")
    propose(alice_agent, order_id="o-99", amount_minor=1, reason="late")
    return list(AuditRecord.objects.order_by("sequence"))


def test_records_link_to_the_one_before_and_the_chain_verifies(some_history):
    assert [r.sequence for r in some_history] == list(range(1, len(some_history) + 1))
    assert some_history[0].previous_hash == GENESIS
    for before, after in zip(some_history, some_history[1:], strict=False):
        assert after.previous_hash == before.record_hash
    head = AuditChainHead.objects.get()
    assert (head.sequence, head.record_hash) == (some_history[-1].sequence, some_history[-1].record_hash)
    code, output = _verify()
    assert code == 0 and f"intact: {len(some_history)} records" in output


def test_an_edited_record_is_reported_with_its_position(some_history):
    target = some_history[2]
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(raw_arguments='{"order_id":"o-12","amount_minor":1}')
    code, output = _verify()
    assert code == 1
    assert f"record #{target.sequence} (id {target.pk}): was changed after it was written" in output


def test_a_deleted_record_in_the_middle_or_at_the_end_is_reported(some_history):
    with tampering():
        AuditRecord.objects.filter(pk=some_history[1].pk).delete()
    code, output = _verify()
    assert code == 1 and "record #2" in output and "missing" in output


def test_a_removed_tail_is_reported(some_history):
    with tampering():
        AuditRecord.objects.filter(pk=some_history[-1].pk).delete()
    code, output = _verify()
    assert code == 1 and f"records {some_history[-1].sequence}" in output


def test_json_facts_are_hashed_as_stored(db, alice):
    record = audit_record(event="proposed", actor=alice, result={"b": 2, "a": [1, "x"], "when": None},
                          approval_basis={"nested": {"k": 10**15}})
    assert _verify()[0] == 0
    assert AuditRecord.objects.get(pk=record.pk).result == {"a": [1, "x"], "b": 2, "when": None}


@pytest.mark.postgres
def test_postgres_refuses_update_and_delete_of_audit_records(some_history):
    target = some_history[0]
    for attempt in (
        lambda: AuditRecord.objects.filter(pk=target.pk).update(result={"forged": True}),
        lambda: AuditRecord.objects.filter(pk=target.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    assert AuditRecord.objects.get(pk=target.pk).result == target.result
    assert _verify()[0] == 0


@pytest.mark.postgres
def test_postgres_refuses_to_change_what_a_preview_proposes(some_history):
    preview = Preview.objects.get()
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Preview.objects.filter(pk=preview.pk).update(amount_minor=999)
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Preview.objects.filter(pk=preview.pk).update(payload={**preview.payload, "currency": "USD"})
    Preview.objects.filter(pk=preview.pk).update(status="declined")  # its status may move on
    assert Preview.objects.get(pk=preview.pk).amount_minor == 500
    assert connection.vendor == "postgresql"
