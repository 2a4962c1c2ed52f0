"""A refund the provider made before our side could record it is never lost or paid again, even
when the order changes in between: the next attempt of the chain looks it up and records it."""

import pytest
from django.db.models import Sum

from approvals.core.errors import TransientExecutionError
from approvals.core.services import preview_approve, preview_execute
from approvals.models import ApprovalRole, PreviewStatus
from refunds.models import Order, Refund
from tests.refunds.test_stripe_gateway import PI, make_preview

pytestmark = pytest.mark.usefixtures("stripe_gateway_settings")


def approved(agent, customer, amount, capture):
    preview = make_preview(agent, amount_minor=amount)
    with capture(execute=False):
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    return preview


def test_a_refund_paid_during_a_time_out_is_recorded_even_after_another_refund_changed_the_order(
    fake_stripe, alice_agent, alice, o12, django_capture_on_commit_callbacks
):
    fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
    first = approved(alice_agent, alice, 400, django_capture_on_commit_callbacks)
    second = approved(alice_agent, alice, 300, django_capture_on_commit_callbacks)

    fake_stripe.time_out_next(seconds=1.0)
    with pytest.raises(TransientExecutionError) as timed_out:
        preview_execute(preview_id=first.pk)
    assert fake_stripe.refunds_created == 1  # the money moved; our side did not hear back
    first.refresh_from_db()
    assert first.status == PreviewStatus.APPROVED and first.execution.outcome == "in_progress"

    # Another refund on the same order completes meanwhile and changes the order's version.
    assert preview_execute(preview_id=second.pk).status == PreviewStatus.EXECUTED
    first.refresh_from_db()
    assert first.status == PreviewStatus.APPROVED  # not superseded: its money may be out already

    # Without the chain's token nothing runs: the lease is held.
    assert preview_execute(preview_id=first.pk).status == PreviewStatus.APPROVED
    # The chain's retry looks the refund up (no second POST), finds it and records it.
    token = timed_out.value.fencing_token
    assert preview_execute(preview_id=first.pk, fencing_token=token).status == PreviewStatus.EXECUTED
    assert fake_stripe.refunds_created == 2
    assert len([r for r in fake_stripe.refund_requests() if r.idempotency_key == f"refund:{first.pk}"]) == 1
    assert sorted(r["metadata"]["idempotency_key"] for r in fake_stripe.refunds) == sorted(
        [f"refund:{first.pk}", f"refund:{second.pk}"]
    )
    order = Order.objects.get(pk=o12.pk)
    assert order.refunded_minor == 700 == Refund.objects.aggregate(total=Sum("amount_minor"))["total"]
    assert fake_stripe.payment_intents[PI].refunded == 700


def test_an_amount_in_flight_counts_against_what_remains(
    fake_stripe, alice_agent, alice, o12, django_capture_on_commit_callbacks
):
    fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
    first = approved(alice_agent, alice, 400, django_capture_on_commit_callbacks)
    too_much = approved(alice_agent, alice, 700, django_capture_on_commit_callbacks)

    fake_stripe.time_out_next(seconds=1.0)
    with pytest.raises(TransientExecutionError) as timed_out:
        preview_execute(preview_id=first.pk)

    refused = preview_execute(preview_id=too_much.pk)
    assert refused.status == PreviewStatus.FAILED
    assert refused.failure_code == "amount_exceeds_remaining"
    assert "Refund of €7.00 (700) exceeds the €6.00 (600) remaining on o-12" in refused.failure_reason
    # A new proposal is checked against the same reservation.
    response = alice_agent.post(
        "/api/agent/tool-calls",
        {"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 601, "reason": "damaged"}},
        format="json",
    )
    assert response.status_code == 422 and response.json()["error"]["remaining_minor"] == 600

    token = timed_out.value.fencing_token
    assert preview_execute(preview_id=first.pk, fencing_token=token).status == PreviewStatus.EXECUTED
    assert fake_stripe.refunds_created == 1
    assert Order.objects.get(pk=o12.pk).refunded_minor == 400


def test_the_console_policy_shows_the_amount_in_flight(
    fake_stripe, alice_agent, alice, o12, django_capture_on_commit_callbacks
):
    from refunds.actions import RefundOrderAction

    fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
    first = approved(alice_agent, alice, 400, django_capture_on_commit_callbacks)
    too_much = approved(alice_agent, alice, 700, django_capture_on_commit_callbacks)
    fake_stripe.time_out_next(seconds=1.0)
    with pytest.raises(TransientExecutionError):
        preview_execute(preview_id=first.pk)

    rules = {r.rule: r for r in RefundOrderAction().policy_evaluation(too_much)}
    within = rules["4. Amount is within what remains refundable"]
    assert within.passed is False
    assert "against 600 remaining" in within.detail and "400 being refunded now" in within.detail
