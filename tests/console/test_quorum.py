"""M-of-N quorum (REVIEW_QUORUM): distinct staff approvers, the proposer and a counter-proposal's
author never count, any rejection ends it, each approval bound to the digest, "1 of 2" in the console."""

import pytest

from approvals.core.errors import DecisionError
from approvals.core.quorum import parse_quorum, staff_approvals_needed
from approvals.core.services import preview_approve, preview_decline
from approvals.models import Approval, ApprovalRole, AuditEvent, AuditRecord, Execution, PreviewStatus
from refunds.models import Refund

from .conftest import confirmed, logged_in, make_reviewer, proposed


@pytest.fixture(autouse=True)
def _quorum(settings):
    settings.REVIEW_QUORUM = "refund_order:EUR:20000:2,refund_order:EUR:40000:3,send_invoice:*:0:2"


def staff_approve(preview, person, digest=None):
    return preview_approve(
        preview_id=preview.pk, approver=person, role=ApprovalRole.STAFF, digest=digest or preview.digest
    )


def test_the_setting_is_parsed_per_action_currency_and_band(settings):
    assert staff_approvals_needed("refund_order", "EUR", 19999) is None
    assert staff_approvals_needed("refund_order", "EUR", 20000) == 2
    assert staff_approvals_needed("refund_order", "EUR", 45000) == 3
    assert staff_approvals_needed("refund_order", "USD", 45000) is None
    assert staff_approvals_needed("send_invoice", "JPY", 1) == 2
    with pytest.raises(ValueError, match="not action:CURRENCY:from_minor:approvers"):
        parse_quorum("refund_order:EUR:100")
    with pytest.raises(ValueError, match="approvers from 1 to 10"):
        parse_quorum("refund_order:EUR:100:0")


def test_two_distinct_reviewers_are_needed_and_the_console_shows_1_of_2(
    big_order, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    preview = confirmed(proposed(big_order.customer, big_order.number, 25000))
    assert preview.staff_approvals_needed == 2
    assert preview.status == PreviewStatus.AWAITING_STAFF

    staff_approve(preview, reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert not Execution.objects.filter(preview=preview).exists()
    record = AuditRecord.objects.filter(preview=preview, event=AuditEvent.APPROVED).get()
    assert record.result == {"status": "awaiting_staff", "staff_approvals": 1, "staff_approvals_needed": 2}
    assert record.approval_basis["digest"] == preview.digest

    page = logged_in(second_reviewer).get(f"/console/previews/{preview.pk}/").content.decode()
    assert "1 of 2 staff approvals" in page
    queue = logged_in(second_reviewer).get("/console/").content.decode()
    assert "1 of 2 approvals" in queue

    # The same person again is refused, and that refusal is audited.
    with pytest.raises(DecisionError) as refused:
        staff_approve(preview, reviewer)
    assert refused.value.code == "already_approved_by_you"
    assert "1 of 2" in refused.value.message
    assert AuditRecord.objects.filter(preview=preview, event=AuditEvent.DECISION_REFUSED).count() == 1

    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, second_reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED  # eager Celery: executed once the quorum is met
    assert Refund.objects.get(preview=preview).amount_minor == 25000
    assert set(Approval.objects.filter(preview=preview, role="staff").values_list("approver__username", flat=True)) == {
        "rita",
        "ron",
    }


def test_any_rejection_ends_it_even_after_an_approval(big_order, reviewer, second_reviewer):
    preview = confirmed(proposed(big_order.customer, big_order.number, 25000))
    staff_approve(preview, reviewer)
    preview_decline(
        preview_id=preview.pk,
        person=second_reviewer,
        role=ApprovalRole.STAFF,
        digest=preview.digest,
        note="Too much for a scratch",
    )
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.REJECTED
    third = make_reviewer("tess")
    with pytest.raises(DecisionError) as refused:
        staff_approve(preview, third)
    assert refused.value.code == "not_awaiting_decision"
    assert not Refund.objects.exists()


def test_the_proposer_never_counts(db, reviewer, second_reviewer):
    """A staff member who is the preview's actor (their own refund) is refused as staff."""
    from tests.factories import OrderFactory

    order = OrderFactory(number="o-88", customer=reviewer, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(reviewer, order.number, 25000))
    with pytest.raises(DecisionError) as refused:
        staff_approve(preview, reviewer)
    assert refused.value.code == "four_eyes"
    staff_approve(preview, second_reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF  # one of two: the proposer's yes never counted


def test_each_approval_is_bound_to_the_digest(big_order, reviewer):
    preview = confirmed(proposed(big_order.customer, big_order.number, 25000))
    with pytest.raises(DecisionError) as refused:
        staff_approve(preview, reviewer, digest="0" * 64)
    assert refused.value.code == "digest_mismatch"
    assert not Approval.objects.filter(preview=preview, role="staff").exists()


def test_the_executor_refuses_a_quorum_short_of_approvals(big_order, reviewer, django_capture_on_commit_callbacks):
    """Were the status moved on without the approvals (a bug, a hand edit), the worker still checks."""
    from approvals.core.services import execution_open, preview_execute

    preview = confirmed(proposed(big_order.customer, big_order.number, 25000))
    staff_approve(preview, reviewer)
    preview.refresh_from_db()
    preview.status = PreviewStatus.APPROVED
    preview.save(update_fields=["status"])
    execution_open(preview)
    preview_execute(preview_id=str(preview.pk), fencing_token=None, worker="test")
    preview.refresh_from_db()
    execution = Execution.objects.get(preview=preview)
    assert execution.code == "approval_missing"
    assert "1 of the 2 staff approvals" in execution.detail
    assert not Refund.objects.exists()


def test_a_band_reached_below_the_threshold_still_asks_staff(big_order, settings):
    settings.REVIEW_QUORUM = "refund_order:EUR:5000:2"
    preview = proposed(big_order.customer, big_order.number, 6000)  # under the 10000 staff threshold
    assert preview.required_approvals == ["customer", "staff"]
    assert preview.staff_approvals_needed == 2


def test_the_agent_api_shows_the_count(big_order):
    from tests.conftest import agent_client_for, propose

    response = propose(
        agent_client_for(big_order.customer), order_id=big_order.number, amount_minor=25000, reason="damaged"
    )
    assert response.status_code == 201
    assert response.json()["preview"]["staff_approvals_needed"] == 2


def test_manage_py_check_refuses_unusable_review_settings(settings):
    from approvals.core.quorum import review_settings_are_usable

    assert review_settings_are_usable() == []
    settings.REVIEW_QUORUM = "refund_order:EUR:lots:2"
    settings.REVIEW_NOTIFY_WEBHOOKS, settings.REVIEW_NOTIFY_SECRET = ["https://hooks.example/x"], ""
    assert [e.id for e in review_settings_are_usable()] == ["approvals.E101", "approvals.E102"]
