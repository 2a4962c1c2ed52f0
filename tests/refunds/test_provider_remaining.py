"""Before a refund is asked for, the executor reads what the provider says remains refundable
(docs/payments.md): against the Stripe-compatible test server (charges, every page, the SDK's retries)
and the local gateway's own records."""

import pytest

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from approvals.tasks import MAX_EXECUTION_RETRIES
from refunds.gateways import GatewayUnavailable, LocalGateway
from refunds.models import Drift, DriftKind, LocalGatewayRefund, Refund
from refunds.stripe_gateway import StripeGateway
from tests.conftest import execution_callbacks, propose
from tests.refunds.conftest import STRIPE_TEST_KEY

PI = "pi_o-12"


def make_preview(agent, amount_minor) -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def confirm_and_run(preview, customer, capture) -> Preview:
    with capture(execute=True) as callbacks:
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert len(execution_callbacks(callbacks)) == 1
    preview.refresh_from_db()
    return preview


def failed_audit(preview) -> dict:
    [record] = AuditRecord.objects.filter(preview=preview, event="execution_failed").values_list("result", flat=True)
    return record


@pytest.mark.usefixtures("stripe_gateway_settings")
class TestStripe:
    def test_a_refund_made_at_the_provider_after_the_proposal_is_caught_before_the_second_is_asked(
        self, alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
    ):
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        first = confirm_and_run(make_preview(alice_agent, 500), alice, django_capture_on_commit_callbacks)
        assert first.status == PreviewStatus.EXECUTED
        second = make_preview(alice_agent, 500)  # the order says 5.00 remain: the policy lets it through
        outside = fake_stripe.refund_outside(PI, 300)  # then someone refunds 3.00 in Stripe's dashboard

        second = confirm_and_run(second, alice, django_capture_on_commit_callbacks)

        assert len(fake_stripe.refund_requests()) == 1  # the first refund's only: the second was never asked
        assert fake_stripe.payment_intents[PI].refunded == 800
        assert (second.status, second.failure_code) == (PreviewStatus.FAILED, "provider_remaining_exceeded")
        assert second.execution.outcome == "failed_after_check"
        assert second.failure_reason == (
            "The payment provider says €2.00 (200) remains refundable on pi_o-12 (€10.00 (1000) paid, "
            "€8.00 (800) refunded there), less than this refund of €5.00 (500). Nothing was asked. The shop's "
            "order says €5.00 (500) remains; reconciliation has compared the two; the Payments page lists any "
            "difference."
        )
        facts = failed_audit(second)
        assert (facts["code"], facts["provider_remaining_minor"], facts["amount_minor"]) == (
            "provider_remaining_exceeded",
            200,
            500,
        )
        assert (facts["provider_paid_minor"], facts["provider_refunded_minor"], facts["order_remaining_minor"]) == (
            1000,
            800,
            500,
        )
        o12.refresh_from_db()
        assert (o12.refunded_minor, o12.version) == (500, 2)
        assert Refund.objects.count() == 1
        # Staff see why on the Payments page: the order was reconciled at once.
        drifts = {(d.kind, d.reference) for d in Drift.objects.filter(order=o12)}
        assert (DriftKind.PROVIDER_REFUND_WITHOUT_PREVIEW, outside["id"]) in drifts
        assert AuditRecord.objects.filter(event="drift_found", subject_id="o-12").exists()

    def test_a_refund_that_fits_the_remainder_exactly_is_paid(
        self, alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
    ):
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        preview = make_preview(alice_agent, 700)
        fake_stripe.refund_outside(PI, 300)

        preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

        assert preview.status == PreviewStatus.EXECUTED
        assert fake_stripe.payment_intents[PI].refunded == 1000
        assert Refund.objects.get().amount_minor == 700
        o12.refresh_from_db()
        assert o12.refunded_minor == 700

    def test_every_page_of_the_charges_is_read(
        self, alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
    ):
        """The paid charge lists last, after two declined attempts, one charge a page: reading only the
        first page would find nothing paid and refuse the refund."""
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        fake_stripe.add_failed_charge(PI)
        fake_stripe.add_failed_charge(PI)
        fake_stripe.page_size = 1

        preview = confirm_and_run(make_preview(alice_agent, 500), alice, django_capture_on_commit_callbacks)

        assert preview.status == PreviewStatus.EXECUTED
        reads = fake_stripe.charge_reads()
        assert len(reads) == 3
        assert [("starting_after" in r.params) for r in reads] == [False, True, True]
        assert fake_stripe.payment_intents[PI].refunded == 500
        assert Refund.objects.get(preview=preview).amount_minor == 500
        o12.refresh_from_db()
        assert o12.refunded_minor == 500

    def test_a_failed_read_is_retried_by_the_sdk_within_the_attempt(
        self, alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
    ):
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        fake_stripe.fail_charge_reads(1, status=503)

        preview = confirm_and_run(make_preview(alice_agent, 500), alice, django_capture_on_commit_callbacks)

        assert [r.status for r in fake_stripe.charge_reads()] == [503, 200]
        assert preview.status == PreviewStatus.EXECUTED
        assert not AuditRecord.objects.filter(preview=preview, event="execution_attempt_failed").exists()
        assert Refund.objects.get(preview=preview).amount_minor == 500
        o12.refresh_from_db()
        assert o12.refunded_minor == 500

    def test_a_provider_that_cannot_be_read_leaves_the_refund_not_asked_and_retryable(
        self, settings, alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
    ):
        settings.STRIPE_READ_RETRIES = 0
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        fake_stripe.fail_charge_reads(None, status=503)

        preview = confirm_and_run(make_preview(alice_agent, 500), alice, django_capture_on_commit_callbacks)

        assert len(fake_stripe.charge_reads()) == MAX_EXECUTION_RETRIES + 1
        assert fake_stripe.refund_requests() == []
        assert fake_stripe.refunds_created == 0
        assert preview.execution.outcome == "refused_before_effect"
        assert preview.failure_code == "retries_exhausted"
        assert "Stripe could not be read before the refund; nothing was asked" in preview.failure_reason
        attempts = AuditRecord.objects.filter(preview=preview, event="execution_attempt_failed")
        assert {a.result["effect_possible"] for a in attempts} == {False}
        assert Refund.objects.count() == 0

    def test_refused_credentials_on_the_read_are_gateway_unavailable(self, fake_stripe):
        fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")
        fake_stripe.refuse_charge_reads(401)
        gateway = StripeGateway(api_key=STRIPE_TEST_KEY, api_base=fake_stripe.url, timeout=0.5)
        with pytest.raises(GatewayUnavailable) as unavailable:
            gateway.refundable_remaining(payment_ref=PI, order_total_minor=1000)
        assert unavailable.value.before_effect is True
        assert "so nothing was asked" in unavailable.value.message
        assert unavailable.value.facts["provider_status"] == 401


class TestLocalGateway:
    def test_the_local_gateways_own_records_are_its_remainder(
        self, alice, o12, alice_agent, django_capture_on_commit_callbacks
    ):
        preview = make_preview(alice_agent, 600)
        # A refund the local "provider" made that the order never heard of.
        LocalGatewayRefund.objects.create(
            idempotency_key="dashboard-1", refund_id="lr_outside", payment_ref=PI, amount_minor=500, currency="EUR"
        )

        preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

        assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "provider_remaining_exceeded")
        assert "€5.00 (500) remains refundable on pi_o-12" in preview.failure_reason
        assert list(LocalGatewayRefund.objects.values_list("refund_id", flat=True)) == ["lr_outside"]
        assert Refund.objects.count() == 0
        assert Drift.objects.filter(order=o12, kind=DriftKind.PROVIDER_REFUND_WITHOUT_PREVIEW).count() == 1

    def test_failed_and_cancelled_local_refunds_do_not_count(self, db):
        for status, amount in (("succeeded", 100), ("pending", 200), ("failed", 400), ("canceled", 800)):
            LocalGatewayRefund.objects.create(
                idempotency_key=f"k-{status}",
                refund_id=f"lr_{status}",
                payment_ref="pi_x",
                amount_minor=amount,
                currency="EUR",
                status=status,
            )
        remaining = LocalGateway().refundable_remaining(payment_ref="pi_x", order_total_minor=1000)
        assert (remaining.paid_minor, remaining.refunded_minor, remaining.remaining_minor) == (1000, 300, 700)
