"""Staff decisions in the console: threshold routing, four eyes, and decisions the services refuse."""

from datetime import timedelta

from django.utils import timezone

from approvals.models import Approval, ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Refund
from tests.conftest import agent_client_for, execution_callbacks, propose
from tests.factories import OrderFactory

from .conftest import THRESHOLD, confirmed, logged_in, make_reviewer, proposed


def approve(client, preview, digest=None):
    return client.post(f"/console/previews/{preview.pk}/approve", {"digest": digest or preview.digest})


def reject(client, preview, note="", digest=None):
    return client.post(f"/console/previews/{preview.pk}/reject", {"digest": digest or preview.digest, "note": note})


def status_of(preview) -> str:
    return Preview.objects.get(pk=preview.pk).status


# Threshold routing ----------------------------------------------------------------------------


def test_at_or_below_the_threshold_the_customer_alone_approves(big_order, django_capture_on_commit_callbacks):
    agent = agent_client_for(big_order.customer)
    body = propose(agent, order_id="o-77", amount_minor=THRESHOLD, reason="damaged").json()
    assert body["preview"]["required_approvals"] == ["customer"]
    assert "staff" not in body["message"]
    preview = Preview.objects.get(pk=body["preview"]["id"])

    with django_capture_on_commit_callbacks(execute=True):
        confirmed(preview)

    assert status_of(preview) == PreviewStatus.EXECUTED
    assert list(Refund.objects.values_list("preview_id", "amount_minor")) == [(preview.pk, THRESHOLD)]


def test_above_the_threshold_the_customer_then_staff_approve_and_only_then_the_worker_runs(
    big_order, reviewer_client, reviewer, django_capture_on_commit_callbacks
):
    agent = agent_client_for(big_order.customer)
    body = propose(agent, order_id="o-77", amount_minor=THRESHOLD + 1, reason="damaged").json()
    assert body["preview"]["required_approvals"] == ["customer", "staff"]
    assert "A staff member will review it after the customer confirms." in body["message"]
    preview = Preview.objects.get(pk=body["preview"]["id"])

    # Staff cannot go first: the customer has not confirmed this exact preview yet.
    response = approve(reviewer_client, preview)
    assert response.status_code == 409
    assert status_of(preview) == PreviewStatus.AWAITING_CUSTOMER

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        confirmed(preview)
    assert execution_callbacks(callbacks) == []  # nothing was handed to the worker
    assert status_of(preview) == PreviewStatus.AWAITING_STAFF
    assert Refund.objects.count() == 0 and LocalGatewayRefund.objects.count() == 0
    assert agent.get(f"/api/agent/previews/{preview.pk}").json()["executed"] is False

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = approve(reviewer_client, preview)
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{preview.pk}/"
    assert len(execution_callbacks(callbacks)) == 1

    assert status_of(preview) == PreviewStatus.EXECUTED
    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, THRESHOLD + 1, "EUR")
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    assert sorted(Approval.objects.values_list("role", "approver__username")) == [
        ("customer", "alice"),
        ("staff", reviewer.username),
    ]
    approved = AuditRecord.objects.get(preview=preview, event=AuditEvent.APPROVED)
    assert approved.actor == reviewer
    assert approved.approval_basis["digest"] == preview.digest
    page = reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert 'data-status="executed"' in page and refund.gateway_refund_id in page


# Four eyes ------------------------------------------------------------------------------------


def test_staff_cannot_approve_a_refund_they_proposed_through_their_own_agent_session(
    db, second_reviewer, django_capture_on_commit_callbacks
):
    staff_buyer = make_reviewer("stan")
    OrderFactory(number="o-90", customer=staff_buyer, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(staff_buyer, "o-90", 20000))
    assert preview.status == PreviewStatus.AWAITING_STAFF

    client = logged_in(staff_buyer)
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "four eyes" in page and f"/console/previews/{preview.pk}/approve" not in page

    response = approve(client, preview)
    assert response.status_code == 409
    assert "another staff member must review it" in response.content.decode()
    assert status_of(preview) == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(role=ApprovalRole.STAFF).exists()
    refused = AuditRecord.objects.get(preview=preview, event=AuditEvent.DECISION_REFUSED)
    assert refused.actor == staff_buyer and refused.result["error"]["code"] == "four_eyes"

    with django_capture_on_commit_callbacks(execute=True):
        assert approve(logged_in(second_reviewer), preview).status_code == 302
    assert status_of(preview) == PreviewStatus.EXECUTED
    assert Refund.objects.count() == 1


# Refused decisions ----------------------------------------------------------------------------


def test_a_stale_digest_is_refused_with_a_clear_message(awaiting_staff, reviewer_client):
    response = approve(reviewer_client, awaiting_staff, digest="0" * 64)
    assert response.status_code == 409
    assert "What you saw is not what this preview says now" in response.content.decode()
    assert status_of(awaiting_staff) == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(role=ApprovalRole.STAFF).exists()
    assert AuditRecord.objects.get(event=AuditEvent.DECISION_REFUSED).result["error"]["code"] == "digest_mismatch"


def test_an_expired_preview_is_refused(awaiting_staff, reviewer_client):
    Preview.objects.filter(pk=awaiting_staff.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = approve(reviewer_client, awaiting_staff)
    assert response.status_code == 409
    assert "expired before it was approved" in response.content.decode()
    assert status_of(awaiting_staff) == PreviewStatus.EXPIRED
    assert not Approval.objects.filter(role=ApprovalRole.STAFF).exists()
    assert Refund.objects.count() == 0


def test_a_changed_order_makes_the_preview_out_of_date(awaiting_staff, big_order, reviewer_client):
    big_order.version += 1
    big_order.save()
    response = approve(reviewer_client, awaiting_staff)
    assert response.status_code == 409
    assert "out of date" in response.content.decode()
    assert status_of(awaiting_staff) == PreviewStatus.SUPERSEDED


def test_a_decision_already_taken_by_someone_else_is_refused(
    awaiting_staff, reviewer_client, second_reviewer, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        assert approve(logged_in(second_reviewer), awaiting_staff).status_code == 302
    response = approve(reviewer_client, awaiting_staff)
    assert response.status_code == 409
    assert "already approved" in response.content.decode()
    response = reject(reviewer_client, awaiting_staff, note="too late")
    assert response.status_code == 409
    assert Approval.objects.filter(role=ApprovalRole.STAFF).count() == 1
    assert Refund.objects.count() == 1


def test_approving_after_another_reviewer_rejected_is_refused(awaiting_staff, reviewer_client, second_reviewer):
    assert reject(logged_in(second_reviewer), awaiting_staff, note="Photos show no damage.").status_code == 302
    response = approve(reviewer_client, awaiting_staff)
    assert response.status_code == 409
    assert "it is rejected by staff" in response.content.decode()
    assert status_of(awaiting_staff) == PreviewStatus.REJECTED
    assert Refund.objects.count() == 0


def test_reject_needs_a_note_and_records_it(awaiting_staff, reviewer_client, reviewer):
    response = reject(reviewer_client, awaiting_staff, note="   ")
    assert response.status_code == 400
    assert "Write a note" in response.content.decode()
    assert status_of(awaiting_staff) == PreviewStatus.AWAITING_STAFF

    assert reject(reviewer_client, awaiting_staff, note="Photos show no damage.").status_code == 302
    preview = Preview.objects.get(pk=awaiting_staff.pk)
    assert (preview.status, preview.failure_reason) == (PreviewStatus.REJECTED, "Photos show no damage.")
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.REJECTED)
    assert record.actor == reviewer and record.result["note"] == "Photos show no damage."
    assert Refund.objects.count() == 0
    # The customer's own page shows the note.
    customer_page = logged_in(preview.actor).get(f"/previews/{preview.pk}/").content.decode()
    assert "Photos show no damage." in customer_page


def test_an_incomplete_approve_form_decides_nothing(awaiting_staff, reviewer_client):
    response = reviewer_client.post(f"/console/previews/{awaiting_staff.pk}/approve", {})
    assert response.status_code == 400
    assert status_of(awaiting_staff) == PreviewStatus.AWAITING_STAFF
