"""Spending limits (approvals.core.limits): per agent session per day, per customer over 30 days, and a count
per session per hour, checked in the proposal's transaction under row locks."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.core.services import agent_session_create, preview_approve, preview_decline
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from refunds.models import Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, StaffFactory, UserFactory


@pytest.fixture
def orders(alice):
    """Ten of Alice's orders of €1,000.00 each: the limits, not what remains, are what refuses."""
    return [OrderFactory(number=f"big-{i}", customer=alice, currency="EUR", total_minor=100000) for i in range(10)]


def refused(response, code):
    assert response.status_code == 422, response.json()
    body = response.json()
    assert (body["ok"], body["executed"], body["error"]["code"]) == (False, False, code)
    return body["error"]


def test_an_agent_session_cannot_propose_past_its_daily_total(settings, alice, orders, alice_agent):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 50000}
    first = propose(alice_agent, order_id="big-0", amount_minor=30000, reason="damaged")
    assert first.status_code == 201

    error = refused(propose(alice_agent, order_id="big-1", amount_minor=25000, reason="damaged"), "agent_daily_limit")

    assert (error["limit_minor"], error["used_minor"], error["amount_minor"], error["currency"]) == (
        50000,
        30000,
        25000,
        "EUR",
    )
    assert (error["limit"], error["used"]) == (50000, 30000)
    assert "€500.00 (50000)" in error["message"] and "€300.00 (30000)" in error["message"]
    assert "€250.00 (25000)" in error["message"] and "€200.00 (20000) remains" in error["message"]
    assert Preview.objects.count() == 1
    record = AuditRecord.objects.filter(event="proposal_refused").get()
    assert record.agent_session_id == alice_agent.agent_session.pk
    assert record.result["error"]["code"] == "agent_daily_limit"
    assert record.result["error"]["used_minor"] == 30000
    assert record.subject_id == "big-1"
    # Up to the limit exactly is allowed.
    assert propose(alice_agent, order_id="big-1", amount_minor=20000, reason="damaged").status_code == 201


def test_declined_expired_and_failed_previews_do_not_count_waiting_and_executed_ones_do(
    settings, alice, orders, alice_agent, django_capture_on_commit_callbacks
):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 1000}
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100000}
    declined = Preview.objects.get(
        pk=propose(alice_agent, order_id="big-0", amount_minor=600, reason="damaged").json()["preview"]["id"]
    )
    refused(propose(alice_agent, order_id="big-1", amount_minor=600, reason="damaged"), "agent_daily_limit")
    preview_decline(preview_id=declined.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=declined.digest)

    waiting = propose(alice_agent, order_id="big-1", amount_minor=600, reason="damaged")
    assert waiting.status_code == 201
    Preview.objects.filter(pk=waiting.json()["preview"]["id"]).update(status=PreviewStatus.EXPIRED)
    executed = Preview.objects.get(
        pk=propose(alice_agent, order_id="big-2", amount_minor=600, reason="damaged").json()["preview"]["id"]
    )
    Preview.objects.filter(pk=declined.pk).update(status=PreviewStatus.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=executed.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=executed.digest)
    executed.refresh_from_db()
    assert executed.status == PreviewStatus.EXECUTED

    error = refused(propose(alice_agent, order_id="big-3", amount_minor=500, reason="damaged"), "agent_daily_limit")
    assert error["used_minor"] == 600  # the executed one only

    # A refund the bank failed moved no money: it no longer counts.
    Refund.objects.filter(preview=executed).update(status="failed")
    assert propose(alice_agent, order_id="big-3", amount_minor=500, reason="damaged").status_code == 201


def test_the_same_pending_proposal_again_is_answered_with_its_preview_not_refused(settings, alice, orders, alice_agent):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 1000}
    first = propose(alice_agent, order_id="big-0", amount_minor=800, reason="damaged")
    again = propose(alice_agent, order_id="big-0", amount_minor=800, reason="damaged")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["preview"]["id"] == first.json()["preview"]["id"]


def test_a_customer_has_one_total_over_30_days_across_sessions(settings, alice, orders):
    settings.SPEND_LIMIT_CUSTOMER_30D = {"EUR": 100000}
    one, two = agent_client_for(alice), agent_client_for(alice)
    old = propose(one, order_id="big-0", amount_minor=90000, reason="damaged")
    Preview.objects.filter(pk=old.json()["preview"]["id"]).update(created_at=timezone.now() - timedelta(days=31))
    assert propose(one, order_id="big-1", amount_minor=70000, reason="damaged").status_code == 201

    error = refused(propose(two, order_id="big-2", amount_minor=40000, reason="damaged"), "customer_period_limit")

    assert (error["limit_minor"], error["used_minor"], error["amount_minor"]) == (100000, 70000, 40000)
    assert "€1,000.00 (100000)" in error["message"] and "€700.00 (70000)" in error["message"]
    assert AuditRecord.objects.get(event="proposal_refused").result["error"]["code"] == "customer_period_limit"


def test_a_session_may_make_only_so_many_proposals_an_hour(settings, alice, orders, alice_agent):
    settings.SPEND_LIMIT_AGENT_HOURLY_COUNT = 2
    assert propose(alice_agent, order_id="big-0", amount_minor=100, reason="damaged").status_code == 201
    assert propose(alice_agent, order_id="big-1", amount_minor=100, reason="damaged").status_code == 201

    error = refused(propose(alice_agent, order_id="big-2", amount_minor=100, reason="damaged"), "agent_hourly_count")

    assert (error["limit"], error["used"]) == (2, 2)
    assert "already made 2 proposals in the last hour, the most allowed (2)" in error["message"]
    Preview.objects.update(created_at=timezone.now() - timedelta(minutes=61))
    assert propose(alice_agent, order_id="big-2", amount_minor=100, reason="damaged").status_code == 201


def test_a_currency_without_a_limit_is_not_limited_and_unset_means_no_limit(settings, alice, alice_agent):
    OrderFactory(number="usd-1", customer=alice, currency="USD", total_minor=100000)
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 1}
    assert propose(alice_agent, order_id="usd-1", amount_minor=90000, reason="damaged").status_code == 201
    settings.SPEND_LIMIT_AGENT_DAILY = {"*": 1}
    refused(propose(alice_agent, order_id="usd-1", amount_minor=5000, reason="damaged"), "agent_daily_limit")


def test_the_console_shows_each_sessions_use_against_its_limits(settings, alice, orders, alice_agent, client):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 50000}
    settings.SPEND_LIMIT_AGENT_HOURLY_COUNT = 60
    propose(alice_agent, order_id="big-0", amount_minor=12345, reason="damaged")
    sam = StaffFactory(username="sam")
    sam.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(sam)

    page = client.get("/console/agent-sessions/").content.decode()

    assert "Today in EUR: €123.45 (12345) of €500.00 (50000)" in page
    assert "Proposals in the last hour: 1 of 60" in page


@pytest.mark.postgres
def test_fifty_concurrent_proposals_from_one_session_cannot_exceed_the_daily_total(settings, transactional_db):
    settings.SPEND_LIMIT_AGENT_DAILY = {"EUR": 20000}
    alice = UserFactory(username="alice")
    for i in range(50):
        OrderFactory(number=f"race-{i}", customer=alice, currency="EUR", total_minor=100000)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])
    barrier = threading.Barrier(50)
    answers, errors = [None] * 50, []

    def worker(index):
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            barrier.wait(timeout=60)
            body = {
                "name": "refund_order",
                "arguments": {"order_id": f"race-{index}", "amount_minor": 1500, "reason": "damaged"},
            }
            response = client.post("/api/agent/tool-calls", body, format="json")
            answers[index] = (response.status_code, response.json())
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a request hung"
    assert errors == []

    statuses = sorted(status for status, _ in answers)
    # 13 × €15.00 = €195.00 fits under €200.00; a 14th would not. Counted one after the other, exactly 13 pass.
    assert statuses.count(201) == 13, statuses
    assert statuses.count(422) == 37, statuses
    assert {body["error"]["code"] for status, body in answers if status == 422} == {"agent_daily_limit"}
    assert sum(Preview.objects.values_list("amount_minor", flat=True)) == 19500
    assert AuditRecord.objects.filter(event="proposal_refused").count() == 37
