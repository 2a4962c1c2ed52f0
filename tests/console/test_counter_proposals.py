"""Counter-proposals: a reviewer changes the amount (or an invoice's recipient to a known contact)
instead of rejecting; a new preview through the same policy supersedes the old one."""

import json
import re

import pytest
from django.core import mail

from approvals.core.counter import preview_counter_propose
from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import Refund
from tests.conftest import agent_client_for

from .conftest import confirmed, counter_confirmed, logged_in, proposed


def test_a_reviewer_lowers_the_amount_and_the_customer_is_asked_again(
    awaiting_staff, reviewer, reviewer_client, django_capture_on_commit_callbacks
):
    old = awaiting_staff
    with django_capture_on_commit_callbacks(execute=True):
        response = counter_confirmed(reviewer_client, old, {"amount": "80.00"})
    new = Preview.objects.get(supersedes=old)
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{new.pk}/"

    old.refresh_from_db()
    assert old.status == PreviewStatus.SUPERSEDED
    assert old.failure_code == "counter_proposed"
    assert "Refund €80.00 on order o-77" in old.failure_reason

    assert new.amount_minor == 8000 and new.currency == "EUR"
    assert new.payload["reason"] == old.payload["reason"]
    assert new.actor_id == old.actor_id  # still the customer's refund
    assert new.agent_session_id == old.agent_session_id  # the agent session is kept
    assert (new.origin, new.proposed_by_id) == ("counter_proposal", reviewer.pk)  # the reviewer proposed it
    assert new.status == PreviewStatus.AWAITING_CUSTOMER  # the customer is asked again
    assert new.required_approvals == ["customer"]  # €80 is under the threshold: the same policy decides

    proposed_record = AuditRecord.objects.get(preview=new, event=AuditEvent.PROPOSED)
    assert proposed_record.actor_id == reviewer.pk
    assert proposed_record.result["replaces_preview"] == str(old.pk)
    assert proposed_record.result["origin"] == "counter_proposal"
    assert json.loads(proposed_record.raw_arguments) == {"amount": "80.00"}  # what the reviewer typed
    counter = AuditRecord.objects.get(preview=old, event=AuditEvent.COUNTER_PROPOSED)
    assert counter.result["new_preview"] == str(new.pk)

    # The customer is emailed the new request's page.
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.test"]
    assert f"/previews/{new.pk}/" in mail.outbox[0].body

    # The agent is told: the old preview names the new one.
    agent = agent_client_for(old.actor)
    body = agent.get(f"/api/agent/previews/{old.pk}").json()
    assert body["status"] == "superseded"
    assert body["preview"]["superseded_by"] == str(new.pk)
    assert body["preview"]["failure"]["code"] == "counter_proposed"
    assert "A reviewer proposed a change instead: Refund €80.00 on order o-77" in body["message"]
    follow = agent.get(f"/api/agent/previews/{new.pk}").json()  # the agent can follow the new one
    assert follow["status"] == "awaiting_customer" and follow["preview"]["amount_minor"] == 8000

    # The customer's old page explains and links to the new one, without internal words.
    customer = logged_in(old.actor)
    page = customer.get(f"/previews/{old.pk}/").content.decode()
    assert "Our support team changed this request" in page
    assert f"/previews/{new.pk}/" in page
    shown = " ".join(re.sub(r"<[^>]+>", " ", page.split("<main", 1)[1]).split()).lower()
    assert "preview" not in shown


def test_a_counter_proposal_goes_through_the_same_policy(awaiting_staff, reviewer):
    with pytest.raises(DecisionError) as refused:
        preview_counter_propose(
            preview_id=awaiting_staff.pk, reviewer=reviewer, digest=awaiting_staff.digest, values={"amount": "900"}
        )
    assert refused.value.code == "amount_exceeds_remaining"
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF
    assert not Preview.objects.filter(supersedes=awaiting_staff).exists()
    refusal = AuditRecord.objects.get(preview=awaiting_staff, event=AuditEvent.DECISION_REFUSED)
    assert refusal.result["error"]["code"] == "amount_exceeds_remaining"

    for values, code in [
        ({"amount": "abc"}, "counter_amount_invalid"),
        ({"amount": "1.234"}, "counter_amount_invalid"),
        ({"amount": "120.00"}, "counter_unchanged"),
    ]:
        with pytest.raises(DecisionError) as refused:
            preview_counter_propose(
                preview_id=awaiting_staff.pk, reviewer=reviewer, digest=awaiting_staff.digest, values=values
            )
        assert refused.value.code == code


def test_the_digest_binds_the_counter_proposal_too(awaiting_staff, reviewer_client):
    response = reviewer_client.post(
        f"/console/previews/{awaiting_staff.pk}/counter", {"digest": "f" * 64, "amount": "80"}
    )
    assert response.status_code == 409
    assert "Review it again before deciding" in response.content.decode()
    assert not Preview.objects.filter(supersedes=awaiting_staff).exists()


def test_approving_your_own_counter_proposal_counts_as_neither_eye(
    awaiting_staff, reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    new = preview_counter_propose(
        preview_id=awaiting_staff.pk, reviewer=reviewer, digest=awaiting_staff.digest, values={"amount": "110"}
    )
    assert new.required_approvals == ["customer", "staff"]  # €110 is still above the threshold
    new = confirmed(new)
    assert new.status == PreviewStatus.AWAITING_STAFF
    with pytest.raises(DecisionError) as refused:
        preview_approve(preview_id=new.pk, approver=reviewer, role=ApprovalRole.STAFF, digest=new.digest)
    assert refused.value.code == "counter_author"
    page = logged_in(reviewer).get(f"/console/previews/{new.pk}/").content.decode()
    assert "counts as neither of the two eyes" in page
    assert 'id="approve-button"' not in page

    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=new.pk, approver=second_reviewer, role=ApprovalRole.STAFF, digest=new.digest)
    new.refresh_from_db()
    assert new.status == PreviewStatus.EXECUTED
    assert Refund.objects.get().amount_minor == 11000


def test_staff_without_the_permission_cannot_counter_propose(awaiting_staff, staff_without_permission):
    response = logged_in(staff_without_permission).post(
        f"/console/previews/{awaiting_staff.pk}/counter", {"digest": awaiting_staff.digest, "amount": "80"}
    )
    assert response.status_code == 403
    assert not Preview.objects.filter(supersedes=awaiting_staff).exists()


def test_only_a_preview_waiting_for_staff_can_be_countered(big_order, reviewer):
    preview = proposed(big_order.customer, big_order.number, 12000)  # still waits for the customer
    with pytest.raises(DecisionError) as refused:
        preview_counter_propose(
            preview_id=preview.pk, reviewer=reviewer, digest=preview.digest, values={"amount": "80"}
        )
    assert refused.value.code == "not_awaiting_decision"


def test_the_quorum_applies_to_the_counter_proposal(awaiting_staff, reviewer, settings):
    settings.REVIEW_QUORUM = "refund_order:EUR:10500:2"
    new = preview_counter_propose(
        preview_id=awaiting_staff.pk, reviewer=reviewer, digest=awaiting_staff.digest, values={"amount": "110"}
    )
    assert new.staff_approvals_needed == 2
    confirmed(new)
    new.refresh_from_db()
    assert new.status == PreviewStatus.AWAITING_STAFF


def test_the_old_preview_can_no_longer_be_approved(awaiting_staff, reviewer, second_reviewer):
    preview_counter_propose(
        preview_id=awaiting_staff.pk, reviewer=reviewer, digest=awaiting_staff.digest, values={"amount": "80"}
    )
    with pytest.raises(DecisionError) as refused:
        preview_approve(
            preview_id=awaiting_staff.pk,
            approver=second_reviewer,
            role=ApprovalRole.STAFF,
            digest=awaiting_staff.digest,
        )
    assert refused.value.code == "not_awaiting_decision"
    assert not Refund.objects.exists()
