"""A real SMTP peer (aiosmtpd) on a local port, and the seed 004 shop: INV-17 for billing@example.test."""

import socket
from email import message_from_bytes, policy

import pytest
from aiosmtpd.controller import Controller

from invoices.models import Invoice, InvoiceContact, InvoiceLine, InvoiceStatus, StandingApproval
from tests.conftest import agent_client_for
from tests.factories import StaffFactory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RecordingHandler:
    """Accepts (or, when told, refuses) every message and keeps what it received."""

    def __init__(self):
        self.messages = []
        self.refuse_with = None

    async def handle_DATA(self, server, session, envelope):
        if self.refuse_with:
            return self.refuse_with
        self.messages.append(
            {
                "mail_from": envelope.mail_from,
                "rcpt_tos": list(envelope.rcpt_tos),
                "message": message_from_bytes(envelope.original_content, policy=policy.default),
            }
        )
        return "250 2.0.0 OK queued"


@pytest.fixture
def smtp_server(settings):
    handler = RecordingHandler()
    controller = Controller(handler, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_TIMEOUT = 5
    try:
        yield handler
    finally:
        controller.stop()


@pytest.fixture
def smtp_down(settings):
    """A port where nothing listens: connecting is refused."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = free_port()
    settings.EMAIL_TIMEOUT = 2


@pytest.fixture
def sam(db):
    from django.contrib.auth.models import Group

    staff = StaffFactory(username="sam")
    staff.groups.add(Group.objects.get(name="Invoice approvers"))
    return staff


@pytest.fixture
def inv17(alice):
    invoice = Invoice.objects.create(
        number="INV-17", customer=alice, currency="EUR", status=InvoiceStatus.ISSUED, total_minor=12000
    )
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
    InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
    return invoice


@pytest.fixture
def standing_inv17(inv17, sam):
    return StandingApproval.objects.create(invoice=inv17, recipient="billing@example.test", approved_by=sam)


@pytest.fixture
def alice_invoice_agent(alice):
    return agent_client_for(alice, tools=("send_invoice",))
