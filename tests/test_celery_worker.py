"""The real path: a confirmation commits, the task goes through Redis, a separate worker executes it."""

import pytest
from django.conf import settings

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from approvals.tasks import execute_preview
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory
from tests.workers import publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_confirmation_is_executed_once_by_a_separate_worker_through_redis(transactional_db):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    response = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])

    worker = start_worker(settings.REDIS_URL)
    try:
        with publishing_to(settings.REDIS_URL):
            preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
            executed = wait_for(lambda: Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED)
            # Deliver the same task twice more: the worker must not pay again.
            execute_preview.delay(str(preview.pk))
            execute_preview.delay(str(preview.pk))
            wait_for(lambda: False, timeout=2)
    finally:
        log = stop(worker)
    assert executed, log[-3000:]
    assert log.count("approvals.execute_preview[") >= 3, log[-3000:]

    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    order = Order.objects.get(number="o-12")
    assert (order.refunded_minor, order.version) == (500, 2)
