"""Issue 30, low findings: the audit export, the agent-sessions page and revocation are scoped to the
actions the staff member decides; only the auditor sees (and revokes) everything."""

import csv
import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from approvals.core.services import audit_record
from approvals.models import AgentSession, AuditEvent, AuditRecord
from invoices.permissions import INVOICE_APPROVERS
from tests.conftest import agent_client_for
from tests.factories import StaffFactory, UserFactory

from .conftest import logged_in, make_reviewer
from .test_audit import export, streamed


def auditor_permission() -> Permission:
    return Permission.objects.get(content_type__app_label="approvals", codename="audit_everything")


def make_invoice_approver(username: str = "ivy"):
    user = StaffFactory(username=username)
    user.groups.add(Group.objects.get(name=INVOICE_APPROVERS))
    return user


def make_auditor(username: str = "aude"):
    """An auditor who decides nothing: the permission alone, and the export's."""
    user = StaffFactory(username=username)
    user.user_permissions.add(
        auditor_permission(), Permission.objects.get(content_type__app_label="approvals", codename="export_auditrecord")
    )
    return user


@pytest.fixture
def mixed_records(db):
    """One record of each kind of scope: a refund's, an invoice send's, and one about no action."""
    customer = UserFactory(username="carla", email="carla@example.com")
    return {
        "refund": audit_record(
            event=AuditEvent.PROPOSAL_REFUSED,
            actor=customer,
            action="refund_order",
            subject_id="o-1",
            raw_arguments='{"order_id": "o-1", "email": "carla@example.com"}',
        ),
        "invoice": audit_record(
            event=AuditEvent.PROPOSAL_REFUSED, actor=customer, action="send_invoice", subject_id="inv-1"
        ),
        "none": audit_record(event=AuditEvent.SHOP_DATA_CHANGED, result={"email": "carla@example.com"}),
    }


def exported_ids(user, fmt="csv") -> list[int]:
    response = export(logged_in(user), fmt)
    assert response.status_code == 200
    body = streamed(response)
    if fmt == "csv":
        return [int(row["id"]) for row in csv.DictReader(io.StringIO(body))]
    return [json.loads(line)["id"] for line in body.splitlines()]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_invoice_approver_exports_only_invoice_records(mixed_records, fmt):
    ids = exported_ids(make_invoice_approver(), fmt)
    assert ids == [mixed_records["invoice"].pk]


def test_a_refund_reviewer_exports_only_refund_records_and_no_customer_email_of_other_records(mixed_records):
    response = export(logged_in(make_reviewer("rita")), "csv")
    body = streamed(response)
    assert [int(row["id"]) for row in csv.DictReader(io.StringIO(body))] == [mixed_records["refund"].pk]
    assert body.count("carla@example.com") == 1  # the refund's own arguments, not the action-less record


def test_the_auditor_exports_every_record(mixed_records):
    ids = exported_ids(make_auditor())
    assert ids == sorted(r.pk for r in mixed_records.values())


def test_records_of_a_preview_count_by_the_previews_action(awaiting_staff):
    """A record about a refund preview is the refund reviewers', whatever its own action column says."""
    stray = AuditRecord.objects.create(event=AuditEvent.REVIEW_CLAIMED, preview=awaiting_staff, action="")
    assert stray.pk in exported_ids(make_reviewer("rita"))
    assert stray.pk not in exported_ids(make_invoice_approver())


def test_the_auditor_permission_is_declared_by_a_migration(db):
    assert auditor_permission().name.startswith("Can see and export every audit record")


def test_the_audit_page_says_what_the_export_holds(db):
    page = logged_in(make_invoice_approver()).get("/console/audit/").content.decode()
    assert "only the records of the actions you decide" in page
    page = logged_in(make_auditor()).get("/console/audit/").content.decode()
    assert "every audit record" in page


# Agent sessions ------------------------------------------------------------------------------


def _session(user, tools, label=""):
    session = agent_client_for(user, tools=tools, label=label).agent_session
    return session


@pytest.fixture
def sessions(db):
    customer = UserFactory(username="carla")
    clerk = StaffFactory(username="clerk")
    clerk.groups.add(Group.objects.get(name="Billing"))
    return {
        "refund": _session(customer, ["refund_order"], label="refund-agent"),
        "invoice": _session(customer, ["send_invoice"], label="invoice-agent"),
        "staff_invoice": _session(clerk, ["send_invoice"], label="clerk-agent"),
    }


def listed(user) -> str:
    response = logged_in(user).get("/console/agent-sessions/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_refund_reviewer_lists_only_sessions_with_refund_tools(sessions):
    page = listed(make_reviewer("rita"))
    assert sessions["refund"].token_prefix in page and "refund-agent" in page
    assert sessions["invoice"].token_prefix not in page and "invoice-agent" not in page
    assert sessions["staff_invoice"].token_prefix not in page


def test_an_invoice_approver_lists_invoice_sessions_and_may_not_revoke_a_staff_session(sessions):
    approver = make_invoice_approver()
    page = listed(approver)
    assert sessions["invoice"].token_prefix in page and sessions["staff_invoice"].token_prefix in page
    assert sessions["refund"].token_prefix not in page
    staff = sessions["staff_invoice"]
    assert f"/console/agent-sessions/{staff.pk}/revoke" not in page
    assert f"/console/agent-sessions/{sessions['invoice'].pk}/revoke" in page
    assert "Only an auditor may revoke a staff member's session" in page

    response = logged_in(approver).post(f"/console/agent-sessions/{staff.pk}/revoke")
    assert response.status_code == 403
    assert AgentSession.objects.get(pk=staff.pk).revoked_at is None
    assert not AuditRecord.objects.filter(event=AuditEvent.AGENT_SESSION_REVOKED).exists()


def test_revoking_a_session_out_of_scope_is_answered_like_a_missing_one(sessions):
    client = logged_in(make_invoice_approver())
    refund = sessions["refund"]
    response = client.post(f"/console/agent-sessions/{refund.pk}/revoke", follow=True)
    assert "That agent session had already expired or been revoked." in response.content.decode()
    assert AgentSession.objects.get(pk=refund.pk).revoked_at is None
    missing = client.post("/console/agent-sessions/999999/revoke", follow=True)
    assert "That agent session had already expired or been revoked." in missing.content.decode()


def test_a_reviewer_revokes_a_customer_session_in_scope(sessions):
    approver = make_invoice_approver()
    response = logged_in(approver).post(f"/console/agent-sessions/{sessions['invoice'].pk}/revoke")
    assert response.status_code == 302
    assert AgentSession.objects.get(pk=sessions["invoice"].pk).revoked_at is not None
    assert AuditRecord.objects.get(event=AuditEvent.AGENT_SESSION_REVOKED).actor == approver


def test_the_auditor_lists_every_session_and_revokes_a_staff_session(sessions):
    auditor = make_auditor()
    page = listed(auditor)
    for session in sessions.values():
        assert session.token_prefix in page
        assert f"/console/agent-sessions/{session.pk}/revoke" in page
    staff = sessions["staff_invoice"]
    response = logged_in(auditor).post(f"/console/agent-sessions/{staff.pk}/revoke")
    assert response.status_code == 302
    assert AgentSession.objects.get(pk=staff.pk).revoked_at is not None
    assert AuditRecord.objects.get(event=AuditEvent.AGENT_SESSION_REVOKED).actor == auditor


def test_webhook_deliveries_are_scoped_like_the_sessions(sessions):
    from approvals.models import WebhookDelivery

    for key in ("refund", "invoice"):
        WebhookDelivery.objects.create(
            agent_session=sessions[key],
            message_id=f"msg_{key}",
            event_type="preview.updated",
            url="https://example.com/hook",
            payload={},
            created_at=timezone.now() - timedelta(seconds=1),
        )
    page = listed(make_reviewer("rita"))
    assert "msg_refund" in page and "msg_invoice" not in page
