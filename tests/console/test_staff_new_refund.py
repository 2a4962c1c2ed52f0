"""Staff propose a refund themselves (console: Payments → New refund): through the one admission path,
with origin `staff_proposal` and the staff member as proposer, so their own approval is refused (four
eyes) and another staff member's works."""

import pytest

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewOrigin, PreviewStatus
from refunds.models import Refund

from .conftest import confirmed, logged_in


def test_a_staff_proposal_goes_through_admission_and_its_proposer_cannot_approve_it(
    big_order, alice, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    client = logged_in(reviewer)
    assert client.get("/console/payments/new-refund").status_code == 200

    response = client.post(
        "/console/payments/new-refund", {"order": big_order.number, "amount": "150.00", "reason": "damaged"}
    )

    preview = Preview.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{preview.pk}/"
    assert (preview.origin, preview.proposed_by_id, preview.actor_id) == (
        PreviewOrigin.STAFF_PROPOSAL,
        reviewer.pk,
        alice.pk,
    )
    assert (preview.amount_minor, preview.currency, preview.agent_session_id) == (15000, "EUR", None)
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER  # the customer confirms first
    record = AuditRecord.objects.get(event=AuditEvent.PROPOSED, preview=preview)
    assert record.actor_id == reviewer.pk
    assert record.result["origin"] == "staff_proposal" and record.result["proposed_by"] == "rita"

    preview = confirmed(preview)
    assert preview.status == PreviewStatus.AWAITING_STAFF
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert 'id="my-proposal"' in page and 'id="approve-button"' not in page

    with pytest.raises(DecisionError) as refused:
        preview_approve(preview_id=preview.pk, approver=reviewer, role=ApprovalRole.STAFF, digest=preview.digest)
    assert refused.value.code == "four_eyes"
    over_the_page = client.post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest}, follow=True)
    assert over_the_page.status_code == 409
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF and not Refund.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=preview.pk, approver=second_reviewer, role=ApprovalRole.STAFF, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Refund.objects.get().amount_minor == 15000


def test_a_staff_proposal_past_the_policy_is_refused_and_audited(big_order, reviewer):
    response = logged_in(reviewer).post(
        "/console/payments/new-refund", {"order": big_order.number, "amount": "900.00", "reason": "damaged"}
    )
    assert response.status_code == 422
    assert "The refund was refused" in response.content.decode()
    assert not Preview.objects.exists()
    record = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_REFUSED)
    assert record.actor_id == reviewer.pk
    assert record.result["origin"] == "staff_proposal"
    assert record.result["error"]["code"] == "amount_exceeds_remaining"


def test_an_unknown_order_or_a_bad_amount_is_a_form_error(big_order, reviewer):
    client = logged_in(reviewer)
    missing = client.post("/console/payments/new-refund", {"order": "o-nope", "amount": "1.00", "reason": "damaged"})
    assert missing.status_code == 400 and "There is no order with this number." in missing.content.decode()
    bad = client.post("/console/payments/new-refund", {"order": big_order.number, "amount": "1.005", "reason": "late"})
    assert bad.status_code == 400
    assert not Preview.objects.exists()


def test_staff_without_the_refund_permission_cannot_propose(big_order, staff_without_permission):
    client = logged_in(staff_without_permission)
    response = client.post(
        "/console/payments/new-refund", {"order": big_order.number, "amount": "10.00", "reason": "damaged"}
    )
    assert response.status_code == 403
    assert not Preview.objects.exists()
