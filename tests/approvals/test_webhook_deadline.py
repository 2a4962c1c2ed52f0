"""One delivery attempt has one deadline for all of it (AGENT_WEBHOOK_DEADLINE_SECONDS): a receiver that
drips its answer a byte at a time, or never answers, is cut off there, and only a small part of a long
answer is read. Each receiver here holds its connection far longer than the deadline, and the attempt
must have ended (and been recorded) while the receiver is still at it."""

import pytest

from approvals.agents import webhooks
from approvals.core.services import agent_session_create
from approvals.models import WebhookDelivery, WebhookDeliveryStatus
from tests.stuck_receivers import StuckReceiver
from tests.workers import wait_for

pytestmark = pytest.mark.django_db

HELD_SECONDS = 8.0


def delivery_to(url, alice):
    session, _token = agent_session_create(user=alice, tools=["refund_order"])
    webhooks.agent_session_webhook_set(session, url)
    return WebhookDelivery.objects.create(
        agent_session=session,
        message_id="msg_deadline",
        event_type="preview.executed",
        url=url,
        payload={"type": "preview.executed", "status": "executed"},
    )


@pytest.fixture
def deadline(settings):
    settings.AGENT_WEBHOOK_DEADLINE_SECONDS = 1
    settings.AGENT_WEBHOOK_MAX_ATTEMPTS = 8
    return settings.AGENT_WEBHOOK_DEADLINE_SECONDS


@pytest.mark.parametrize("mode", ["drip_body", "drip_head", "silent"])
def test_a_receiver_that_drips_or_never_answers_is_cut_off_at_the_deadline(alice, deadline, mode):
    receiver = StuckReceiver(mode, seconds=HELD_SECONDS)
    try:
        delivery = delivery_to(receiver.url, alice)
        retry_in = webhooks.webhook_attempt(delivery.pk)
        stuck_when_the_attempt_ended = receiver.still_stuck
    finally:
        receiver.close()
    assert receiver.requests == 1
    assert stuck_when_the_attempt_ended, "the attempt lasted as long as the receiver held it"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (WebhookDeliveryStatus.PENDING, 1, None)
    assert delivery.last_error == "Deadline: no whole answer within 1 s"
    assert retry_in is not None and delivery.next_attempt_at is not None


def test_of_an_endless_answer_only_the_beginning_is_read(alice, deadline):
    receiver = StuckReceiver("endless", seconds=HELD_SECONDS)
    try:
        delivery = delivery_to(receiver.url, alice)
        retry_in = webhooks.webhook_attempt(delivery.pk)
        assert wait_for(lambda: receiver.connections_done == 1, timeout=HELD_SECONDS + 5)
    finally:
        receiver.close()
    assert receiver.hung_up_early == 1, "the attempt read the answer for as long as the receiver sent it"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code, delivery.last_error) == (
        WebhookDeliveryStatus.DELIVERED,
        1,
        200,
        "",
    )
    assert retry_in is None
