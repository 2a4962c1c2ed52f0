"""Working the queue quickly: bulk decisions bound to each preview's digest and version, claims and
assignment, approve-and-next, the new columns and search."""

import re

import pytest
from django.contrib.auth.models import Permission

from approvals.models import Approval, AuditEvent, AuditRecord, Preview, PreviewStatus, ReviewClaim
from refunds.models import Refund
from tests.factories import OrderFactory

from .conftest import confirmed, logged_in, make_reviewer, proposed


def item(preview, digest=None, version=None):
    return f"{preview.pk}:{digest or preview.digest}:{preview.subject_version if version is None else version}"


@pytest.fixture
def three_waiting(alice):
    previews = []
    for number in ("o-71", "o-72", "o-73"):
        OrderFactory(number=number, customer=alice, currency="EUR", total_minor=50000)
        previews.append(confirmed(proposed(alice, number, 12000)))
    return previews


def test_bulk_approve_asks_for_confirmation_first(three_waiting, reviewer_client):
    response = reviewer_client.post("/console/bulk", {"decision": "approve", "item": [item(p) for p in three_waiting]})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Approve 3 previews?" in page
    assert page.count('name="item"') == 3
    assert 'name="confirmed" value="on"' in page
    assert not Approval.objects.filter(role="staff").exists()  # nothing decided yet


def test_a_changed_preview_is_refused_alone_and_the_rest_proceed(
    three_waiting, reviewer, reviewer_client, django_capture_on_commit_callbacks
):
    first, changed, third = three_waiting
    # Between drawing the page and the decision, the second order changed (another refund was made).
    from refunds.models import Order

    Order.objects.filter(number="o-72").update(version=2)
    with django_capture_on_commit_callbacks(execute=True):
        response = reviewer_client.post(
            "/console/bulk",
            {
                "decision": "approve",
                "confirmed": "on",
                "back": "/console/?state=awaiting_staff",
                "item": [item(p) for p in three_waiting],
            },
            follow=True,
        )
    assert response.redirect_chain[-1][0] == "/console/?state=awaiting_staff"
    page = response.content.decode()
    assert "You approved 2 previews; each is recorded on its own." in page
    assert "Not approved: Refund €120.00 on o-72 for customer “alice”, damaged. This preview is out of date" in page

    assert {p.status for p in Preview.objects.filter(pk__in=[first.pk, third.pk])} == {PreviewStatus.EXECUTED}
    changed.refresh_from_db()
    assert changed.status == PreviewStatus.SUPERSEDED
    assert Refund.objects.count() == 2
    # Every decision audited on its own, each bound to its own digest.
    approvals = AuditRecord.objects.filter(event=AuditEvent.APPROVED, actor=reviewer)
    assert {(r.preview_id, r.approval_basis["digest"]) for r in approvals} == {
        (first.pk, first.digest),
        (third.pk, third.digest),
    }
    assert approvals.first().approval_basis["basis"] == "staff console bulk review"
    assert AuditRecord.objects.filter(event=AuditEvent.DECISION_REFUSED, preview=changed).count() == 1


def test_a_digest_that_does_not_match_is_refused_alone(three_waiting, reviewer_client):
    first, second, third = three_waiting
    response = reviewer_client.post(
        "/console/bulk",
        {
            "decision": "reject",
            "note": "Duplicate requests",
            "confirmed": "on",
            "item": [item(first), item(second, digest="a" * 64), item(third, version=9)],
        },
        follow=True,
    )
    page = response.content.decode()
    assert "You rejected 1 preview;" in page
    assert "What you saw is not what this preview says now" in page
    assert "not the version the page showed" in page
    statuses = {p.pk: p.status for p in Preview.objects.all()}
    assert statuses == {first.pk: "rejected", second.pk: "awaiting_staff", third.pk: "awaiting_staff"}
    assert Preview.objects.get(pk=first.pk).failure_reason == "Duplicate requests"


def test_bulk_reject_needs_a_note_and_bulk_needs_items(three_waiting, reviewer_client):
    response = reviewer_client.post(
        "/console/bulk", {"decision": "reject", "item": [item(three_waiting[0])]}, follow=True
    )
    assert "Write a note" in response.content.decode()
    response = reviewer_client.post("/console/bulk", {"decision": "approve"}, follow=True)
    assert "Tick at least one preview." in response.content.decode()
    response = reviewer_client.post("/console/bulk", {"decision": "approve", "item": ["not-a-uuid:x:1"]}, follow=True)
    assert "damaged" in response.content.decode()
    assert not Approval.objects.filter(role="staff").exists()


def test_bulk_cannot_reach_previews_of_kinds_one_may_not_review(three_waiting, staff_without_permission):
    response = logged_in(staff_without_permission).post(
        "/console/bulk", {"decision": "approve", "confirmed": "on", "item": [item(three_waiting[0])]}
    )
    assert response.status_code == 403
    assert not Approval.objects.filter(role="staff").exists()


def test_the_back_address_stays_in_the_console(three_waiting, reviewer_client):
    response = reviewer_client.post(
        "/console/bulk",
        {"decision": "approve", "confirmed": "on", "back": "https://evil.example/", "item": [item(three_waiting[0])]},
    )
    assert response["Location"] == "/console/"


def test_claim_assign_take_over_and_release(awaiting_staff, reviewer, second_reviewer, reviewer_client):
    url = f"/console/previews/{awaiting_staff.pk}/claim"
    assert reviewer_client.post(url, {"operation": "claim"}).status_code == 302
    assert ReviewClaim.objects.get(preview=awaiting_staff).claimed_by == reviewer
    queue = logged_in(second_reviewer).get("/console/").content.decode()
    assert "Claimed by rita" in queue

    # Another reviewer cannot simply claim it too...
    ron = logged_in(second_reviewer)
    response = ron.post(url, {"operation": "claim"})
    assert response.status_code == 409 and "rita is already working on this preview" in response.content.decode()
    # ...nor take it over, unless a lead (who agreed with rita); that is audited.
    response = ron.post(url, {"operation": "take_over"})
    assert response.status_code == 409 and "only they or a lead" in response.content.decode()
    second_reviewer.user_permissions.add(Permission.objects.get(codename="manage_review_claims"))
    assert ron.post(url, {"operation": "take_over"}).status_code == 302
    assert ReviewClaim.objects.get(preview=awaiting_staff).claimed_by == second_reviewer
    taken = AuditRecord.objects.filter(event=AuditEvent.REVIEW_CLAIMED).last()
    assert taken.result == {"claimed_by": "ron", "previous": "rita", "assigned": False}

    # Assign it to a third reviewer; the customer (the proposer) cannot be chosen.
    tess = make_reviewer("tess")
    assert ron.post(url, {"operation": "assign", "assignee": tess.pk}).status_code == 302
    claim = ReviewClaim.objects.get(preview=awaiting_staff)
    assert (claim.claimed_by, claim.assigned_by) == (tess, second_reviewer)
    assert ron.post(url, {"operation": "assign", "assignee": awaiting_staff.actor_id}).status_code == 400
    mine = logged_in(tess).get("/console/?mine=on").content.decode()
    assert str(awaiting_staff.pk) in mine and "Yours" in mine

    assert logged_in(tess).post(url, {"operation": "release"}).status_code == 302
    assert not ReviewClaim.objects.filter(preview=awaiting_staff).exists()
    assert AuditRecord.objects.filter(event=AuditEvent.REVIEW_RELEASED, actor=tess).count() == 1


def test_approve_and_next_opens_the_next_preview_this_reviewer_can_decide(three_waiting, reviewer_client):
    """(The worker is not run here: approved previews simply stop waiting for staff.)"""
    first, second, third = three_waiting
    response = reviewer_client.post(f"/console/previews/{first.pk}/approve", {"digest": first.digest, "then": "next"})
    assert response["Location"] == f"/console/previews/{second.pk}/"
    response = reviewer_client.post(
        f"/console/previews/{second.pk}/reject", {"digest": second.digest, "note": "No", "then": "next"}
    )
    assert response["Location"] == f"/console/previews/{third.pk}/"
    response = reviewer_client.post(f"/console/previews/{third.pk}/approve", {"digest": third.digest, "then": "next"})
    assert response["Location"] == "/console/"


def test_queue_columns_and_search_by_customer_email_and_recipient(awaiting_staff, reviewer_client, alice):
    page = reviewer_client.get("/console/").content.decode()
    assert "alice@example.test" in page  # the customer
    assert awaiting_staff.agent_session.token_prefix in page  # the agent session
    assert 'data-flag="first_refund"' in page and 'data-flag="above_threshold"' in page
    assert "Above the €100.00 threshold" in page
    assert f'value="{awaiting_staff.pk}:{awaiting_staff.digest}:{awaiting_staff.subject_version}"' in page

    assert str(awaiting_staff.pk) in reviewer_client.get("/console/?q=alice@example").content.decode()
    assert str(awaiting_staff.pk) not in reviewer_client.get("/console/?q=bob@example").content.decode()


def test_a_refund_after_an_earlier_one_is_not_flagged_first(awaiting_staff, reviewer_client, alice):
    Refund.objects.create(
        order=awaiting_staff.actor.orders.first(),
        preview=Preview.objects.create(
            action="refund_order",
            actor=alice,
            subject_type="order",
            subject_id="o-77",
            subject_version=1,
            payload={},
            amount_minor=100,
            currency="EUR",
            proposal_key="p" * 64,
            digest="e" * 64,
            required_approvals=["customer"],
            status="executed",
            expires_at=awaiting_staff.expires_at,
        ),
        amount_minor=100,
        currency="EUR",
        reason="damaged",
        gateway_refund_id="re_1",
    )
    page = reviewer_client.get("/console/").content.decode()
    assert 'data-flag="first_refund"' not in page


def test_a_processing_preview_page_polls_its_status(
    awaiting_staff, reviewer_client, second_reviewer, staff_without_permission, django_capture_on_commit_callbacks
):
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole

    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(
            preview_id=awaiting_staff.pk,
            approver=second_reviewer,
            role=ApprovalRole.STAFF,
            digest=awaiting_staff.digest,
        )
    page = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/").content.decode()
    assert f'data-poll-url="/console/previews/{awaiting_staff.pk}/status"' in page
    assert '<noscript><meta http-equiv="refresh" content="15"></noscript>' in page
    status = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/status").json()
    assert status == {"status": "approved", "state": "pending", "outcome": "pending", "waiting": True}
    assert logged_in(staff_without_permission).get(f"/console/previews/{awaiting_staff.pk}/status").status_code == 403


def test_a_row_waiting_because_its_currency_has_no_threshold_says_so(reviewer_client, alice):
    """Issue 37: a JPY refund waits for staff only because JPY has no threshold; its Risk cell said "none"."""
    OrderFactory(number="o-91", customer=alice, currency="JPY", total_minor=100000)
    preview = confirmed(proposed(alice, "o-91", 500))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    page = reviewer_client.get("/console/").content.decode()
    row = re.search(r'<tr class="queue-row"[^>]*data-preview="' + str(preview.pk) + r'".*?</tr>', page, re.S)
    assert row, page
    risk = re.search(r'<td data-label="Risk">(.*?)</td>', row.group(0), re.S).group(1)
    assert 'data-flag="no_threshold"' in risk
    assert "No staff threshold for JPY: every JPY refund is reviewed" in risk
    assert ">none<" not in risk
