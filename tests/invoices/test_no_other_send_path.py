"""The only path that sends an invoice email is the send_invoice executor."""

import ast
import threading
from pathlib import Path

import pytest
from django.contrib import admin
from django.core.management import get_commands

from approvals.core.services import preview_approve, preview_execute
from approvals.models import ApprovalRole, Preview, PreviewStatus
from invoices.mail import InvoiceSendRefused, invoice_email_send
from invoices.models import Delivery, Invoice
from tests.conftest import agent_client_for
from tests.invoices.test_send_invoice import send

ROOT = Path(__file__).resolve().parents[2]
MAIL_CALLS = {
    "send_mail",
    "send_mass_mail",
    "EmailMessage",
    "EmailMultiAlternatives",
    "mail_admins",
    "mail_managers",
    "get_connection",
    "sendmail",
    "send_message",
}


# Mail that is not an invoice: the customer's notice that the bank did not pay a refund. The refunds app
# cannot import invoices (import-linter's independence contract), so it can never send an invoice.
OTHER_MAIL_MODULES = {ROOT / "refunds" / "notifications.py"}


def test_no_application_module_but_invoices_mail_sends_email():
    offenders = []
    for package in ("approvals", "refunds", "invoices", "config"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "invoices" / "mail.py" or path in OTHER_MAIL_MODULES:
                continue
            if path.parent == ROOT / "approvals" / "console" and path.name in (
                "notifications.py",
                "review_messages.py",
            ):
                continue  # reviewer and customer notices (never an invoice); tested in test_review_notifications
            for node in ast.walk(ast.parse(path.read_text())):
                name = getattr(node, "attr", None) or getattr(node, "id", None)
                if isinstance(node, ast.Name | ast.Attribute) and name in MAIL_CALLS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("django.core.mail"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}")
    assert offenders == []


def test_no_management_command_or_admin_action_sends_invoices():
    commands = {name for name, app in get_commands().items() if app in ("approvals", "refunds", "invoices")}
    assert not {c for c in commands if "send" in c or "mail" in c or "invoice" in c}
    if Invoice in admin.site._registry:
        model_admin = admin.site._registry[Invoice]
        actions = {name for name in (model_admin.actions or []) if name != "delete_selected"}
        assert actions == set()


def test_the_mail_service_refuses_anything_but_an_approved_unexecuted_send(inv17, alice, smtp_server):
    response = send(agent_client_for(alice, tools=("send_invoice",)))
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.AWAITING_STAFF
    with pytest.raises(InvoiceSendRefused, match="approved"):
        invoice_email_send(preview=preview, invoice=inv17)
    # A tampered payload (another recipient) no longer matches the digest that was approved.
    Preview.objects.filter(pk=preview.pk).update(status=PreviewStatus.APPROVED)
    preview.refresh_from_db()
    preview.payload["recipient"] = "evil@example.test"
    with pytest.raises(InvoiceSendRefused, match="differs from what was approved"):
        invoice_email_send(preview=preview, invoice=inv17)
    assert smtp_server.messages == [] and not Delivery.objects.exists()


@pytest.mark.postgres
def test_the_executor_run_concurrently_sends_one_message(transactional_db, smtp_server):
    from django.contrib.auth.models import Group
    from django.db import connection

    from invoices.models import InvoiceLine
    from tests.factories import StaffFactory, UserFactory

    alice = UserFactory(username="alice")
    sam = StaffFactory(username="sam")
    sam.groups.add(Group.objects.get(name="Invoice approvers"))
    invoice = Invoice.objects.create(
        number="INV-17", customer=alice, currency="EUR", status="issued", total_minor=12000
    )
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
    from django.test.utils import override_settings

    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        response = send(agent_client_for(alice, tools=("send_invoice",)))
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    from unittest import mock

    with mock.patch("approvals.core.services.decisions.execution_enqueue"):
        preview_approve(preview_id=preview.pk, approver=sam, role=ApprovalRole.STAFF, digest=preview.digest)

    barrier = threading.Barrier(4)
    errors = []

    def run():
        try:
            barrier.wait()
            preview_execute(preview_id=preview.pk)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED
    assert len(smtp_server.messages) == 1
    assert Delivery.objects.count() == 1
