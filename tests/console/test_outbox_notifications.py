"""A notification email owed by a decision (the customer's after a counter-proposal) is an outbox row
written with the decision: a broker that loses its task loses no email, and it is sent once."""

from django.core import mail

from approvals.core import outbox
from approvals.core.counter import preview_counter_propose
from approvals.models import OutboxMessage, PreviewStatus
from approvals.operations.publish import NOTIFY_COUNTER_PROPOSAL
from tests.factories import OrderFactory

from .conftest import confirmed, proposed


class BrokerLost(Exception):
    pass


def test_a_counter_proposal_email_survives_a_lost_broker(
    settings, alice, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    order = OrderFactory(number="o-90", customer=alice, currency="EUR", total_minor=100000)
    old = confirmed(proposed(alice, order.number, 20000))
    assert old.status == PreviewStatus.AWAITING_STAFF
    settings.CELERY_TASK_ALWAYS_EAGER = False
    lost = []

    def publish(name, queue, *args):
        lost.append((name, queue))
        raise BrokerLost("connection refused")

    monkeypatch.setattr(outbox, "task_publish_to", publish)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        new = preview_counter_propose(
            preview_id=old.pk, reviewer=reviewer, digest=old.digest, values={"amount": "150.00"}
        )
    assert new.status == PreviewStatus.AWAITING_CUSTOMER
    owed = OutboxMessage.objects.get(kind="task")
    assert owed.payload == {"task": NOTIFY_COUNTER_PROPOSAL, "args": [str(new.pk)]}
    assert lost == [("approvals.deliver_outbox", "notifications")]
    assert len(mail.outbox) == 0
    assert outbox.outbox_deliver(owed.pk) is True  # what the sweeper's hand-over runs
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [alice.email]
    assert outbox.outbox_deliver(owed.pk) is False  # delivered: not sent again
    assert len(mail.outbox) == 1
