"""The same Stripe event delivered twice at the same moment (PostgreSQL): applied once."""

import threading

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from approvals.core.services import agent_session_create, preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview
from refunds.events import local_refund_event
from refunds.models import LocalGatewayRefund, Order, ProviderEvent, Refund
from tests.conftest import propose
from tests.factories import OrderFactory, UserFactory
from tests.refunds.fake_stripe import FakeStripe

SECRET = "whsec_race_secret"
THREADS = 8

pytestmark = pytest.mark.postgres


def test_concurrent_deliveries_of_one_event_give_the_amount_back_once(settings, transactional_db):
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    settings.PAYMENT_GATEWAY = "local"
    settings.LOCAL_GATEWAY_REFUND_STATUS = "pending"
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    preview = Preview.objects.get(
        pk=propose(agent, order_id="o-12", amount_minor=500, reason="damaged").json()["preview"]["id"]
    )
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    row = LocalGatewayRefund.objects.get()
    row.status = "failed"
    event = local_refund_event(row, event_type="refund.failed")
    body, header = FakeStripe.signed(event, SECRET)
    barrier = threading.Barrier(THREADS)
    answers, errors = [None] * THREADS, []

    def deliver(index):
        try:
            barrier.wait(timeout=30)
            response = Client().post(
                "/payments/stripe/webhook", data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
            )
            answers[index] = (response.status_code, response.json()["result"])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert sorted(answers) == [(200, "duplicate")] * (THREADS - 1) + [(200, "refund_failed")]
    assert ProviderEvent.objects.count() == 1
    assert Refund.objects.get().status == "failed"
    assert Order.objects.get(number="o-12").refunded_minor == 0
    assert AuditRecord.objects.filter(event="provider_event").count() == 1
    assert AuditRecord.objects.filter(event="provider_event_repeated").count() == THREADS - 1
