"""Seed 004: send_invoice is a typed control point. Approval for INV-17 and its recipient permits one
send; another recipient gets zero sends; a mail server failure shows as a failure; the audited
arguments equal what was actually handed to the mail server."""

import json

import pytest

from approvals.core.services import preview_approve, preview_execute
from approvals.models import Approval, ApprovalRole, AuditRecord, Preview, PreviewStatus
from approvals.tasks import execute_preview
from invoices.models import Delivery, Invoice, StandingApproval
from tests.conftest import agent_client_for, execution_callbacks, propose
from tests.factories import UserFactory


def send(client, invoice_id="INV-17", recipient="billing@example.test", **extra):
    return client.post(
        "/api/agent/tool-calls",
        {"name": "send_invoice", "arguments": json.dumps({"invoice_id": invoice_id, "recipient": recipient})},
        format="json",
        **extra,
    )


def test_the_standing_approval_for_the_exact_pair_permits_one_send(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = send(alice_invoice_agent)
    assert response.status_code == 201, response.json()
    assert len(execution_callbacks(callbacks)) == 1
    body = response.json()
    assert body["executed"] is False  # the answer is written before the worker runs
    preview = Preview.objects.get(pk=body["preview"]["id"])
    assert preview.status == PreviewStatus.EXECUTED

    # Exactly one message, to exactly the approved recipient.
    assert len(smtp_server.messages) == 1
    received = smtp_server.messages[0]
    assert received["rcpt_tos"] == ["billing@example.test"]
    message = received["message"]
    assert message["To"] == "billing@example.test"
    assert "INV-17" in message["Subject"] and "€120.00" in message["Subject"]
    attachments = [part.get_filename() for part in message.iter_attachments()]
    assert attachments == ["invoice-INV-17.html"]

    # The audit: arguments exactly as proposed, the approval basis, and what the server accepted.
    proposed = AuditRecord.objects.get(preview=preview, event="proposed")
    assert json.loads(proposed.raw_arguments) == {"invoice_id": "INV-17", "recipient": "billing@example.test"}
    approved = AuditRecord.objects.get(preview=preview, event="approved")
    assert f"standing approval #{standing_inv17.pk}" in approved.approval_basis["basis"]
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    assert executed.result["recipients"] == received["rcpt_tos"]
    assert executed.result["subject"] == message["Subject"]
    assert executed.result["message_id"] == message["Message-ID"].strip()

    delivery = Delivery.objects.get()
    assert (delivery.preview_id, delivery.recipients) == (preview.pk, ["billing@example.test"])
    standing_inv17.refresh_from_db()
    assert standing_inv17.consumed_by_id == preview.pk and standing_inv17.consumed_at is not None

    status = alice_invoice_agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert status["executed"] is True and status["status"] == "executed"
    assert status["preview"]["recipient"] == "billing@example.test"

    # A second proposal for the same pair finds the standing approval used up: it waits for staff.
    with django_capture_on_commit_callbacks(execute=True):
        again = send(alice_invoice_agent)
    assert again.status_code == 201
    assert again.json()["status"] == "awaiting_staff"
    assert len(smtp_server.messages) == 1


def test_another_recipient_is_not_sent_without_its_own_approval(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = send(alice_invoice_agent, recipient="other@example.test")
    assert response.status_code == 201
    body = response.json()
    assert (body["executed"], body["status"]) == (False, "awaiting_staff")
    assert body["preview"]["required_approvals"] == ["staff"]
    assert "confirm_url" not in body["preview"]
    assert smtp_server.messages == []
    assert not Delivery.objects.exists()
    assert StandingApproval.objects.get().consumed_at is None


def test_staff_approval_of_the_exact_preview_sends_it(
    alice_invoice_agent, inv17, sam, smtp_server, django_capture_on_commit_callbacks
):
    response = send(alice_invoice_agent, recipient="accounts@example.test")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.AWAITING_STAFF
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=preview.pk, approver=sam, role=ApprovalRole.STAFF, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert [m["rcpt_tos"] for m in smtp_server.messages] == [["accounts@example.test"]]
    assert Approval.objects.get(preview=preview).approver == sam


def test_a_refusing_mail_server_is_shown_as_a_failure_never_as_sent(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    smtp_server.refuse_with = "554 5.7.1 Message rejected by policy"
    with django_capture_on_commit_callbacks(execute=True):
        response = send(alice_invoice_agent)
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.FAILED
    assert "554" in preview.failure_reason and "rejected by policy" in preview.failure_reason
    assert smtp_server.messages == [] and not Delivery.objects.exists()
    status = alice_invoice_agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (status["executed"], status["status"]) == (False, "failed")
    assert "554" in status["preview"]["failure"]["reason"]
    assert AuditRecord.objects.filter(preview=preview, event="execution_failed").exists()
    assert not AuditRecord.objects.filter(preview=preview, event="executed").exists()


def test_a_mail_server_that_is_down_is_retried_then_waits_for_staff_saying_nothing_was_sent(
    alice_invoice_agent, standing_inv17, smtp_down, django_capture_on_commit_callbacks
):
    """A refused connection proves the message was not taken: nothing was sent, and staff may retry."""
    with django_capture_on_commit_callbacks(execute=True):
        response = send(alice_invoice_agent)
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.NEEDS_ATTENTION
    assert (preview.execution.outcome, preview.failure_code) == ("refused_before_effect", "retries_exhausted")
    assert "ConnectionRefusedError" in preview.failure_reason
    attempts = AuditRecord.objects.filter(preview=preview, event="execution_attempt_failed")
    assert attempts.count() == execute_preview.max_retries + 1
    assert not Delivery.objects.exists()


def test_a_foreign_invoice_and_a_missing_one_answer_identically(inv17, bob, smtp_server):
    bobs_agent = agent_client_for(bob, tools=("send_invoice",))
    foreign = send(bobs_agent, invoice_id="INV-17")
    Invoice.objects.filter(number="INV-17").update(number="INV-99")
    missing = send(bobs_agent, invoice_id="INV-17")
    assert foreign.status_code == missing.status_code == 422
    assert foreign.content == missing.content
    assert foreign.json()["error"]["code"] == "invoice_unavailable"
    assert not Preview.objects.exists()


@pytest.mark.parametrize(
    ("recipient", "code"),
    [
        ("not-an-address", "recipient_invalid"),
        ("billing@example.test\r\nBcc: evil@example.test", "recipient_invalid"),
        ("billing@example.test, evil@example.test", "recipient_invalid"),
        ("Billing <billing@example.test>", "recipient_invalid"),
    ],
)
def test_malformed_recipients_are_refused_with_the_rule(alice_invoice_agent, inv17, recipient, code):
    response = send(alice_invoice_agent, recipient=recipient)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == code
    assert not Preview.objects.exists()
    assert AuditRecord.objects.get(event="proposal_refused").raw_arguments == json.dumps(
        {"invoice_id": "INV-17", "recipient": recipient}
    )


def test_only_issued_invoices_can_be_sent(alice_invoice_agent, inv17):
    Invoice.objects.filter(pk=inv17.pk).update(status="draft")
    response = send(alice_invoice_agent)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invoice_not_issued"


def test_strict_arguments(alice_invoice_agent, inv17):
    response = alice_invoice_agent.post(
        "/api/agent/tool-calls",
        {
            "name": "send_invoice",
            "arguments": {"invoice_id": "INV-17", "recipient": "billing@example.test", "cc": "evil@example.test"},
        },
        format="json",
    )
    assert response.status_code == 400
    assert "cc" in response.json()["error"]["fields"]


def test_the_invoice_changed_after_approval_is_superseded_with_zero_sends(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = send(alice_invoice_agent)
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.APPROVED
    Invoice.objects.filter(pk=standing_inv17.invoice_id).update(version=2, total_minor=99000)
    for callback in callbacks:
        callback()
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    assert smtp_server.messages == [] and not Delivery.objects.exists()


def test_the_executor_run_twice_sends_one_message(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = send(alice_invoice_agent)
    preview_id = response.json()["preview"]["id"]
    execute_preview.apply(args=[preview_id])
    execute_preview.apply(args=[preview_id])
    preview_execute(preview_id=preview_id)
    assert len(smtp_server.messages) == 1
    assert Delivery.objects.count() == 1


def test_customers_can_send_only_their_own_invoices_and_billing_staff_any(inv17, bob, smtp_server):
    from django.contrib.auth.models import Group

    bill = UserFactory(username="bill", is_staff=True)
    bill.groups.add(Group.objects.get(name="Billing"))
    response = send(agent_client_for(bill, tools=("send_invoice",)), recipient="billing@example.test")
    assert response.status_code == 201, response.json()
    # Staff outside Billing may not have the tool at all.
    plain_staff = UserFactory(username="pat", is_staff=True)
    from approvals.core.errors import ApplicationError

    with pytest.raises(ApplicationError, match="may not use the tool"):
        agent_client_for(plain_staff, tools=("send_invoice",))


def test_a_refund_tool_session_cannot_send_invoices(alice, inv17):
    response = propose(
        agent_client_for(alice, tools=("refund_order",)),
        name="send_invoice",
        invoice_id="INV-17",
        recipient="billing@example.test",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "tool_not_allowed"


def test_a_refused_proposal_is_audited_with_its_subject(alice_invoice_agent, inv17):
    Invoice.objects.filter(pk=inv17.pk).update(status="void")
    assert send(alice_invoice_agent).status_code == 422
    record = AuditRecord.objects.get(event="proposal_refused")
    assert (record.action, record.subject_id) == ("send_invoice", "INV-17")
