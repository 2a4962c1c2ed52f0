"""The Django admin shows the records but cannot become a path that edits or executes an action."""

import pytest
from django.contrib import admin
from django.urls import reverse

from approvals.models import (
    AgentSession,
    Approval,
    AuditRecord,
    IdempotencyRecord,
    Preview,
    PreviewStatus,
    RejectedCallTally,
)
from invoices.models import Delivery, Invoice, InvoiceStatus, StandingApproval
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.factories import StaffFactory

from .conftest import logged_in
from .test_decisions import approve

READ_ONLY = [
    Preview,
    Approval,
    AuditRecord,
    IdempotencyRecord,
    RejectedCallTally,
    Refund,
    LocalGatewayRefund,
    Order,
    Invoice,
    StandingApproval,
    Delivery,
]


@pytest.fixture
def executed(awaiting_staff, second_reviewer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        approve(logged_in(second_reviewer), awaiting_staff)
    assert Refund.objects.count() == 1
    return awaiting_staff


@pytest.fixture
def invoice(alice, second_reviewer):
    invoice = Invoice.objects.create(number="INV-9", customer=alice, currency="EUR", status=InvoiceStatus.ISSUED)
    invoice.lines.create(position=1, description="Consulting", quantity=1, unit_minor=12000)
    invoice.contacts.create(email="billing@example.test")
    StandingApproval.objects.create(invoice=invoice, recipient="billing@example.test", approved_by=second_reviewer)
    return invoice


@pytest.fixture
def superuser_client(db):
    return logged_in(StaffFactory(username="root", is_superuser=True))


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_models_are_registered_and_read_only(model, executed, superuser_client, rf):
    model_admin = admin.site._registry[model]
    request = rf.get("/")
    request.user = StaffFactory(username="root2", is_superuser=True)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert model_admin.get_actions(request) == {}


@pytest.mark.parametrize(
    "model",
    [Preview, Approval, AuditRecord, Refund, LocalGatewayRefund, Order, Invoice, StandingApproval],
    ids=lambda m: m.__name__,
)
def test_the_admin_pages_show_but_refuse_writes(model, executed, invoice, superuser_client):
    def url(view, *args):
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)

    obj = model.objects.first()
    changelist = superuser_client.get(url("changelist"))
    assert changelist.status_code == 200
    assert 'name="action"' not in changelist.content.decode()
    assert superuser_client.get(url("add")).status_code == 403

    page = superuser_client.get(url("change", obj.pk))
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert superuser_client.post(url("change", obj.pk), {}).status_code == 403
    assert superuser_client.post(url("delete", obj.pk), {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


def test_an_approved_preview_cannot_be_edited_through_the_admin(executed, superuser_client):
    url = reverse("admin:approvals_preview_change", args=[executed.pk])
    superuser_client.post(url, {"status": "approved", "amount_minor": 99999})
    preview = Preview.objects.get(pk=executed.pk)
    assert (preview.status, preview.amount_minor) == (PreviewStatus.EXECUTED, 12000)


def test_agent_sessions_can_be_revoked_but_not_minted_in_the_admin(awaiting_staff, superuser_client, rf):
    model_admin = admin.site._registry[AgentSession]
    request = rf.get("/")
    request.user = StaffFactory(username="root3", is_superuser=True)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert "token_hash" not in model_admin.get_fields(request, AgentSession.objects.first())
