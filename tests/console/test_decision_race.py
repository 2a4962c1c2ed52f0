"""Two reviewers decide the same preview at the same moment: exactly one decision is taken.

The services lock the preview row (select_for_update), so this needs PostgreSQL's row locks."""

import threading

import pytest
from django.db import connection

from approvals.models import Approval, ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Refund
from tests.factories import OrderFactory, UserFactory

from .conftest import confirmed, logged_in, make_reviewer, proposed

pytestmark = pytest.mark.postgres


def decide_at_once(preview, decisions):
    """Each (reviewer, kind) posts its decision from its own thread, released together."""
    barrier = threading.Barrier(len(decisions))
    results = [None] * len(decisions)

    def run(index, reviewer, kind):
        try:
            client = logged_in(reviewer)
            data = {"digest": preview.digest, "note": "Not covered."}
            barrier.wait(timeout=10)
            results[index] = client.post(f"/console/previews/{preview.pk}/{kind}", data).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, r, k)) for i, (r, k) in enumerate(decisions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.parametrize("kinds", [("approve", "approve"), ("approve", "reject"), ("reject", "reject")])
def test_two_reviewers_at_the_same_moment_produce_one_decision(transactional_db, kinds):
    alice = UserFactory(username="alice")
    first, second = make_reviewer("rita"), make_reviewer("ron")
    for round_number in range(3):
        OrderFactory(number=f"o-{round_number}", customer=alice, currency="EUR", total_minor=50000)
        preview = confirmed(proposed(alice, f"o-{round_number}", 12000))
        assert preview.status == PreviewStatus.AWAITING_STAFF

        statuses = decide_at_once(preview, [(first, kinds[0]), (second, kinds[1])])

        assert None not in statuses and sorted(statuses) == [302, 409], statuses
        preview = Preview.objects.get(pk=preview.pk)
        decisions = AuditRecord.objects.filter(preview=preview, event__in=[AuditEvent.APPROVED, AuditEvent.REJECTED])
        assert decisions.count() == 1
        assert AuditRecord.objects.filter(preview=preview, event=AuditEvent.DECISION_REFUSED).count() == 1
        staff_approvals = Approval.objects.filter(preview=preview, role=ApprovalRole.STAFF).count()
        refunds = Refund.objects.filter(preview=preview).count()
        if decisions.get().event == AuditEvent.APPROVED:
            assert (preview.status, staff_approvals, refunds) == (PreviewStatus.EXECUTED, 1, 1)
            assert LocalGatewayRefund.objects.filter(idempotency_key=f"refund:{preview.pk}").count() == 1
        else:
            assert (preview.status, staff_approvals, refunds) == (PreviewStatus.REJECTED, 0, 0)
