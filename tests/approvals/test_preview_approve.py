"""Seed 003, approval: a person says yes to exactly one preview, as themselves, in time.

The services are called directly. Under the `db` fixture the test runs inside a transaction,
so `transaction.on_commit` callbacks (the Celery enqueue) only run when captured and executed.
"""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db.models import F
from django.utils import timezone

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve, preview_decline, previews_expire_stale
from approvals.models import Approval, ApprovalRole, AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import assert_nothing_moved, events, execution_callbacks, propose
from tests.factories import OrderFactory, StaffFactory

STALE_DIGEST = "0" * 64


def make_preview(agent, order_id="o-12", amount_minor=500, reason="damaged") -> Preview:
    response = propose(agent, order_id=order_id, amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def confirm(preview, person, *, digest=None, role=ApprovalRole.CUSTOMER) -> Preview:
    return preview_approve(
        preview_id=preview.pk, approver=person, role=role, digest=preview.digest if digest is None else digest
    )


# The actor confirms --------------------------------------------------------------------------


def test_actor_confirms_approval_is_bound_and_the_refund_executes_once(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert preview.required_approvals == ["customer"]

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        returned = confirm(preview, alice)

    assert len(execution_callbacks(callbacks)) == 1, "a confirmation enqueues exactly one execution"
    assert returned.status == PreviewStatus.APPROVED  # what the confirmation itself decided

    approval = Approval.objects.get()
    assert approval.preview_id == preview.pk
    assert approval.approver == alice
    assert approval.role == ApprovalRole.CUSTOMER
    assert approval.digest == preview.digest
    assert approval.subject_version == preview.subject_version == 1

    confirmed = AuditRecord.objects.get(preview=preview, event="confirmed")
    assert confirmed.actor == alice
    assert confirmed.approval_basis["digest"] == preview.digest
    assert confirmed.approval_basis["subject_version"] == 1
    assert confirmed.approval_basis["role"] == "customer"
    assert confirmed.result == {"status": "approved"}

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    refund = Refund.objects.get()
    assert (refund.preview_id, refund.order_id, refund.amount_minor, refund.currency, refund.reason) == (
        preview.pk,
        o12.pk,
        500,
        "EUR",
        "damaged",
    )
    gateway = LocalGatewayRefund.objects.get()
    assert gateway.idempotency_key == f"refund:{preview.pk}"
    assert refund.gateway_refund_id == gateway.refund_id == preview.result["refund_id"]
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    assert events(preview) == ["proposed", "confirmed", "execution_started", "executed"]


# Refusals ------------------------------------------------------------------------------------


def test_another_user_cannot_confirm_or_decline_and_nothing_is_recorded(
    alice, bob, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(Preview.DoesNotExist):
            confirm(preview, bob)
        with pytest.raises(Preview.DoesNotExist):
            preview_decline(preview_id=preview.pk, person=bob, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    assert execution_callbacks(callbacks) == []
    assert Approval.objects.count() == 0
    assert not AuditRecord.objects.filter(actor=bob).exists()
    assert events(preview) == ["proposed"]
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert_nothing_moved(o12)


def test_confirming_after_expiry_is_refused_and_the_preview_expires(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        confirm(preview, alice)

    assert refused.value.code == "expired"
    assert execution_callbacks(callbacks) == []
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXPIRED
    assert preview.failure_code == "expired"
    assert Approval.objects.count() == 0
    assert events(preview) == ["proposed", "expired", "decision_refused"]
    refusal = AuditRecord.objects.get(preview=preview, event="decision_refused")
    assert refusal.actor == alice
    assert refusal.result["error"]["code"] == "expired"
    assert_nothing_moved(o12)

    # Terminal: the right digest does not bring it back.
    with pytest.raises(DecisionError) as again:
        confirm(preview, alice)
    assert again.value.code == "not_awaiting_decision"
    assert Approval.objects.count() == 0


def test_the_sweeper_expires_only_previews_past_their_window(alice, o12, alice_agent):
    stale = make_preview(alice_agent, amount_minor=100)
    fresh = make_preview(alice_agent, amount_minor=200)
    Preview.objects.filter(pk=stale.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    assert previews_expire_stale() == 1

    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == PreviewStatus.EXPIRED
    assert fresh.status == PreviewStatus.AWAITING_CUSTOMER
    assert events(stale) == ["proposed", "expired"]
    assert events(fresh) == ["proposed"]


def test_a_stale_digest_is_refused_and_the_preview_stays_decidable(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        confirm(preview, alice, digest=STALE_DIGEST)

    assert refused.value.code == "digest_mismatch"
    assert execution_callbacks(callbacks) == []
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert Approval.objects.count() == 0
    assert events(preview) == ["proposed", "decision_refused"]
    assert AuditRecord.objects.get(event="decision_refused").result["error"]["code"] == "digest_mismatch"
    assert_nothing_moved(o12)

    # What the customer really saw still works.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        confirm(preview, alice)
    assert len(execution_callbacks(callbacks)) == 1
    assert Approval.objects.get().digest == preview.digest


def test_an_order_changed_since_the_preview_supersedes_it(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    Order.objects.filter(pk=o12.pk).update(version=F("version") + 1)

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        confirm(preview, alice)

    assert refused.value.code == "superseded"
    assert execution_callbacks(callbacks) == []
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    assert preview.failure_code == "subject_changed"
    assert Approval.objects.count() == 0
    assert events(preview) == ["proposed", "superseded", "decision_refused"]
    assert_nothing_moved(o12, version=2)


def test_decline_records_the_no_and_executes_nothing(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        preview_decline(preview_id=preview.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=STALE_DIGEST)
    assert refused.value.code == "digest_mismatch"
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        returned = preview_decline(
            preview_id=preview.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest
        )

    assert execution_callbacks(callbacks) == []
    assert returned.status == PreviewStatus.DECLINED
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.DECLINED
    assert preview.failure_code == "declined"
    assert Approval.objects.count() == 0
    assert events(preview) == ["proposed", "decision_refused", "declined"]
    assert AuditRecord.objects.get(event="declined").actor == alice
    assert_nothing_moved(o12)

    # A no is final: confirming afterwards is refused.
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        confirm(preview, alice)
    assert refused.value.code == "not_awaiting_decision"
    assert execution_callbacks(callbacks) == []
    assert Approval.objects.count() == 0


def test_a_second_confirmation_is_refused_as_already_decided(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    with django_capture_on_commit_callbacks(execute=False) as first:
        confirm(preview, alice)
    assert len(execution_callbacks(first)) == 1

    # Approved, not yet executed.
    with django_capture_on_commit_callbacks(execute=True) as second, pytest.raises(DecisionError) as refused:
        confirm(preview, alice)
    assert refused.value.code == "already_decided"
    assert execution_callbacks(second) == []
    assert Approval.objects.count() == 1
    assert Refund.objects.count() == 0

    # Executed.
    execution_callbacks(first)[0]()
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    with django_capture_on_commit_callbacks(execute=True) as third, pytest.raises(DecisionError) as refused:
        confirm(preview, alice)
    assert refused.value.code == "already_decided"
    assert execution_callbacks(third) == []
    assert Approval.objects.count() == 1
    assert Refund.objects.count() == 1
    assert LocalGatewayRefund.objects.count() == 1
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    assert events(preview) == [
        "proposed",
        "confirmed",
        "decision_refused",
        "execution_started",
        "executed",
        "decision_refused",
    ]


# Staff review above the threshold ------------------------------------------------------------


@pytest.fixture
def big_order(alice, settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000}
    return OrderFactory(number="o-90", customer=alice, currency="EUR", total_minor=50000)


def test_threshold_is_exclusive(alice, big_order, alice_agent):
    at_threshold = make_preview(alice_agent, order_id="o-90", amount_minor=10000)
    above = make_preview(alice_agent, order_id="o-90", amount_minor=10001)
    assert at_threshold.required_approvals == ["customer"]
    assert above.required_approvals == ["customer", "staff"]


def test_above_threshold_needs_staff_after_the_customer_and_then_executes(
    alice, big_order, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent, order_id="o-90", amount_minor=20000)
    assert preview.required_approvals == ["customer", "staff"]
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    staff = StaffFactory()
    staff.groups.add(Group.objects.get(name="Refund reviewers"))

    # Staff cannot go first.
    with pytest.raises(DecisionError) as refused:
        confirm(preview, staff, role=ApprovalRole.STAFF)
    assert refused.value.code == "not_awaiting_decision"

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        returned = confirm(preview, alice)
    assert execution_callbacks(callbacks) == [], "nothing is enqueued before staff approve"
    assert returned.status == PreviewStatus.AWAITING_STAFF
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert list(Approval.objects.values_list("role", flat=True)) == ["customer"]
    assert_nothing_moved(big_order)

    # The customer's confirmation does not count twice.
    with pytest.raises(DecisionError) as refused:
        confirm(preview, alice)
    assert refused.value.code == "already_decided"

    # Four eyes: the actor cannot approve their own refund as staff, even as a staff member.
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(DecisionError) as refused:
        confirm(preview, alice, role=ApprovalRole.STAFF)
    assert refused.value.code == "four_eyes"
    assert execution_callbacks(callbacks) == []
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert Approval.objects.count() == 1
    assert_nothing_moved(big_order)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        returned = confirm(preview, staff, role=ApprovalRole.STAFF)
    assert len(execution_callbacks(callbacks)) == 1
    assert returned.status == PreviewStatus.APPROVED

    staff_approval = Approval.objects.get(role=ApprovalRole.STAFF)
    assert staff_approval.approver == staff
    assert staff_approval.digest == preview.digest
    assert staff_approval.subject_version == preview.subject_version
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    refund = Refund.objects.get()
    assert (refund.amount_minor, refund.currency, refund.order_id) == (20000, "EUR", big_order.pk)
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    big_order.refresh_from_db()
    assert (big_order.refunded_minor, big_order.version) == (20000, 2)
    assert events(preview) == [
        "proposed",
        "decision_refused",
        "confirmed",
        "decision_refused",
        "decision_refused",
        "approved",
        "execution_started",
        "executed",
    ]
    approved = AuditRecord.objects.get(preview=preview, event="approved")
    assert approved.actor == staff
    assert approved.approval_basis["role"] == "staff"
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    assert set(executed.approval_basis) == {"customer", "staff"}
    assert executed.approval_basis["staff"] == [{"approver": staff.pk, "digest": preview.digest, "basis": ""}]


def test_a_staff_approval_needs_the_review_permission_in_the_service_too(alice, o12, settings):
    from approvals.core.errors import DecisionError
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole, Preview, PreviewStatus
    from tests.conftest import agent_client_for, propose
    from tests.factories import StaffFactory, UserFactory

    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100}
    body = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged").json()
    preview = Preview.objects.get(pk=body["preview"]["id"])
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    for person in (UserFactory(username="carol"), StaffFactory(username="pat")):
        with pytest.raises(DecisionError) as refused:
            preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.STAFF, digest=preview.digest)
        assert refused.value.code == "not_a_reviewer"
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert preview.approvals.count() == 1
