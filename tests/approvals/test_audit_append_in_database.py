"""On PostgreSQL the audit append runs in the database (approvals_audit_append): it must write the very
text and hash that audit_record_hash would, so that verify_audit, which recomputes them in Python,
cannot tell the two apart."""

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.audit_chain import audit_record_hash, audit_record_text_parts
from approvals.digests import sha256_hex
from approvals.models import AuditChainHead, AuditEvent, AuditRecord
from approvals.services import audit_at_commit, audit_record
from tests.approvals.test_audit_at_commit import _chain_intact

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
contents = st.fixed_dictionaries({
    "event": st.sampled_from(list(AuditEvent)).map(str),
    "action": st.text(max_size=20),
    "preview": st.none() | st.uuids().map(str),
    "actor": st.none() | st.integers(min_value=1),
    "agent_session": st.none() | st.integers(min_value=1),
    "subject_type": st.text(max_size=10),
    "subject_id": st.text(max_size=20),
    "raw_arguments": st.text(),
    "approval_basis": st.none() | json_values,
    "result": json_values,
})


@settings(max_examples=300, deadline=None)
@given(
    content=contents,
    created_at=st.datetimes(timezones=st.just(UTC)),
    sequence=st.integers(min_value=1, max_value=2**62),
    previous_hash=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_the_text_in_parts_completed_is_the_text_audit_record_hash_hashes(content, created_at, sequence, previous_hash):
    before_time, before_previous, before_sequence, after_sequence = audit_record_text_parts(content)
    text = (before_time + created_at.isoformat() + before_previous + previous_hash + before_sequence
            + str(sequence) + after_sequence)
    fields = {"created_at": created_at.isoformat(), **content}
    assert sha256_hex(text) == audit_record_hash(sequence=sequence, previous_hash=previous_hash, fields=fields)


@pytest.mark.postgres
@pytest.mark.parametrize("value", [
    datetime(2026, 11, 30, 9, 0, 0, 0, tzinfo=UTC),  # no microseconds: isoformat leaves them out
    datetime(2026, 11, 30, 9, 0, 0, 7, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2027, 1, 1, 0, 0, 0, 120000, tzinfo=UTC),
])
def test_the_database_writes_a_time_as_python_does(db, value):
    with connection.cursor() as cursor:
        cursor.execute("SELECT approvals_utc_isoformat(%s)", [value])
        assert cursor.fetchone()[0] == value.isoformat()


@pytest.mark.postgres
def test_many_records_in_one_append_link_in_order_and_verify(db, alice, bob):
    before = AuditChainHead.objects.filter(pk=1).values_list("sequence", flat=True).first() or 0
    with transaction.atomic(), audit_at_commit():
        made = [
            audit_record(event=AuditEvent.PROPOSED, actor=alice if i % 2 else bob, action="refund_order",
                         subject_type="order", subject_id=f"o-{i}", raw_arguments='{"note": "ü\\u0000 \\"x\\""}',
                         approval_basis={"customer": {"approver": i}} if i % 3 else None,
                         result={"n": i, "text": "€ \u2028 ünïcode", "list": [1, None, True]})
            for i in range(40)
        ]
    stored = list(AuditRecord.objects.filter(sequence__gt=before).order_by("sequence"))
    assert [r.pk for r in stored] == [r.pk for r in made]
    assert [r.sequence for r in stored] == list(range(before + 1, before + 41))
    assert all(later.previous_hash == earlier.record_hash for earlier, later in zip(stored, stored[1:], strict=False))
    assert all(a.created_at <= b.created_at for a, b in zip(stored, stored[1:], strict=False))
    # What the caller holds is what was written.
    assert [(r.sequence, r.record_hash, r.created_at) for r in made] == [
        (r.sequence, r.record_hash, r.created_at) for r in stored
    ]
    assert AuditChainHead.objects.get(pk=1).record_hash == stored[-1].record_hash
    assert _chain_intact()
