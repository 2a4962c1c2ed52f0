"""A rename nobody confirmed in time expires: by the sweeper, on the owner's page, and for staff; an
expired preview is terminal and the agent reads it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve, previews_expire_stale
from approvals.models import Approval, ApprovalRole, AuditRecord, Preview, PreviewStatus
from tests.toy_action.models import Board

from .conftest import events, html, logged_in, proposed


def past_due(preview):
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def test_the_sweeper_expires_what_is_past_due_and_nothing_else(board, agent):
    late = proposed(agent, title="Late title")
    on_time = proposed(agent, title="On time")
    past_due(late)

    assert previews_expire_stale() == 1

    late.refresh_from_db()
    on_time.refresh_from_db()
    assert (late.status, late.failure_code) == (PreviewStatus.EXPIRED, "expired")
    assert on_time.status == PreviewStatus.AWAITING_CUSTOMER
    expired = AuditRecord.objects.get(preview=late, event="expired")
    assert expired.result == {"expires_at": late.expires_at.isoformat()}
    body = agent.get(f"/api/agent/previews/{late.pk}").json()
    assert (body["status"], body["executed"], body["preview"]["failure"]["code"]) == ("expired", False, "expired")


def test_confirming_after_expiry_is_refused_and_it_stays_expired(board, owner, agent):
    preview = proposed(agent)
    past_due(preview)

    response = logged_in(owner).post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})

    assert response.status_code == 409
    assert "This request was not confirmed in time; nothing was done." in html(response)
    assert events(preview) == ["proposed", "expired", "decision_refused"]
    refused = AuditRecord.objects.get(preview=preview, event="decision_refused")
    assert (refused.actor, refused.result["error"]["code"]) == (owner, "expired")
    with pytest.raises(DecisionError) as again:
        preview_approve(preview_id=preview.pk, approver=owner, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert again.value.code == "not_awaiting_decision"
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXPIRED
    assert not Approval.objects.exists()
    assert Board.objects.get(pk="b-1").version == 1


def test_the_owners_page_shows_an_expired_preview_as_expired_without_the_forms(board, owner, agent):
    preview = proposed(agent)
    past_due(preview)

    page = html(logged_in(owner).get(f"/previews/{preview.pk}/"))

    assert 'data-status="expired"' in page
    assert f'action="/previews/{preview.pk}/confirm"' not in page
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXPIRED
    assert AuditRecord.objects.filter(preview=preview, event="expired").count() == 1


def test_a_preview_waiting_for_staff_expires_too(board, agent, reviewer):
    preview = proposed(agent, title="Official roadmap")
    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    past_due(preview)

    response = logged_in(reviewer).post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest})

    assert response.status_code == 409
    assert "expired before it was approved" in html(response)
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXPIRED
    assert not Approval.objects.filter(role="staff").exists()
    assert Board.objects.get(pk="b-1").title == "Roadmap"
