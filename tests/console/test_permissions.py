"""The permission matrix: every console URL for anonymous people, customers, staff without the
review permission, and reviewers. Only reviewers see data or change anything."""

from urllib.parse import quote

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from approvals.models import AgentSession, Approval, AuditRecord, Preview, PreviewStatus
from invoices.permissions import INVOICE_APPROVERS
from refunds.models import Refund
from refunds.permissions import REFUND_REVIEWERS
from tests.conftest import tampering

from .conftest import logged_in

EXPORT_QUERY = "start=2000-01-01T00:00&end=2100-01-01T00:00&format=csv"

# (name, method, path template, reviewer's expected status)
CONSOLE_URLS = [
    ("queue", "get", "/console/", 200),
    ("queue filtered", "get", "/console/?state=all&q=o-77&currency=EUR&age=&action=refund_order", 200),
    ("failures", "get", "/console/failures/", 200),
    ("detail", "get", "/console/previews/{id}/", 200),
    ("preview audit", "get", "/console/previews/{id}/audit/", 200),
    ("order audit", "get", "/console/subjects/order/audit/?id=o-77", 200),
    ("audit export page", "get", "/console/audit/", 200),
    ("audit export", "get", "/console/audit/export?" + EXPORT_QUERY, 200),
    ("approve", "post", "/console/previews/{id}/approve", 302),
    ("reject", "post", "/console/previews/{id}/reject", 302),
    ("retry", "post", "/console/previews/{failed_id}/retry", 302),
    ("document", "get", "/console/previews/{id}/document/body", 404),  # a refund has no document
    ("agent sessions", "get", "/console/agent-sessions/", 200),
    ("revoke agent session", "post", "/console/agent-sessions/{session_id}/revoke", 302),
]


@pytest.fixture
def targets(awaiting_staff, failed_transient_other):
    return {
        "id": awaiting_staff.pk,
        "failed_id": failed_transient_other.pk,
        "session_id": awaiting_staff.agent_session_id,
    }


@pytest.fixture
def failed_transient_other(big_order, second_reviewer, django_capture_on_commit_callbacks):
    """A second preview on the same order whose execution gave up after transient errors."""
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole
    from tests.conftest import give_up_execution

    from .conftest import confirmed, proposed

    preview = confirmed(proposed(big_order.customer, big_order.number, 11000, reason="unwanted"))
    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(preview_id=preview.pk, approver=second_reviewer, role=ApprovalRole.STAFF, digest=preview.digest)
    return give_up_execution(preview)


def _request(client: Client, method: str, path: str, preview: Preview):
    if method == "get":
        return client.get(path)
    return client.post(path, {"digest": preview.digest, "note": "Not covered by our policy."})


def _snapshot():
    return (
        list(Preview.objects.order_by("pk").values_list("pk", "status")),
        Approval.objects.count(),
        Refund.objects.count(),
        AuditRecord.objects.filter(event__in=["approved", "rejected", "retried", "agent_session_revoked"]).count(),
        AgentSession.objects.filter(revoked_at__isnull=False).count(),
    )


@pytest.mark.parametrize(("name", "method", "path", "expected"), CONSOLE_URLS, ids=[u[0] for u in CONSOLE_URLS])
def test_anonymous_is_sent_to_login_and_changes_nothing(name, method, path, expected, targets, awaiting_staff):
    before = _snapshot()
    url = path.format(**targets)
    response = _request(Client(), method, url, awaiting_staff)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={quote(url, safe='/')}"
    assert _snapshot() == before


def _no_refund_data(body: str, preview: Preview) -> bool:
    return str(preview.pk) not in body and "120.00" not in body and preview.digest not in body


@pytest.mark.parametrize("who", ["customer", "staff_without_permission"])
@pytest.mark.parametrize(("name", "method", "path", "expected"), CONSOLE_URLS, ids=[u[0] for u in CONSOLE_URLS])
def test_customers_and_staff_without_the_permission_get_403_and_no_data(
    request, who, name, method, path, expected, targets, awaiting_staff
):
    user = request.getfixturevalue(who)
    before = _snapshot()
    response = _request(logged_in(user), method, path.format(**targets), awaiting_staff)
    assert response.status_code == 403
    body = response.content.decode()
    assert "o-77" not in body and _no_refund_data(body, awaiting_staff)
    assert _snapshot() == before


@pytest.mark.parametrize(("name", "method", "path", "expected"), CONSOLE_URLS, ids=[u[0] for u in CONSOLE_URLS])
def test_an_invoice_approver_sees_no_refund_and_cannot_decide_one(
    staff_without_permission, name, method, path, expected, targets, awaiting_staff
):
    """Staff who decide invoice sends use the same console, scoped to invoices: refund previews are
    not in their queue and are a 404 to them. The audit export is a permission of its own."""
    approvers = Group.objects.get_or_create(name=INVOICE_APPROVERS)[0]
    approvers.permissions.set(Permission.objects.filter(codename="review_send_invoice"))
    staff_without_permission.groups.set([approvers])
    before = _snapshot()
    response = _request(logged_in(staff_without_permission), method, path.format(**targets), awaiting_staff)
    if "agent-sessions" in path:
        # Any reviewer may stop a misbehaving agent; revoking is audited, not a refund decision.
        assert response.status_code == expected
        return
    if "{" in path or "subjects/" in path:
        assert response.status_code == 404
    elif "audit" in path:
        assert response.status_code == 403
    else:
        assert response.status_code == 200
        assert _no_refund_data(response.content.decode(), awaiting_staff)
    assert _snapshot() == before


@pytest.mark.parametrize(("name", "method", "path", "expected"), CONSOLE_URLS, ids=[u[0] for u in CONSOLE_URLS])
def test_reviewer_may_use_every_console_url(name, method, path, expected, targets, awaiting_staff, reviewer_client):
    response = _request(reviewer_client, method, path.format(**targets), awaiting_staff)
    assert response.status_code == expected, response.content.decode()[:2000]


def test_a_superuser_who_is_not_staff_flag_still_needs_is_staff(db, alice, awaiting_staff):
    alice.is_superuser = True
    alice.save()
    assert logged_in(alice).get("/console/").status_code == 403


def test_posts_need_a_csrf_token(reviewer, awaiting_staff):
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    response = client.post(f"/console/previews/{awaiting_staff.pk}/approve", {"digest": awaiting_staff.digest})
    assert response.status_code == 403
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF


def test_migration_gives_the_groups_their_console_permissions(db):
    def codenames(name):
        return set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))

    assert codenames(REFUND_REVIEWERS) == {"review_refund_order", "export_auditrecord"}
    assert codenames(INVOICE_APPROVERS) == {"review_send_invoice", "export_auditrecord"}
    console = {"review_preview", "review_refund_order", "review_send_invoice", "export_auditrecord"}
    assert codenames("Billing") & console == set()


def test_staff_land_on_the_console_and_customers_on_their_orders(reviewer_client, alice, staff_without_permission):
    assert reviewer_client.get("/")["Location"] == "/console/"
    assert logged_in(alice).get("/")["Location"] == "/orders/"
    assert logged_in(staff_without_permission).get("/")["Location"] == "/orders/"


def test_a_preview_of_a_kind_the_reviewer_may_not_decide_is_a_404(reviewer_client, awaiting_staff):
    with tampering():
        Preview.objects.filter(pk=awaiting_staff.pk).update(action="send_invoice")
    assert reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/").status_code == 404
    page = reviewer_client.get("/console/?state=all").content.decode()
    assert str(awaiting_staff.pk) not in page
