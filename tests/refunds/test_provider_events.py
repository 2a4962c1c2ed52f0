"""Provider events: POST /payments/stripe/webhook with events the Stripe-compatible test server signs.

A refund Stripe reports `pending` is processing at the bank: it counts against what remains and says so
to the agent, the customer and staff. `refund.updated`/`refund.failed` move it on; a failed or cancelled
refund gives the order's amount back, tells everyone, and is never retried by itself. Every event is
verified with the SDK, stored once under its id, and audited.
"""

import time

import pytest
from django.contrib.auth.models import Group
from django.core import mail

from approvals.core import transitions
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Execution, ExecutionOutcome, Preview, PreviewStatus
from refunds.models import ProviderEvent, Refund, RefundStatus
from tests.conftest import propose
from tests.factories import StaffFactory

PI = "pi_o-12"
SECRET = "whsec_test_secret_0123456789"
WEBHOOK = "/payments/stripe/webhook"

pytestmark = pytest.mark.usefixtures("stripe_gateway_settings")


@pytest.fixture(autouse=True)
def webhook_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    return SECRET


@pytest.fixture
def intent(fake_stripe):
    return fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")


@pytest.fixture
def heard():
    """What the preview transition listeners (agent webhooks) were told."""
    calls = []

    def listener(preview_id, previous, status):
        calls.append((preview_id, previous, status))

    transitions.on_preview_transition(listener)
    yield calls
    transitions._listeners.remove(listener)


def executed_refund(agent, customer, capture, amount_minor=500) -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    return preview


def deliver(client, fake, event, *, secret=SECRET, timestamp=None):
    body, header = fake.signed(event, secret, timestamp=timestamp)
    return client.post(WEBHOOK, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)


def agent_view(agent, preview) -> dict:
    response = agent.get(f"/api/agent/previews/{preview.pk}")
    assert response.status_code == 200
    return response.json()


# Pending at the bank ------------------------------------------------------------------------------


def test_a_pending_refund_is_processing_at_the_bank_for_everyone_and_counts_against_what_remains(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)

    ledger = Refund.objects.get()
    assert (ledger.status, ledger.status_reason) == (RefundStatus.PENDING, "processing")
    o12.refresh_from_db()
    assert o12.refunded_minor == 500  # counted against what remains while the bank processes it
    assert Execution.objects.get(pk=preview.pk).outcome == ExecutionOutcome.SUCCEEDED

    body = agent_view(alice_agent, preview)
    assert body["status"] == "executed"
    assert body["preview"]["refund"] == {
        "id": ledger.gateway_refund_id,
        "status": "pending",
        "status_reason": "processing",
    }
    assert "processing at the bank" in body["message"]
    assert "not in the customer's account yet" in body["message"]

    # What remains is 5.00: 6.00 more is refused while the pending refund counts.
    refused = propose(alice_agent, order_id="o-12", amount_minor=600, reason="damaged")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "amount_exceeds_remaining"
    assert refused.json()["error"]["remaining_minor"] == 500

    client.force_login(alice)
    page = client.get(f"/previews/{preview.pk}/").content.decode()
    assert "Processing at the bank" in page
    orders = client.get("/orders/").content.decode()
    assert "processing at the bank" in orders

    staff = StaffFactory(username="sam")
    staff.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(staff)
    console = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "Processing at the bank" in console
    payments = client.get("/console/payments/").content.decode()
    assert ledger.gateway_refund_id in payments


def test_refund_updated_to_succeeded_completes_a_pending_refund(
    alice, o12, alice_agent, intent, fake_stripe, client, heard, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    event = fake_stripe.set_refund_status(ledger.gateway_refund_id, "succeeded")
    heard.clear()

    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, fake_stripe, event)

    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "event": event["id"], "result": "refund_succeeded", "duplicate": False}
    ledger.refresh_from_db()
    assert (ledger.status, ledger.status_changed_at is not None) == (RefundStatus.SUCCEEDED, True)
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    assert heard == [(str(preview.pk), "executed", "executed")]
    body = agent_view(alice_agent, preview)
    assert body["preview"]["refund"]["status"] == "succeeded"
    assert body["message"].startswith("Refunded €5.00 on order o-12")
    stored = ProviderEvent.objects.get()
    assert (stored.provider, stored.event_id, stored.type, stored.result) == (
        "stripe",
        event["id"],
        "refund.updated",
        "refund_succeeded",
    )
    record = AuditRecord.objects.get(event="provider_event")
    assert record.preview_id == preview.pk
    assert (record.subject_type, record.subject_id) == ("order", "o-12")
    assert record.result["status_before"] == "pending"
    assert record.result["status"] == "succeeded"
    assert mail.outbox == []  # a refund that was paid needs no email


@pytest.mark.parametrize(("event_status", "word"), [("failed", "failed at the bank"), ("canceled", "was cancelled")])
def test_a_refund_that_fails_or_is_cancelled_gives_the_amount_back_and_tells_everyone_without_retrying(
    alice, o12, alice_agent, intent, fake_stripe, client, heard, django_capture_on_commit_callbacks, event_status, word
):
    fake_stripe.refund_status = "pending"
    preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    event = fake_stripe.set_refund_status(
        ledger.gateway_refund_id, event_status, failure_reason="expired_or_canceled_card"
    )
    assert event["type"] == ("refund.failed" if event_status == "failed" else "refund.updated")
    heard.clear()

    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, fake_stripe, event)

    assert response.status_code == 200, response.content
    assert response.json()["result"] == f"refund_{event_status}"
    # The ledger row is marked, the order's refunded amount goes back and its version moves on.
    ledger.refresh_from_db()
    assert ledger.status == event_status
    assert ledger.status_reason == ("expired_or_canceled_card" if event_status == "failed" else "")
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (0, 3)
    # The preview stays executed: the executor did ask and the provider accepted; the refund's state says more.
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Execution.objects.get(pk=preview.pk).outcome == ExecutionOutcome.SUCCEEDED
    # Nothing was retried.
    assert fake_stripe.refunds_created == 1
    assert len(fake_stripe.refund_requests()) == 1
    # The agent (listeners: agent webhooks) and the customer (email) are told.
    assert heard == [(str(preview.pk), "executed", "executed")]
    body = agent_view(alice_agent, preview)
    assert body["preview"]["refund"]["status"] == event_status
    assert word in body["message"]
    assert "no money was returned" in body["message"]
    assert "will not be retried automatically" in body["message"]
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == [alice.email]
    assert "o-12" in mail.outbox[0].subject
    assert "€5.00" in mail.outbox[0].body and ledger.gateway_refund_id in mail.outbox[0].body
    # The console lists it with a way to propose a new refund.
    staff = StaffFactory(username="sam")
    staff.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(staff)
    payments = client.get("/console/payments/").content.decode()
    assert "Not paid by the bank" in payments and ledger.gateway_refund_id in payments
    assert f"/console/payments/refunds/{ledger.pk}/propose-again" in payments
    # Audited, with the amounts.
    record = AuditRecord.objects.get(event="provider_event")
    assert record.result["order_refunded_minor_before"] == 500
    assert record.result["order_refunded_minor"] == 0
    # The full amount is refundable again: an agent may propose it, and so may staff.
    again = propose(alice_agent, order_id="o-12", amount_minor=1000, reason="damaged")
    assert again.status_code == 201, again.json()


def test_staff_propose_a_new_refund_for_one_the_bank_failed(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    failed_preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    deliver(client, fake_stripe, fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed"))
    staff = StaffFactory(username="sam")
    staff.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(staff)

    response = client.post(f"/console/payments/refunds/{ledger.pk}/propose-again")

    new = Preview.objects.exclude(pk=failed_preview.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{new.pk}/"
    assert (new.actor_id, new.agent_session_id, new.subject_id, new.amount_minor, new.currency) == (
        alice.pk,
        None,
        "o-12",
        500,
        "EUR",
    )
    assert new.status == PreviewStatus.AWAITING_CUSTOMER  # the customer confirms before anything is paid
    record = AuditRecord.objects.get(event="staff_refund_proposed")
    assert record.actor_id == staff.pk and record.preview_id == new.pk
    assert record.result["replaces_refund"] == ledger.gateway_refund_id
    assert fake_stripe.refunds_created == 1  # nothing paid yet

    # A customer cannot use it, and a refund that did not fail cannot be proposed again.
    client.force_login(alice)
    assert client.post(f"/console/payments/refunds/{ledger.pk}/propose-again").status_code == 403


# Verification -------------------------------------------------------------------------------------


def test_unsigned_badly_signed_stale_and_future_events_are_refused_and_change_nothing(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    event = fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed")
    body, _header = fake_stripe.signed(event, SECRET)

    unsigned = client.post(WEBHOOK, data=body, content_type="application/json")
    wrong_secret = deliver(client, fake_stripe, event, secret="whsec_someone_else")
    stale = deliver(client, fake_stripe, event, timestamp=int(time.time()) - 301)
    future = deliver(client, fake_stripe, event, timestamp=int(time.time()) + 3600)
    _body, header = fake_stripe.signed(event, SECRET)
    tampered = client.post(
        WEBHOOK,
        data=body.replace(b'"failed"', b'"succeeded"'),
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=header,
    )

    for response in (unsigned, wrong_secret, stale, future, tampered):
        assert response.status_code == 400, response.content
        assert response.json()["ok"] is False
        assert response.json()["error"]["code"] == "signature_invalid"
    assert "tolerance" in stale.json()["error"]["message"]
    assert ProviderEvent.objects.count() == 0
    ledger.refresh_from_db()
    o12.refresh_from_db()
    assert (ledger.status, o12.refunded_minor) == (RefundStatus.PENDING, 500)
    assert not AuditRecord.objects.filter(event="provider_event").exists()
    assert client.get(WEBHOOK).status_code == 405


def test_the_endpoint_is_off_without_a_secret(settings, client, fake_stripe, intent):
    settings.STRIPE_WEBHOOK_SECRET = ""
    body, header = fake_stripe.signed(
        {"id": "evt_1", "object": "event", "type": "refund.updated", "data": {"object": {}}}, SECRET
    )
    response = client.post(WEBHOOK, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "webhook_not_configured"


def test_an_event_delivered_twice_is_processed_once(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    event = fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed")

    with django_capture_on_commit_callbacks(execute=True):
        first = deliver(client, fake_stripe, event)
        second = deliver(client, fake_stripe, event)  # a redelivery, or a replay of a captured request

    assert (first.status_code, first.json()["duplicate"]) == (200, False)
    assert second.status_code == 200
    assert second.json() == {"ok": True, "event": event["id"], "result": "duplicate", "duplicate": True}
    assert ProviderEvent.objects.count() == 1
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (0, 3)  # given back once, not twice
    assert len(mail.outbox) == 1
    assert AuditRecord.objects.filter(event="provider_event").count() == 1
    repeated = AuditRecord.objects.get(event="provider_event_repeated")
    assert repeated.result["event_id"] == event["id"]
    assert repeated.result["first_result"] == "refund_failed"


def test_a_final_status_never_changes_back(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    failed = fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed")
    late = fake_stripe.set_refund_status(ledger.gateway_refund_id, "succeeded")  # an out-of-order delivery

    assert deliver(client, fake_stripe, failed).json()["result"] == "refund_failed"
    response = deliver(client, fake_stripe, late)

    assert response.json()["result"] == "out_of_order"
    ledger.refresh_from_db()
    o12.refresh_from_db()
    assert (ledger.status, o12.refunded_minor) == (RefundStatus.FAILED, 0)


def test_an_event_about_a_refund_nobody_here_made_is_stored_audited_and_left_to_reconciliation(
    o12, intent, fake_stripe, client
):
    refund = fake_stripe.refund_outside(PI, 300)
    (event,) = fake_stripe.events_for(refund["id"])

    response = deliver(client, fake_stripe, event)

    assert response.status_code == 200
    assert response.json()["result"] == "unmatched"
    assert Refund.objects.count() == 0
    o12.refresh_from_db()
    assert o12.refunded_minor == 0  # reported by reconciliation, never booked from an event
    record = AuditRecord.objects.get(event="provider_event")
    assert (record.subject_type, record.subject_id, record.result["refund_id"]) == ("payment", PI, refund["id"])


def test_an_event_that_overtakes_our_own_recording_is_refused_for_redelivery(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    """Stripe may send refund.created before our executor has recorded the refund: the endpoint answers
    503 and stores nothing, so Stripe delivers it again once the ledger has the row."""
    from django.db import transaction

    from approvals.core.services import Outcome, execution_transition
    from refunds.stripe_gateway import StripeGateway

    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    with transaction.atomic():
        locked = Preview.objects.select_for_update().get(pk=preview.pk)
        execution = Execution.objects.select_for_update().get(pk=preview.pk)
        execution_transition(execution, locked, Outcome.IN_PROGRESS, token=None, lease_owner="test-worker")
    made = StripeGateway.from_settings().refund(
        payment_ref=PI, amount_minor=500, currency="EUR", idempotency_key=f"refund:{preview.pk}"
    )
    (event,) = fake_stripe.events_for(made.id)

    response = deliver(client, fake_stripe, event)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "not_recorded_yet"
    assert ProviderEvent.objects.count() == 0


def test_charge_refunded_applies_the_refunds_it_carries(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    fake_stripe.set_refund_status(ledger.gateway_refund_id, "succeeded")
    charge = {
        "id": intent.charge,
        "object": "charge",
        "payment_intent": PI,
        "amount_refunded": 500,
        "refunds": {"object": "list", "data": [fake_stripe.refund(ledger.gateway_refund_id)]},
    }
    event = {
        "id": "evt_charge_1",
        "object": "event",
        "type": "charge.refunded",
        "created": int(time.time()),
        "data": {"object": charge},
    }

    response = deliver(client, fake_stripe, event)

    assert response.json()["result"] == "applied"
    ledger.refresh_from_db()
    assert ledger.status == RefundStatus.SUCCEEDED
    assert AuditRecord.objects.get(event="provider_event").preview_id == preview.pk


def test_the_test_server_sends_signed_events_over_http(
    alice, o12, alice_agent, intent, fake_stripe, live_server, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    event = fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed", failure_reason="lost_or_stolen_card")

    status, body = fake_stripe.send_event(live_server.url + WEBHOOK, event, SECRET)

    assert (status, body["result"]) == (200, "refund_failed")
    ledger.refresh_from_db()
    assert (ledger.status, ledger.status_reason) == ("failed", "lost_or_stolen_card")
    status, body = fake_stripe.send_event(live_server.url + WEBHOOK, event, "whsec_wrong")
    assert (status, body["error"]["code"]) == (400, "signature_invalid")


def test_stripe_without_a_webhook_secret_is_a_deploy_warning(settings):
    from refunds.checks import stripe_webhook_secret_set

    settings.STRIPE_WEBHOOK_SECRET = ""
    (warning,) = stripe_webhook_secret_set()
    assert warning.id == "refunds.W002"
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    assert stripe_webhook_secret_set() == []
    settings.PAYMENT_GATEWAY, settings.STRIPE_WEBHOOK_SECRET = "local", ""
    assert stripe_webhook_secret_set() == []


def test_a_refund_that_succeeded_can_still_fail_later(
    alice, o12, alice_agent, intent, fake_stripe, client, django_capture_on_commit_callbacks
):
    """Some payment methods fail a refund after it first succeeded; Stripe then sends refund.failed."""
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    assert ledger.status == RefundStatus.SUCCEEDED
    event = fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed", failure_reason="unknown")

    with django_capture_on_commit_callbacks(execute=True):
        response = deliver(client, fake_stripe, event)

    assert (response.status_code, response.json()["result"]) == (200, "refund_failed")
    ledger.refresh_from_db()
    o12.refresh_from_db()
    assert (ledger.status, ledger.status_reason, o12.refunded_minor) == ("failed", "unknown", 0)
    assert len(mail.outbox) == 1
    # A cancellation cannot follow a failure: it is stored and changes nothing.
    late = fake_stripe.set_refund_status(ledger.gateway_refund_id, "canceled")
    assert deliver(client, fake_stripe, late).json()["result"] == "out_of_order"
    o12.refresh_from_db()
    assert o12.refunded_minor == 0  # not given back twice
