"""The local gateway's equivalent of Stripe's events: `make run` and the tests go through every path of
the refund lifecycle without Stripe (`LOCAL_GATEWAY_REFUND_STATUS=pending`, `manage.py local_refund_event`)."""

import pytest
from django.core import mail
from django.core.management import CommandError, call_command

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from refunds.events import local_refund_status_set
from refunds.models import LocalGatewayRefund, ProviderEvent, Refund, RefundStatus
from tests.conftest import propose


@pytest.fixture(autouse=True)
def local_pending(settings):
    settings.PAYMENT_GATEWAY = "local"
    settings.LOCAL_GATEWAY_REFUND_STATUS = "pending"


def executed(agent, customer, capture, amount_minor=400) -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    return preview


def test_a_local_refund_goes_pending_then_fails_through_the_same_event_path(
    alice, o12, alice_agent, django_capture_on_commit_callbacks, capsys
):
    preview = executed(alice_agent, alice, django_capture_on_commit_callbacks)
    row = LocalGatewayRefund.objects.get()
    ledger = Refund.objects.get()
    assert (row.status, ledger.status, ledger.gateway_refund_id) == ("pending", "pending", row.refund_id)
    message = alice_agent.get(f"/api/agent/previews/{preview.pk}").json()["message"]
    assert "processing at the bank" in message

    with django_capture_on_commit_callbacks(execute=True):
        call_command("local_refund_event", row.refund_id, "--status", "failed", "--reason", "insufficient_funds")

    assert capsys.readouterr().out.strip() == f"{row.refund_id}: refund_failed"
    row.refresh_from_db()
    ledger.refresh_from_db()
    o12.refresh_from_db()
    assert (row.status, ledger.status, ledger.status_reason) == ("failed", "failed", "insufficient_funds")
    assert (o12.refunded_minor, o12.version) == (0, 3)
    event = ProviderEvent.objects.get()
    assert (event.provider, event.type, event.object_id, event.result) == (
        "local",
        "refund.failed",
        row.refund_id,
        "refund_failed",
    )
    assert event.event_id.startswith("evt_local_")
    assert AuditRecord.objects.get(event="provider_event").result["status"] == "failed"
    assert len(mail.outbox) == 1
    body = alice_agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert body["preview"]["refund"]["status"] == "failed"
    assert "failed at the bank" in body["message"]


def test_a_local_pending_refund_succeeds(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    executed(alice_agent, alice, django_capture_on_commit_callbacks)
    row = LocalGatewayRefund.objects.get()

    outcome = local_refund_status_set(refund_id=row.refund_id, status=RefundStatus.SUCCEEDED)

    assert outcome.result == "refund_succeeded"
    assert Refund.objects.get().status == RefundStatus.SUCCEEDED
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (400, 2)
    assert mail.outbox == []


def test_the_command_refuses_an_unknown_refund(db):
    with pytest.raises(CommandError, match="no refund lr_missing"):
        call_command("local_refund_event", "lr_missing", "--status", "failed")
