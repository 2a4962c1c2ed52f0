"""Issue 16, items 4 and 6: standing approvals only from people who may approve sends, checked at import
and at use, both audited; imported invoice text escaped in the console."""

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from approvals.models import Approval, AuditRecord, Preview, PreviewStatus
from invoices.models import Invoice, InvoiceLine, StandingApproval
from tests.conftest import agent_client_for
from tests.factories import StaffFactory

from .test_send_invoice import send


def _staff(username, *groups, **fields):
    user = StaffFactory(username=username, **fields)
    user.groups.set([Group.objects.get(name=name) for name in groups])
    return user


def _import(tmp_path, document):
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(document))
    err = StringIO()
    call_command("import_shop_data", str(path), "--operator", "olga", stdout=StringIO(), stderr=err)
    return err.getvalue()


def _grant(approved_by):
    return {
        "standing_approvals": [{"invoice": "INV-17", "recipient": "billing@example.test", "approved_by": approved_by}]
    }


@pytest.mark.parametrize(
    ("username", "groups", "fields", "problem"),
    [
        ("bill", ["Billing"], {}, "may not approve invoice sends"),
        ("rita", ["Refund reviewers"], {}, "may not approve invoice sends"),
        ("gone", ["Invoice approvers"], {"is_active": False}, "is not an active user"),
        ("plain", [], {}, "may not approve invoice sends"),
    ],
)
def test_the_import_refuses_a_standing_approval_from_someone_who_may_not_approve_sends(
    tmp_path, inv17, username, groups, fields, problem
):
    _staff(username, *groups, **fields)
    err = StringIO()
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(_grant(username)))
    with pytest.raises(CommandError, match="nothing was written"):
        call_command("import_shop_data", str(path), "--operator", "olga", stdout=StringIO(), stderr=err)
    assert "$.standing_approvals[0].approved_by: " in err.getvalue() and problem in err.getvalue()
    assert StandingApproval.objects.count() == 0
    assert not AuditRecord.objects.filter(event="standing_approval_granted").exists()


def test_the_import_refuses_a_staff_member_the_same_file_puts_in_billing_only(tmp_path, inv17):
    _staff("ivy", "Invoice approvers")
    document = {
        "staff": [{"username": "ivy", "email": "ivy@example.test", "groups": ["Billing"]}],
        **_grant("ivy"),
    }
    err = StringIO()
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError):
        call_command("import_shop_data", str(path), "--operator", "olga", stdout=StringIO(), stderr=err)
    assert "$.standing_approvals[0].approved_by" in err.getvalue()
    assert StandingApproval.objects.count() == 0
    assert set(Group.objects.get(name="Invoice approvers").user_set.values_list("username", flat=True)) == {"ivy"}


def test_a_grant_by_an_invoice_approver_is_imported_and_audited(tmp_path, inv17):
    _staff("ivy", "Invoice approvers")
    _import(tmp_path, _grant("ivy"))
    standing = StandingApproval.objects.get()
    assert standing.approved_by.username == "ivy"
    record = AuditRecord.objects.get(event="standing_approval_granted")
    assert (record.subject_type, record.subject_id) == ("invoice", "INV-17")
    assert record.result["operator"] == "olga"
    assert record.result["before"]["unused_standing_approvals"] == []
    assert record.result["after"]["unused_standing_approvals"] == [{"id": standing.pk, "approved_by": "ivy"}]
    _import(tmp_path, _grant("ivy"))  # unchanged: no second grant, no second record
    assert AuditRecord.objects.filter(event="standing_approval_granted").count() == 1


def test_a_grant_by_someone_the_same_file_makes_an_invoice_approver_is_accepted(tmp_path, inv17):
    document = {
        "staff": [{"username": "nina", "email": "nina@example.test", "groups": ["Invoice approvers"]}],
        **_grant("nina"),
    }
    _import(tmp_path, document)
    assert StandingApproval.objects.get().approved_by.username == "nina"


@pytest.mark.parametrize("change", ["left_the_group", "deactivated", "moved_to_billing"])
def test_a_standing_approval_is_not_used_once_its_approver_may_no_longer_approve(
    alice_invoice_agent, inv17, smtp_server, django_capture_on_commit_callbacks, change
):
    ivy = _staff("ivy", "Invoice approvers")
    standing = StandingApproval.objects.create(invoice=inv17, recipient="billing@example.test", approved_by=ivy)
    if change == "left_the_group":
        ivy.groups.clear()
    elif change == "deactivated":
        ivy.is_active = False
        ivy.save()
    else:
        ivy.groups.set([Group.objects.get(name="Billing")])

    with django_capture_on_commit_callbacks(execute=True):
        response = send(alice_invoice_agent)

    assert response.status_code == 201
    assert response.json()["status"] == "awaiting_staff"
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(preview=preview).exists()
    assert smtp_server.messages == []
    standing.refresh_from_db()
    assert standing.consumed_at is None
    refused = AuditRecord.objects.get(preview=preview, event="standing_approval_refused")
    assert refused.result["standing_approval"] == standing.pk
    assert refused.result["approved_by"] == "ivy"
    assert not AuditRecord.objects.filter(event="standing_approval_used").exists()


def test_each_use_of_a_standing_approval_is_audited(
    alice_invoice_agent, standing_inv17, smtp_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = send(alice_invoice_agent)
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.EXECUTED
    used = AuditRecord.objects.get(event="standing_approval_used")
    assert used.preview_id == preview.pk
    assert used.actor.username == "sam"
    assert used.result == {
        "standing_approval": standing_inv17.pk,
        "recipient": "billing@example.test",
        "approved_by": "sam",
    }
    assert len(smtp_server.messages) == 1


# Item 6 ----------------------------------------------------------------------------------------

HOSTILE = [
    "<img src=x onerror=alert(1)><script>alert(2)</script>",
    "</pre><svg onload=alert(3)>",
    '"><iframe src=javascript:alert(4)>',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_invoice_text_is_escaped_in_the_console(client, alice, text):
    invoice = Invoice.objects.create(number="INV-66", customer=alice, currency="EUR", status="issued", total_minor=100)
    InvoiceLine.objects.create(invoice=invoice, position=1, description=text, quantity=1, unit_minor=100)
    agent = agent_client_for(alice, tools=("send_invoice",))
    response = agent.post(
        "/api/agent/tool-calls",
        {"name": "send_invoice", "arguments": {"invoice_id": "INV-66", "recipient": "billing@example.test"}},
        format="json",
    )
    assert response.status_code == 201, response.content
    client.force_login(_staff("ivy", "Invoice approvers"))

    page = client.get(f"/console/previews/{response.json()['preview']['id']}/").content.decode()

    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    assert f"1 x {escaped} at €1.00" in page
    assert text not in page
    assert "<script>alert" not in page and "<svg onload" not in page and "<iframe src=javascript" not in page
