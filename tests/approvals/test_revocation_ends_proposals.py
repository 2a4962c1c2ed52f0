"""Issue 16, item 9: revoking an agent session supersedes what it proposed and nobody acted on yet."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from approvals.core.errors import DecisionError
from approvals.core.services import agent_sessions_revoke, preview_approve
from approvals.core.services.execution import preview_execute
from approvals.core.services.execution.attempt import attempt_begin
from approvals.models import AgentSession, ApprovalRole, AuditRecord, Preview, PreviewStatus
from tests.conftest import agent_client_for, assert_nothing_moved, events, propose
from tests.factories import OrderFactory, StaffFactory


def _propose(agent, order, amount=500):
    response = propose(agent, order_id=order.number, amount_minor=amount, reason="damaged")
    assert response.status_code == 201, response.content
    return Preview.objects.get(pk=response.json()["preview"]["id"])


@pytest.mark.parametrize("how", ["command_by_user", "command_by_prefix", "console", "service"])
def test_revoking_supersedes_open_previews_and_confirming_then_does_nothing(alice, o12, how, settings):
    agent = agent_client_for(alice)
    preview = _propose(agent, o12)
    if how == "command_by_user":
        call_command("revoke_agent_session", "--user", "alice", stdout=StringIO())
    elif how == "command_by_prefix":
        call_command("revoke_agent_session", "--token-prefix", agent.token[:12], stdout=StringIO())
    elif how == "console":
        from django.contrib.auth.models import Group

        staff = StaffFactory(username="rita")
        staff.groups.add(Group.objects.get(name="Refund reviewers"))
        console = Client()
        console.force_login(staff)
        response = console.post(f"/console/agent-sessions/{agent.agent_session.pk}/revoke")
        assert response.status_code == 302
    else:
        assert agent_sessions_revoke(username="alice") == 1

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    assert preview.failure_code == "agent_session_revoked"
    assert "revoked" in preview.failure_reason
    assert events(preview)[-1] == "superseded"
    superseded = AuditRecord.objects.get(preview=preview, event="superseded")
    assert superseded.result["code"] == "agent_session_revoked"
    assert superseded.result["previous_status"] == "awaiting_customer"
    revoked = AuditRecord.objects.get(event="agent_session_revoked")
    assert revoked.result["previews_superseded"] == [str(preview.pk)]

    with pytest.raises(DecisionError):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert_nothing_moved(o12)


def test_the_customer_and_the_agent_see_why(alice, o12):
    agent = agent_client_for(alice)
    preview = _propose(agent, o12)
    agent_sessions_revoke(token_prefix=agent.token[:12])

    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/previews/{preview.pk}/").content.decode()
    assert "Out of date." in page
    # In the customer's words (no "agent session"): what happened and what to do.
    assert "The assistant that made this request was stopped before anything was done" in page
    response = browser.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert response.status_code in (200, 409)
    assert_nothing_moved(o12)

    # The revoked token is refused outright; the person's new session reads the real status and why.
    assert agent.get(f"/api/agent/previews/{preview.pk}").status_code == 401
    body = agent_client_for(alice).get(f"/api/agent/previews/{preview.pk}").json()
    assert body["status"] == "superseded" and body["executed"] is False
    assert body["preview"]["failure"]["code"] == "agent_session_revoked"
    assert "revoked" in body["message"] and "nothing was done" in body["message"]


def test_an_approved_preview_not_yet_started_is_superseded_and_never_executed(alice, o12, alice_agent):
    preview = _propose(alice_agent, o12)
    # Confirmed, but the worker has not run yet (on_commit callbacks are not executed in this test).
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED

    agent_sessions_revoke(token_prefix=alice_agent.token[:12])

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    preview_execute(preview_id=preview.pk)  # the worker's late run
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    assert "executed" not in events(preview)
    assert preview.execution.outcome == "refused_before_effect"
    assert_nothing_moved(o12)


def test_a_preview_proposed_as_the_session_was_revoked_is_refused_at_execution(alice, o12, alice_agent):
    """The race: a proposal that got past authentication just before the revocation and was inserted
    just after. The executor checks the session again before any effect."""
    preview = _propose(alice_agent, o12)
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    AgentSession.objects.filter(pk=preview.agent_session_id).update(revoked_at=timezone.now())

    refused = preview_execute(preview_id=preview.pk)

    assert (refused.status, refused.failure_code) == (PreviewStatus.SUPERSEDED, "agent_session_revoked")
    assert_nothing_moved(o12)


def test_an_execution_already_started_is_left_to_finish(alice, o12, alice_agent):
    preview = _propose(alice_agent, o12)
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert attempt_begin(preview.pk, presented=None, worker="w") is not None  # checked, about to pay

    agent_sessions_revoke(token_prefix=alice_agent.token[:12])

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED  # the provider may have been asked: not withdrawn
    assert preview.execution.outcome == "in_progress"
    assert AuditRecord.objects.get(event="agent_session_revoked").result["previews_superseded"] == []


def test_other_sessions_and_finished_previews_are_untouched(alice, bob, o12, o17, django_capture_on_commit_callbacks):
    revoked, kept, bobs = agent_client_for(alice), agent_client_for(alice), agent_client_for(bob)
    done = _propose(revoked, o12, amount=100)
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=done.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=done.digest)
    done.refresh_from_db()
    assert done.status == PreviewStatus.EXECUTED
    open_elsewhere = _propose(kept, o12, amount=200)
    bob_open = _propose(bobs, o17, amount=300)
    gone = _propose(revoked, o12, amount=400)

    agent_sessions_revoke(token_prefix=revoked.token[:12])

    statuses = {p.pk: p.status for p in Preview.objects.all()}
    assert statuses == {
        done.pk: PreviewStatus.EXECUTED,
        open_elsewhere.pk: PreviewStatus.AWAITING_CUSTOMER,
        bob_open.pk: PreviewStatus.AWAITING_CUSTOMER,
        gone.pk: PreviewStatus.SUPERSEDED,
    }


def test_a_preview_waiting_for_staff_is_superseded_too(alice, settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100}
    order = OrderFactory(number="o-88", customer=alice, currency="EUR", total_minor=50000)
    agent = agent_client_for(alice)
    preview = _propose(agent, order, amount=20000)
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF

    agent_sessions_revoke(username="alice")

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    staff = StaffFactory(username="rita")
    from django.contrib.auth.models import Group

    staff.groups.add(Group.objects.get(name="Refund reviewers"))
    with pytest.raises(DecisionError):
        preview_approve(preview_id=preview.pk, approver=staff, role=ApprovalRole.STAFF, digest=preview.digest)
    assert_nothing_moved(order)
