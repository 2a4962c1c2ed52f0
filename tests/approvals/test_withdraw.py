"""Issue 37: an agent withdraws its own proposal while it waits for a decision
(`POST /api/agent/previews/<id>/withdraw`); once decided it cannot. The customer's page, the console and
Slack say that the agent withdrew it; the audit keeps who and from which status; the agent's webhook
hears of it. A new proposal on a subject with other open proposals of the same session says so."""

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.agents import webhooks
from approvals.console.slack.messages import message_for
from approvals.core.services import preview_approve, preview_decline, preview_execute, preview_withdraw
from approvals.models import (
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
    WebhookDelivery,
)
from refunds.models import Refund
from tests.conftest import agent_client_for, assert_nothing_moved, events, propose
from tests.console.conftest import make_reviewer
from tests.factories import OrderFactory

REFUND = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}
WITHDRAWN_REASON = "The agent withdrew this proposal before it was decided."
NOT_FOUND = {
    "ok": False,
    "executed": False,
    "error": {"code": "not_found", "message": "This agent session proposed no preview with this id."},
}


def withdraw(client, preview_id):
    return client.post(f"/api/agent/previews/{preview_id}/withdraw")


def proposed_by(client, **arguments):
    response = propose(client, **{**REFUND, **arguments})
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def customer_confirms(preview):
    return preview_approve(
        preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
    )


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def big_order(alice, settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000}
    return OrderFactory(number="o-77", customer=alice, currency="EUR", total_minor=50000)


# Withdrawn --------------------------------------------------------------------------------------


def test_a_preview_waiting_for_the_customer_is_withdrawn(alice_agent, o12, django_capture_on_commit_callbacks):
    preview = proposed_by(alice_agent)
    with django_capture_on_commit_callbacks(execute=True):
        response = withdraw(alice_agent, preview.pk)

    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["executed"], body["status"], body["outcome"]) == (True, False, "withdrawn", None)
    assert body["preview"]["id"] == str(preview.pk) and body["preview"]["status"] == "withdrawn"
    assert body["preview"]["failure"] == {"code": "withdrawn", "reason": WITHDRAWN_REASON}
    assert (
        body["message"] == "Refund €5.00 on order o-12: withdrawn by the agent before it was decided, nothing was done."
    )
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.WITHDRAWN, "withdrawn")
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.WITHDRAWN)
    assert record.result == {"previous_status": "awaiting_customer", "reason": WITHDRAWN_REASON}
    assert (record.actor_id, record.agent_session_id) == (
        alice_agent.agent_session.user_id,
        alice_agent.agent_session.pk,
    )
    assert events(preview) == [AuditEvent.PROPOSED, AuditEvent.WITHDRAWN]
    assert_nothing_moved(o12)

    # The GET says the same; a long-poll on it answers at once (it changes no more).
    read = alice_agent.get(f"/api/agent/previews/{preview.pk}?wait=5")
    assert read.json()["status"] == "withdrawn" and read["Preview-Waited-Seconds"] == "0.0"


def test_the_customer_cannot_confirm_it_and_the_page_says_the_assistant_withdrew_it(alice, alice_agent, o12):
    preview = proposed_by(alice_agent)
    withdraw(alice_agent, preview.pk)

    page = logged_in(alice).get(f"/previews/{preview.pk}/").content.decode()
    assert "Withdrawn." in page
    assert "The assistant withdrew this request before it was decided; nothing was done." in page
    assert f"/previews/{preview.pk}/confirm" not in page  # no confirm button
    mine = logged_in(alice).get("/previews/").content.decode()
    assert '<span class="status-word status-withdrawn">Withdrawn</span>' in mine
    confirm = logged_in(alice).post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert confirm.status_code == 409
    assert "The assistant withdrew this request before it was decided" in confirm.content.decode()
    assert AuditRecord.objects.get(preview=preview, event=AuditEvent.DECISION_REFUSED).result["error"]["code"] == (
        "not_awaiting_decision"
    )
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.WITHDRAWN
    assert_nothing_moved(o12)


def test_a_preview_waiting_for_staff_leaves_the_queue_and_the_console_says_the_agent_withdrew_it(
    alice, big_order, django_capture_on_commit_callbacks
):
    agent = agent_client_for(alice)
    preview = customer_confirms(proposed_by(agent, order_id="o-77", amount_minor=12000))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    reviewer = logged_in(make_reviewer("rita"))
    assert str(preview.pk) in reviewer.get("/console/").content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = withdraw(agent, preview.pk)

    assert response.status_code == 200 and response.json()["status"] == "withdrawn"
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.WITHDRAWN)
    assert record.result["previous_status"] == "awaiting_staff"
    assert str(preview.pk) not in reviewer.get("/console/").content.decode()  # the staff queue
    withdrawn_tab = reviewer.get("/console/?state=withdrawn").content.decode()
    assert str(preview.pk) in withdrawn_tab and "Withdrawn by the agent" in withdrawn_tab
    detail = reviewer.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "The agent withdrew it before it was decided; nothing was done." in detail
    assert 'name="operation" value="approve"' not in detail and f"/console/previews/{preview.pk}/approve" not in detail
    trail = reviewer.get(f"/console/previews/{preview.pk}/audit/").content.decode()
    assert "alice through agent session " in trail
    assert "withdrew it while it waited for a staff review; nothing was done." in trail
    # Slack's message of it loses its buttons and says the same.
    text, blocks = message_for(Preview.objects.get(pk=preview.pk))
    assert text.startswith("Withdrawn: ")
    assert not any(element.get("action_id") == "approve" for b in blocks for element in b.get("elements", []))
    assert any(WITHDRAWN_REASON in b.get("text", {}).get("text", "") for b in blocks)


def test_a_preview_the_gate_sent_back_to_staff_is_withdrawn_and_its_execution_ends_before_any_effect(
    alice, big_order, django_capture_on_commit_callbacks
):
    agent = agent_client_for(alice)
    preview = customer_confirms(proposed_by(agent, order_id="o-77", amount_minor=12000))
    rosa = make_reviewer("rosa")
    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(preview_id=preview.pk, approver=rosa, role=ApprovalRole.STAFF, digest=preview.digest)
    rosa.groups.clear()
    preview_execute(preview_id=preview.pk)
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.AWAITING_STAFF, "approval_lapsed")

    response = withdraw(agent, preview.pk)

    assert response.status_code == 200 and response.json()["status"] == "withdrawn"
    execution = Execution.objects.get(preview=preview)
    assert (execution.outcome, execution.code) == (ExecutionOutcome.REFUSED_BEFORE_EFFECT, "withdrawn")
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.WITHDRAWN, "withdrawn")
    preview_execute(preview_id=preview.pk)  # a late attempt finds nothing to do
    assert not Refund.objects.exists()
    assert AuditRecord.objects.get(preview=preview, event=AuditEvent.WITHDRAWN).result["previous_status"] == (
        "awaiting_staff"
    )


def test_withdrawing_again_answers_with_the_withdrawn_preview_and_records_nothing_new(alice_agent, o12):
    preview = proposed_by(alice_agent)
    first = withdraw(alice_agent, preview.pk)
    again = withdraw(alice_agent, preview.pk)
    assert again.status_code == 200 and again.json() == first.json()
    assert AuditRecord.objects.filter(preview=preview, event=AuditEvent.WITHDRAWN).count() == 1
    assert events(preview) == [AuditEvent.PROPOSED, AuditEvent.WITHDRAWN]


def test_after_a_withdrawal_the_same_proposal_makes_a_new_preview(alice_agent, o12):
    preview = proposed_by(alice_agent)
    withdraw(alice_agent, preview.pk)
    again = propose(alice_agent, **REFUND)
    assert again.status_code == 201 and again.json()["preview"]["id"] != str(preview.pk)
    assert again.json()["status"] == "awaiting_customer"


def test_the_agents_webhook_hears_of_the_withdrawal(alice, o12, monkeypatch, django_capture_on_commit_callbacks):
    published = []
    monkeypatch.setattr(webhooks, "_publish", lambda delivery_id, countdown=0: published.append(delivery_id))
    agent = agent_client_for(alice)
    webhooks.agent_session_webhook_set(agent.agent_session, "http://127.0.0.1:9/hooks")
    with django_capture_on_commit_callbacks(execute=True):
        preview = proposed_by(agent)
    with django_capture_on_commit_callbacks(execute=True):
        withdraw(agent, preview.pk)

    delivery = WebhookDelivery.objects.get(preview=preview, event_type="preview.withdrawn")
    assert delivery.payload["type"] == "preview.withdrawn" and delivery.payload["status"] == "withdrawn"
    assert delivery.payload["preview"]["failure"]["code"] == "withdrawn"
    assert published[-1] == delivery.pk


# Refused ----------------------------------------------------------------------------------------


def decided(preview, how):
    if how == "approved":  # the customer confirmed; the worker has not run yet
        return customer_confirms(preview)
    if how == "executed":
        customer_confirms(preview)
        preview_execute(preview_id=preview.pk)
        return preview
    if how == "declined":
        return preview_decline(
            preview_id=preview.pk, person=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
        )
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    return preview


@pytest.mark.parametrize(
    ("how", "label"),
    [
        ("approved", "approved, processing"),
        ("executed", "completed"),
        ("declined", "declined by the customer"),
        ("expired", "expired"),
    ],
)
def test_a_preview_no_longer_waiting_is_a_409_saying_its_status(
    how, label, alice_agent, o12, django_capture_on_commit_callbacks
):
    preview = proposed_by(alice_agent)
    with django_capture_on_commit_callbacks(execute=False):
        decided(preview, how)

    response = withdraw(alice_agent, preview.pk)

    assert response.status_code == 409
    assert response.json() == {
        "ok": False,
        "executed": False,
        "error": {
            "code": "not_awaiting_decision",
            "message": f"This preview can no longer be withdrawn: its status is {how} ({label}). "
            "Only a preview waiting for the customer or staff can be.",
            "status": how,
        },
    }
    preview.refresh_from_db()
    assert preview.status == how
    refused = AuditRecord.objects.get(preview=preview, event=AuditEvent.DECISION_REFUSED)
    assert refused.result["operation"] == "withdraw" and refused.result["role"] == "agent"
    assert refused.result["error"]["code"] == "not_awaiting_decision" and refused.result["error"]["status"] == how
    assert refused.agent_session_id == alice_agent.agent_session.pk
    assert not AuditRecord.objects.filter(event=AuditEvent.WITHDRAWN).exists()


def test_another_sessions_or_persons_preview_is_the_same_404_as_none(alice, bob, o12, o17):
    mine = agent_client_for(alice)
    my_other_session = agent_client_for(alice)
    bobs = agent_client_for(bob)
    preview = proposed_by(mine)
    bobs_preview = proposed_by(bobs, order_id="o-17")

    answers = [
        withdraw(my_other_session, preview.pk),
        withdraw(mine, bobs_preview.pk),
        withdraw(mine, uuid.uuid4()),
        withdraw(mine, "not-an-id"),
    ]

    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert all(a.json() == NOT_FOUND for a in answers)
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.AWAITING_CUSTOMER
    assert Preview.objects.get(pk=bobs_preview.pk).status == PreviewStatus.AWAITING_CUSTOMER
    assert not AuditRecord.objects.filter(event__in=[AuditEvent.WITHDRAWN, AuditEvent.DECISION_REFUSED]).exists()


def test_without_a_token_it_is_a_401(alice_agent, o12):
    preview = proposed_by(alice_agent)
    response = Client().post(f"/api/agent/previews/{preview.pk}/withdraw")
    assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated"
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.AWAITING_CUSTOMER


def test_the_service_refuses_another_sessions_preview_as_missing(alice, o12):
    preview = proposed_by(agent_client_for(alice))
    other = agent_client_for(alice).agent_session
    with pytest.raises(Preview.DoesNotExist):
        preview_withdraw(agent_session=other, preview_id=preview.pk)


# A new proposal among open ones -----------------------------------------------------------------


def test_a_new_proposal_on_a_subject_with_open_proposals_of_the_session_says_so(alice, o12):
    agent = agent_client_for(alice)
    first = propose(agent, **REFUND).json()
    assert "other_open_previews" not in first

    second = propose(agent, **{**REFUND, "amount_minor": 300})

    assert second.status_code == 201
    body = second.json()
    first_id = first["preview"]["id"]
    assert body["other_open_previews"] == [first_id]
    assert body["message"].endswith(
        f" This agent session has 1 other open proposal on order o-12 ({first_id}): once one of them or this one "
        "is carried out, the rest go out of date and nothing is done with them. Withdraw any you no longer want "
        "(withdraw_preview, or POST /api/agent/previews/<id>/withdraw)."
    )
    third = propose(agent, **{**REFUND, "amount_minor": 200}).json()
    assert third["other_open_previews"] == [first_id, body["preview"]["id"]]
    assert "2 other open proposals on order o-12" in third["message"]

    # Withdrawn ones, another session's and another subject's do not count.
    withdraw(agent, first_id)
    fourth = propose(agent, **{**REFUND, "amount_minor": 100}).json()
    assert fourth["other_open_previews"] == [body["preview"]["id"], third["preview"]["id"]]
    elsewhere = propose(agent_client_for(alice), **{**REFUND, "amount_minor": 50}).json()
    assert "other_open_previews" not in elsewhere and "other open proposal" not in elsewhere["message"]
