"""The one gate: every way a preview comes to exist, is decided and is executed passes the same checks.

Each of the attack pass's three findings is reproduced here: a counter-proposal past the spending
limits, a quorum counting someone who may no longer approve, and four eyes bypassed through a staff
re-proposal.
"""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from approvals.console.review_work import preview_claim, preview_release
from approvals.core.counter import preview_counter_propose
from approvals.core.errors import DecisionError
from approvals.core.services import (
    agent_sessions_revoke,
    executions_dispatch_stalled,
    preview_approve,
    preview_decline,
    preview_execute,
    previews_expire_stale,
)
from approvals.models import (
    Approval,
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewOrigin,
    PreviewStatus,
    ReviewClaim,
)
from refunds.models import Refund, RefundStatus
from refunds.services import refund_propose_again
from tests.factories import OrderFactory, StaffFactory

from .conftest import confirmed, logged_in, make_reviewer, proposed


def staff_approve(preview, person):
    return preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.STAFF, digest=preview.digest)


@pytest.fixture
def large_order(alice):
    return OrderFactory(number="o-90", customer=alice, currency="EUR", total_minor=100000)


# Admission ---------------------------------------------------------------------------------------


def test_a_counter_proposal_past_the_spending_limits_is_refused_like_a_direct_proposal(
    settings, large_order, reviewer, django_capture_on_commit_callbacks
):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 50000}
    settings.SPEND_LIMIT_CUSTOMER_30D = {"EUR": 60000}
    old = confirmed(proposed(large_order.customer, large_order.number, 20000))
    assert old.status == PreviewStatus.AWAITING_STAFF

    with pytest.raises(DecisionError) as refused:
        preview_counter_propose(preview_id=old.pk, reviewer=reviewer, digest=old.digest, values={"amount": "700.00"})

    assert refused.value.code == "agent_daily_limit"
    assert refused.value.facts["limit_minor"] == 50000 and refused.value.facts["amount_minor"] == 70000
    assert "€500.00" in refused.value.message
    old.refresh_from_db()
    assert old.status == PreviewStatus.AWAITING_STAFF  # nothing replaced it
    assert not Preview.objects.filter(supersedes=old).exists()
    record = AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_REFUSED).get()
    assert record.actor_id == reviewer.pk
    assert record.result["origin"] == "counter_proposal"
    assert record.result["error"]["code"] == "agent_daily_limit"
    assert not Refund.objects.exists()

    # Within the limits the same reviewer's counter-proposal goes through, recorded as theirs.
    with django_capture_on_commit_callbacks(execute=True):
        new = preview_counter_propose(
            preview_id=old.pk, reviewer=reviewer, digest=old.digest, values={"amount": "250.00"}
        )
    assert (new.origin, new.proposed_by_id, new.chain_root_id) == (PreviewOrigin.COUNTER_PROPOSAL, reviewer.pk, old.pk)
    proposed_record = AuditRecord.objects.get(preview=new, event=AuditEvent.PROPOSED)
    assert proposed_record.result["origin"] == "counter_proposal"
    assert proposed_record.result["proposed_by"] == reviewer.get_username()


def test_the_customer_period_limit_also_holds_for_a_counter_proposal(settings, large_order, reviewer):
    settings.SPEND_LIMIT_CUSTOMER_30D = {"EUR": 60000}
    old = confirmed(proposed(large_order.customer, large_order.number, 20000))
    with pytest.raises(DecisionError) as refused:
        preview_counter_propose(preview_id=old.pk, reviewer=reviewer, digest=old.digest, values={"amount": "700.00"})
    # The preview it replaces no longer counts: only 700 against 600 is over.
    assert refused.value.code == "customer_period_limit"
    assert refused.value.facts["used_minor"] == 0


# Four eyes across a chain ------------------------------------------------------------------------


@pytest.fixture
def bank_failed_refund(alice, large_order, django_capture_on_commit_callbacks):
    """An executed €150 refund on o-90 that the bank failed afterwards (its money came back)."""
    preview = proposed(alice, large_order.number, 15000)
    confirmed(preview)
    ron = make_reviewer("ron")
    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, ron)
    refund = Refund.objects.get(preview=preview)
    Refund.objects.filter(pk=refund.pk).update(status=RefundStatus.FAILED)
    large_order.refresh_from_db()
    large_order.refunded_minor = 0
    large_order.save()
    return refund


def test_a_staff_re_proposal_cannot_be_approved_by_its_proposer(
    bank_failed_refund, reviewer, alice, django_capture_on_commit_callbacks
):
    outcome = refund_propose_again(refund_pk=bank_failed_refund.pk, staff=reviewer)
    new = outcome.preview
    assert (new.origin, new.proposed_by_id) == (PreviewOrigin.STAFF_REPROPOSAL, reviewer.pk)
    assert new.chain_root_id == bank_failed_refund.preview_id
    confirmed(new)
    new.refresh_from_db()
    assert new.status == PreviewStatus.AWAITING_STAFF

    with pytest.raises(DecisionError) as refused:
        staff_approve(new, reviewer)
    assert refused.value.code == "four_eyes"
    new.refresh_from_db()
    assert new.status == PreviewStatus.AWAITING_STAFF
    assert Refund.objects.filter(preview=new).count() == 0

    page = logged_in(make_reviewer("tess")).get(f"/console/previews/{new.pk}/").content.decode()
    assert "rita" in page and "re-proposal" in page

    # Another reviewer's approval executes it.
    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(new, make_reviewer("tom"))
    new.refresh_from_db()
    assert new.status == PreviewStatus.EXECUTED
    assert Refund.objects.filter(preview=new, amount_minor=15000).count() == 1


def test_the_author_of_a_counter_proposal_cannot_approve_a_later_preview_of_the_chain(
    large_order, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    first = confirmed(proposed(large_order.customer, large_order.number, 20000))
    second = preview_counter_propose(
        preview_id=first.pk, reviewer=reviewer, digest=first.digest, values={"amount": "190.00"}
    )
    second = confirmed(second)
    third = preview_counter_propose(
        preview_id=second.pk, reviewer=second_reviewer, digest=second.digest, values={"amount": "180.00"}
    )
    assert third.chain_root_id == first.pk
    third = confirmed(third)
    # ron wrote this one; rita wrote the one before it in the chain.
    for author, code in ((second_reviewer, "counter_author"), (reviewer, "four_eyes")):
        with pytest.raises(DecisionError) as refused:
            staff_approve(third, author)
        assert refused.value.code == code
    assert not Approval.objects.filter(preview=third, role=ApprovalRole.STAFF).exists()

    # Someone outside the chain approves it, and it is paid once, at the amount of the last proposal.
    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(third, make_reviewer("tom"))
    third.refresh_from_db()
    assert third.status == PreviewStatus.EXECUTED
    assert Refund.objects.get(preview=third).amount_minor == 18000


# Quorum: who counts now --------------------------------------------------------------------------


@pytest.fixture
def two_of_two(settings):
    settings.REVIEW_QUORUM = "refund_order:EUR:20000:2"


@pytest.mark.parametrize("lose_the_right", ["removed_from_group", "deactivated", "permission_taken"])
def test_an_approval_of_someone_who_may_no_longer_approve_does_not_count(
    two_of_two, large_order, reviewer, second_reviewer, lose_the_right, django_capture_on_commit_callbacks
):
    permission = Permission.objects.get(codename="review_refund_order")
    if lose_the_right == "permission_taken":  # rita holds the permission herself, not through the group
        reviewer.groups.clear()
        reviewer.user_permissions.add(permission)
        reviewer = type(reviewer).objects.get(pk=reviewer.pk)
    preview = confirmed(proposed(large_order.customer, large_order.number, 25000))
    staff_approve(preview, reviewer)
    if lose_the_right == "removed_from_group":
        reviewer.groups.clear()
    elif lose_the_right == "deactivated":
        reviewer.is_active = False
        reviewer.save()
    else:
        reviewer.user_permissions.remove(permission)

    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, second_reviewer)

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert not Refund.objects.exists()
    large_order.refresh_from_db()
    assert large_order.refunded_minor == 0
    record = AuditRecord.objects.filter(preview=preview, event=AuditEvent.APPROVED).last()
    assert record.result["staff_approvals"] == 1 and record.result["staff_approvals_needed"] == 2


def test_at_execution_an_approval_that_no_longer_counts_sends_the_preview_back_to_staff(
    two_of_two, large_order, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    preview = confirmed(proposed(large_order.customer, large_order.number, 25000))
    staff_approve(preview, reviewer)
    with django_capture_on_commit_callbacks(execute=False):  # the broker holds the task
        staff_approve(preview, second_reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    reviewer.groups.clear()  # removed from the reviewers before the worker runs

    with django_capture_on_commit_callbacks(execute=True):
        preview_execute(preview_id=preview.pk)

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert "rita" in preview.failure_reason and "1 of the 2" in preview.failure_reason
    assert Execution.objects.get(pk=preview.pk).outcome == ExecutionOutcome.AWAITING_APPROVAL
    assert not Refund.objects.exists()
    lapsed = AuditRecord.objects.get(preview=preview, event=AuditEvent.APPROVAL_LAPSED)
    assert lapsed.result["approver"] == "rita" and lapsed.result["why"] == "not_a_reviewer"
    assert Approval.objects.get(preview=preview, approver=reviewer).lapsed_at is not None

    # A third reviewer makes the quorum again; it executes, and the record names both who counted.
    tom = make_reviewer("tom")
    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, tom)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Refund.objects.filter(preview=preview, amount_minor=25000).count() == 1
    executed = AuditRecord.objects.get(preview=preview, event=AuditEvent.EXECUTED)
    staff = executed.approval_basis["staff"]
    assert sorted(entry["approver"] for entry in staff) == sorted([second_reviewer.pk, tom.pk])
    assert executed.approval_basis["customer"][0]["approver"] == large_order.customer.pk


def test_at_execution_the_spending_limits_are_evaluated_again(
    settings, large_order, reviewer, django_capture_on_commit_callbacks
):
    preview = confirmed(proposed(large_order.customer, large_order.number, 20000))
    with django_capture_on_commit_callbacks(execute=False):
        staff_approve(preview, reviewer)
    settings.SPEND_LIMIT_CUSTOMER_30D = {"EUR": 15000}  # lowered before the worker runs
    preview_execute(preview_id=preview.pk)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED and preview.failure_code == "customer_period_limit"
    assert not Refund.objects.exists()


# Claims --------------------------------------------------------------------------------------------


def test_only_the_claimer_or_a_lead_releases_a_claim(awaiting_staff, reviewer, second_reviewer):
    preview_claim(preview=awaiting_staff, reviewer=reviewer)
    with pytest.raises(DecisionError) as refused:
        preview_release(preview=awaiting_staff, reviewer=second_reviewer)
    assert refused.value.code == "claimed_by_another"
    assert ReviewClaim.objects.get(preview=awaiting_staff).claimed_by_id == reviewer.pk
    response = logged_in(second_reviewer).post(f"/console/previews/{awaiting_staff.pk}/claim", {"operation": "release"})
    assert response.status_code == 409 and "only they or a lead" in response.content.decode()
    assert ReviewClaim.objects.get(preview=awaiting_staff).claimed_by_id == reviewer.pk

    lead = make_reviewer("lena")
    lead.user_permissions.add(Permission.objects.get(codename="manage_review_claims"))
    lead = type(lead).objects.get(pk=lead.pk)
    assert preview_release(preview=awaiting_staff, reviewer=lead) is True
    assert not ReviewClaim.objects.filter(preview=awaiting_staff).exists()
    record = AuditRecord.objects.filter(event=AuditEvent.REVIEW_RELEASED).get()
    assert record.actor_id == lead.pk and record.result["was_claimed_by"] == "rita"

    # The claimer releases their own.
    preview_claim(preview=awaiting_staff, reviewer=second_reviewer)
    assert preview_release(preview=awaiting_staff, reviewer=second_reviewer) is True


def test_a_staff_member_without_the_review_permission_cannot_re_propose(bank_failed_refund):
    clerk = StaffFactory(username="clerk")
    outcome = refund_propose_again(refund_pk=bank_failed_refund.pk, staff=clerk)
    assert outcome.kind == "refused" and outcome.refusal.code == "not_a_reviewer"
    assert Preview.objects.filter(origin=PreviewOrigin.STAFF_REPROPOSAL).count() == 0


@pytest.mark.parametrize(
    ("ending", "code", "status"),
    [
        ("rejected", "rejected", PreviewStatus.REJECTED),
        ("expired", "expired", PreviewStatus.EXPIRED),
        ("session_revoked", "agent_session_revoked", PreviewStatus.SUPERSEDED),
        ("counter_proposed", "counter_proposed", PreviewStatus.SUPERSEDED),
        ("subject_changed", "subject_changed", PreviewStatus.SUPERSEDED),
    ],
)
def test_a_preview_sent_back_to_staff_that_ends_ends_its_execution_too(
    two_of_two, large_order, reviewer, second_reviewer, ending, code, status, django_capture_on_commit_callbacks
):
    preview = confirmed(proposed(large_order.customer, large_order.number, 25000))
    staff_approve(preview, reviewer)
    with django_capture_on_commit_callbacks(execute=False):
        staff_approve(preview, second_reviewer)
    reviewer.groups.clear()
    preview_execute(preview_id=preview.pk)  # back to staff: rita's approval lapsed
    preview.refresh_from_db()
    assert Execution.objects.get(pk=preview.pk).outcome == ExecutionOutcome.AWAITING_APPROVAL
    tom = make_reviewer("tom")

    if ending == "rejected":
        preview_decline(preview_id=preview.pk, person=tom, role=ApprovalRole.STAFF, digest=preview.digest, note="No")
    elif ending == "expired":
        Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert previews_expire_stale() == 1
    elif ending == "session_revoked":
        assert agent_sessions_revoke(session_id=preview.agent_session_id) == 1
    elif ending == "counter_proposed":
        preview_counter_propose(preview_id=preview.pk, reviewer=tom, digest=preview.digest, values={"amount": "240.00"})
    else:
        large_order.total_minor += 1
        large_order.version += 1
        large_order.save()
        with pytest.raises(DecisionError):
            staff_approve(preview, tom)

    preview.refresh_from_db()
    execution = Execution.objects.get(pk=preview.pk)
    assert preview.status == status and preview.failure_code == code
    assert (execution.outcome, execution.code) == (ExecutionOutcome.REFUSED_BEFORE_EFFECT, code)
    # Nothing dispatches it again, and nothing was paid.
    assert executions_dispatch_stalled(older_than_seconds=0) == 0
    assert not Refund.objects.exists()


def test_a_counter_proposal_is_not_one_of_the_agents_calls_in_its_hourly_count(settings, large_order, reviewer):
    settings.SPEND_LIMIT_AGENT_HOURLY_COUNT = 1
    old = confirmed(proposed(large_order.customer, large_order.number, 20000))  # the agent's one call this hour

    new = preview_counter_propose(preview_id=old.pk, reviewer=reviewer, digest=old.digest, values={"amount": "150.00"})

    assert (new.amount_minor, new.origin, new.agent_session_id) == (15000, "counter_proposal", old.agent_session_id)
    assert not AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_REFUSED).exists()
