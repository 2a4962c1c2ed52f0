"""The broker is down while a customer confirms: the confirmation is recorded all the same, and the
sweeper executes it once the broker is back."""

import pytest

from approvals.core.services import executions_dispatch_stalled as previews_dispatch_stalled
from approvals.models import AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory
from tests.workers import PrivateRedis, publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def redis_broker():
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.stop()


def test_a_confirmation_while_the_broker_is_down_is_executed_by_the_sweeper_later(
    transactional_db, client, redis_broker
):
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    body = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged").json()
    preview = Preview.objects.get(pk=body["preview"]["id"])
    client.force_login(alice)

    with publishing_to(redis_broker.url):
        redis_broker.stop()
        response = client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
        # The customer's yes is recorded and they see it is being processed, not an error.
        assert response.status_code == 302
        preview.refresh_from_db()
        assert preview.status == PreviewStatus.APPROVED
        assert AuditRecord.objects.filter(preview=preview, event="confirmed").exists()
        assert not Refund.objects.exists()
        page = client.get(f"/previews/{preview.pk}/")
        assert "Processing" in page.content.decode()

        # The sweeper cannot publish while the broker is down, and says so.
        assert previews_dispatch_stalled(older_than_seconds=0) == 0

        redis_broker.start()
        worker = start_worker(redis_broker.url)
        try:
            assert previews_dispatch_stalled(older_than_seconds=0) == 1
            executed = wait_for(lambda: Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED)
        finally:
            log = stop(worker)
        assert executed, log[-3000:]

    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")
    assert LocalGatewayRefund.objects.count() == 1
