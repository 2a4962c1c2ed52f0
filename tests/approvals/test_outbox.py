"""The outbox: an agent webhook, a checkpoint's publication and a notification email are rows written in
the transaction that causes them, gone with it when it rolls back; what a broker loses, the sweeper hands
over again; a message handed over twice is one delivery, under the same webhook-id."""

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.agents import webhooks
from approvals.audit import seal
from approvals.core import outbox
from approvals.models import AuditTreeHead, OutboxMessage, Preview, WebhookDelivery
from tests.approvals.test_agent_webhooks import Receiver, mint_with_webhook
from tests.conftest import AgentClient, propose, seal_all
from tests.factories import OrderFactory


class BrokerLost(Exception):
    pass


@pytest.fixture
def receiver():
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


@pytest.fixture
def broker_down(monkeypatch, settings):
    """A worker's broker that takes nothing (as a Redis that restarted without persistence lost it all)."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    lost = []

    def publish(name, queue, *args):
        lost.append((name, queue, args))
        raise BrokerLost("connection refused")

    monkeypatch.setattr(outbox, "task_publish_to", publish)
    return lost


def webhook_client(alice, url):
    *_, token = mint_with_webhook(alice.get_username(), url)
    agent = AgentClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return agent


def test_the_webhook_row_is_written_in_the_proposal_transaction_and_rolled_back_with_it(alice, receiver, settings):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = webhook_client(alice, receiver.url)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged")
        assert response.status_code == 201, response.content
        owed = OutboxMessage.objects.get()
        assert owed.kind == "agent_webhook" and owed.delivered_at is None
        assert owed.payload == {
            "preview_id": response.json()["preview"]["id"],
            "previous_status": "",
            "status": "awaiting_customer",
        }
        raise Undo
    assert OutboxMessage.objects.count() == 0
    assert Preview.objects.count() == 0


def test_a_lost_broker_loses_no_webhook_the_sweeper_sends_it_with_one_webhook_id(
    alice, receiver, broker_down, settings, django_capture_on_commit_callbacks
):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = webhook_client(alice, receiver.url)
    with django_capture_on_commit_callbacks(execute=True):
        response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201
    assert [name for name, _, _ in broker_down] == ["approvals.deliver_outbox"]
    assert broker_down[0][1] == "deliveries"
    owed = OutboxMessage.objects.get()
    assert owed.delivered_at is None and WebhookDelivery.objects.count() == 0
    # Within the grace period the sweeper leaves it (its first hand-over may still be running).
    assert outbox.outbox_sweep() == 0
    # After it, the broker is back: the sweeper hands it over; a worker runs it.
    handed = []
    from unittest import mock

    with mock.patch.object(outbox, "task_publish_to", lambda name, queue, pk: handed.append(pk)):
        later = timezone.now() + timedelta(seconds=settings.OUTBOX_GRACE_SECONDS + 1)
        assert outbox.outbox_sweep(now=later) == 1
        assert outbox.outbox_sweep(now=later) == 0  # the next sweep waits another grace period
    assert handed == [owed.pk]
    # The worker attempts the delivery itself: the message stays owed until the receiver took it.
    receiver.status = 503
    assert outbox.outbox_deliver(owed.pk) is False
    owed.refresh_from_db()
    delivery = WebhookDelivery.objects.get()
    assert owed.delivered_at is None and owed.attempts == 1 and delivery.attempts == 1
    assert delivery.message_id == owed.message_id
    assert owed.next_attempt_at == delivery.next_attempt_at or owed.next_attempt_at > timezone.now()
    receiver.status = 204
    assert outbox.outbox_deliver(owed.pk) is True
    # Handed over twice (a broker that delivered it again, a second sweep): one delivery, not sent again.
    OutboxMessage.objects.filter(pk=owed.pk).update(delivered_at=None)
    assert outbox.outbox_deliver(owed.pk) is True
    assert outbox.outbox_deliver(owed.pk) is False  # delivered: nothing runs
    assert WebhookDelivery.objects.count() == 1
    assert len(receiver.messages) == 2  # the 503 and the one taken
    # The same delivery attempted twice (a worker killed before it acknowledged) has the same webhook-id.
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="pending", delivered_at=None)
    assert webhooks.webhook_attempt(delivery.pk) is None
    ids = [{k.lower(): v for k, v in headers.items()}["webhook-id"] for headers, _ in receiver.messages]
    assert ids == [owed.message_id] * 3
    assert json.loads(receiver.messages[0][1])["preview"]["id"] == response.json()["preview"]["id"]
    owed.refresh_from_db()
    assert owed.delivered_at is not None


def test_a_checkpoint_publication_is_owed_in_the_seal_transaction(
    alice_agent, o12, settings, tmp_path, receiver, django_capture_on_commit_callbacks
):
    path = tmp_path / "checkpoints.jsonl"
    settings.AUDIT_CHECKPOINT_FILE = str(path)
    settings.AUDIT_CHECKPOINT_WEBHOOKS = [receiver.url]
    settings.AUDIT_CHECKPOINT_WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    settings.AUDIT_WITNESSES = []
    propose(alice_agent, order_id=o12.number, amount_minor=500, reason="damaged")

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        assert seal.audit_seal() > 0
        assert OutboxMessage.objects.filter(kind=seal.CHECKPOINT_PUBLISH_KIND).count() == 1
        raise Undo
    assert OutboxMessage.objects.count() == 0 and AuditTreeHead.objects.count() == 0
    assert not path.exists()
    with django_capture_on_commit_callbacks(execute=True):
        seal_all()  # eager: published at once, file and webhook
    head = AuditTreeHead.objects.order_by("-size").first()
    publication = OutboxMessage.objects.get(kind=seal.CHECKPOINT_PUBLISH_KIND)
    assert publication.message_id == f"audit-publish-{head.size}" and publication.delivered_at is not None
    webhook = OutboxMessage.objects.get(kind=seal.CHECKPOINT_WEBHOOK_KIND)
    assert webhook.delivered_at is not None, webhook.last_error
    assert [json.loads(line)["size"] for line in path.read_text().splitlines()] == [head.size]
    # Handed over again (the sweeper after a lost acknowledgement): the file gets no second line, the
    # webhook no second message, and what it got carries the head's stable webhook-id.
    OutboxMessage.objects.update(delivered_at=None)
    assert outbox.outbox_deliver(publication.pk) is True
    assert [json.loads(line)["size"] for line in path.read_text().splitlines()] == [head.size]
    assert OutboxMessage.objects.filter(kind=seal.CHECKPOINT_WEBHOOK_KIND).count() == 1
    assert outbox.outbox_deliver(webhook.pk) is True
    assert [{k.lower(): v for k, v in h.items()}["webhook-id"] for h, _ in receiver.messages] == [
        f"audit-tree-head-{head.size}"
    ] * 2


def test_a_checkpoint_webhook_that_fails_stays_owed_with_a_backoff(
    alice_agent, o12, settings, django_capture_on_commit_callbacks
):
    settings.AUDIT_CHECKPOINT_FILE = ""
    settings.AUDIT_CHECKPOINT_WEBHOOKS = ["http://127.0.0.1:9/closed"]
    settings.AUDIT_WITNESSES = []
    propose(alice_agent, order_id=o12.number, amount_minor=500, reason="damaged")
    with django_capture_on_commit_callbacks(execute=True):
        seal_all()
    webhook = OutboxMessage.objects.get(kind=seal.CHECKPOINT_WEBHOOK_KIND)
    assert webhook.delivered_at is None and webhook.attempts == 1 and webhook.last_error
    assert webhook.next_attempt_at > timezone.now()
