"""Refunds through the Stripe adapter, against a local Stripe-compatible server (tests/refunds/fake_stripe.py).

The promise under test: whatever the provider does (times out after paying, answers 5xx, is busy,
refuses), a confirmed refund is paid at most once, with the key `refund:<preview id>`, and the
ledger, the order, the preview and the audit log say exactly what happened.

Celery runs eagerly here: a transient failure is retried at once, in-process (approvals/tasks.py).
"""

import pytest
from django.core.exceptions import ImproperlyConfigured

from approvals.core.errors import TransientExecutionError
from approvals.core.presentation import preview_message
from approvals.core.selectors import execution_staff_step
from approvals.core.services import execution_retry as preview_retry
from approvals.core.services import preview_approve, preview_execute
from approvals.models import ApprovalRole, AuditRecord, Execution, Preview, PreviewStatus
from approvals.tasks import MAX_EXECUTION_RETRIES, execute_preview
from refunds.gateways import GatewayDeclined, GatewayRefundMismatch, GatewayUnavailable, LocalGateway, payment_gateway
from refunds.models import LocalGatewayRefund, Refund
from refunds.stripe_gateway import StripeGateway
from tests.conftest import events, execution_callbacks, propose
from tests.factories import StaffFactory
from tests.refunds.conftest import STRIPE_TEST_KEY

PI = "pi_o-12"  # o12's payment_ref (tests/factories.py)

pytestmark = pytest.mark.usefixtures("stripe_gateway_settings")


@pytest.fixture
def intent(fake_stripe):
    """o12's payment at the provider: 10.00 EUR, nothing refunded yet."""
    return fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")


def make_preview(agent, amount_minor=500, reason="damaged") -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def confirm_and_run(preview, customer, capture) -> Preview:
    """The customer confirms; the enqueued execution runs (eagerly, retries included)."""
    with capture(execute=True) as callbacks:
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert len(execution_callbacks(callbacks)) == 1
    preview.refresh_from_db()
    return preview


def staff_step(preview) -> str:
    return execution_staff_step(preview, Execution.objects.filter(pk=preview.pk).first())


def audit(preview, event) -> list[dict]:
    records = AuditRecord.objects.filter(preview=preview, event=event).order_by("id")
    return list(records.values_list("result", flat=True))


def assert_one_refund_paid(fake, preview, order, *, amount_minor=500) -> dict:
    """The provider holds exactly one refund for the preview, and the ledger and order agree with it."""
    assert fake.refunds_created == 1
    refund = fake.refunds[0]
    assert (refund["payment_intent"], refund["amount"], refund["currency"]) == (PI, amount_minor, "eur")
    assert refund["metadata"] == {"preview_id": str(preview.pk), "idempotency_key": f"refund:{preview.pk}"}
    assert {r.idempotency_key for r in fake.refund_requests()} == {f"refund:{preview.pk}"}
    ledger = Refund.objects.get()
    assert ledger.gateway_refund_id == refund["id"]
    assert ledger.gateway_refund_id.startswith("re_")
    assert (ledger.preview_id, ledger.amount_minor, ledger.currency) == (preview.pk, amount_minor, "EUR")
    order.refresh_from_db()
    assert (order.refunded_minor, order.version) == (amount_minor, 2)
    assert fake.payment_intents[PI].refunded == amount_minor
    assert preview.status == PreviewStatus.EXECUTED
    assert (preview.failure_code, preview.failure_reason) == ("", "")
    assert preview.result["refund_id"] == refund["id"]
    assert LocalGatewayRefund.objects.count() == 0  # the local gateway was not used
    return refund


def assert_nothing_paid(fake, order) -> None:
    assert fake.refunds_created == 0
    assert fake.payment_intents[PI].refunded == 0
    assert Refund.objects.count() == 0
    order.refresh_from_db()
    assert (order.refunded_minor, order.version) == (0, 1)


# Choosing the gateway ------------------------------------------------------------------------


def test_the_stripe_setting_selects_the_stripe_gateway(settings):
    assert isinstance(payment_gateway(), StripeGateway)
    settings.PAYMENT_GATEWAY = "local"
    assert isinstance(payment_gateway(), LocalGateway)


def test_the_stripe_gateway_needs_an_api_key(settings):
    settings.STRIPE_API_KEY = ""
    with pytest.raises(ImproperlyConfigured, match="STRIPE_API_KEY"):
        payment_gateway()
    settings.PAYMENT_GATEWAY = "paypal"
    with pytest.raises(ImproperlyConfigured, match="'paypal'"):
        payment_gateway()


# The happy path ------------------------------------------------------------------------------


def test_a_confirmed_refund_is_paid_through_stripe_with_the_preview_key(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    assert fake_stripe.requests == []  # a proposal never reaches the provider

    preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

    refund = assert_one_refund_paid(fake_stripe, preview, o12)
    # What remains refundable is read first (the payment intent's charges), then the refund is asked for.
    assert [(r.method, r.path) for r in fake_stripe.requests] == [("GET", "/v1/charges"), ("POST", "/v1/refunds")]
    assert fake_stripe.requests[0].params == {"payment_intent": PI, "limit": "100"}
    [request] = fake_stripe.refund_requests()
    assert (request.method, request.path, request.status, request.replayed) == ("POST", "/v1/refunds", 200, False)
    assert request.headers["idempotency-key"] == f"refund:{preview.pk}"
    assert request.headers["authorization"] == f"Bearer {STRIPE_TEST_KEY}"
    assert request.params == {
        "payment_intent": PI,
        "amount": "500",
        "metadata[idempotency_key]": f"refund:{preview.pk}",
        "metadata[preview_id]": str(preview.pk),
    }
    assert events(preview) == ["proposed", "confirmed", "execution_started", "executed"]
    assert audit(preview, "executed")[0]["refund_id"] == refund["id"]


# Lost answers and outages: retried with the same key, paid once -------------------------------


def test_a_time_out_after_stripe_recorded_the_refund_is_looked_up_and_recorded_without_a_second_post(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.time_out_next(seconds=2.0)  # makes the refund, then answers after the client's 0.5 s
    preview = make_preview(alice_agent)

    preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

    refund = assert_one_refund_paid(fake_stripe, preview, o12)
    [first] = fake_stripe.refund_requests()  # the retry looked, and found: no second POST
    assert first.idempotency_key == f"refund:{preview.pk}" and first.body == refund
    [lookup] = [r for r in fake_stripe.requests if (r.method, r.path) == ("GET", "/v1/refunds")]
    assert lookup.params["payment_intent"] == PI
    assert Refund.objects.count() == 1
    assert events(preview) == [
        "proposed",
        "confirmed",
        "execution_started",
        "execution_attempt_failed",
        "execution_started",
        "executed",
    ]
    assert [s["look_up_first"] for s in audit(preview, "execution_started")] == [False, True]
    [attempt] = audit(preview, "execution_attempt_failed")
    assert (attempt["attempt"], attempt["will_retry"]) == (1, True)
    assert "Read timed out" in attempt["error"]


def test_server_errors_then_success_are_retried_and_pay_once(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.fail_next(2, status=500)
    preview = make_preview(alice_agent)

    preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

    assert_one_refund_paid(fake_stripe, preview, o12)
    assert [r.status for r in fake_stripe.refund_requests()] == [500, 500, 200]
    assert events(preview) == ["proposed", "confirmed"] + ["execution_started", "execution_attempt_failed"] * 2 + [
        "execution_started",
        "executed",
    ]
    attempts = audit(preview, "execution_attempt_failed")
    assert [(a["attempt"], a["will_retry"]) for a in attempts] == [(1, True), (2, True)]
    assert all("500 api_error" in a["error"] for a in attempts)


@pytest.mark.parametrize("fault", ["conflict", "rate_limited"])
def test_a_busy_provider_409_key_in_use_or_429_is_retried_and_pays_once(
    fault, alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    if fault == "conflict":
        fake_stripe.conflict_next()
    else:
        fake_stripe.fail_next(status=429)
    preview = make_preview(alice_agent)

    preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

    assert_one_refund_paid(fake_stripe, preview, o12)
    assert [r.status for r in fake_stripe.refund_requests()] == [409 if fault == "conflict" else 429, 200]
    assert events(preview) == [
        "proposed",
        "confirmed",
        "execution_started",
        "execution_attempt_failed",
        "execution_started",
        "executed",
    ]
    # A 429 proves Stripe did nothing, so the retry needs no lookup; after a 409 another request may have.
    lookups = [r for r in fake_stripe.requests if (r.method, r.path) == ("GET", "/v1/refunds")]
    assert len(lookups) == (1 if fault == "conflict" else 0)


def test_a_provider_that_keeps_failing_leaves_the_effect_unknown_never_nothing_was_done(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    """A 5xx may come after Stripe acted: giving up says the effect is unknown, not that nothing moved.
    Every attempt after the first looks the refund up (GET) before asking again with the same key."""
    fake_stripe.fail_next(100, status=503)
    preview = make_preview(alice_agent)

    preview = confirm_and_run(preview, alice, django_capture_on_commit_callbacks)

    attempts = MAX_EXECUTION_RETRIES + 1
    assert [r.status for r in fake_stripe.refund_requests()] == [503] * attempts
    lookups = [r for r in fake_stripe.requests if (r.method, r.path) == ("GET", "/v1/refunds")]
    assert [r.params["payment_intent"] for r in lookups] == [PI] * (attempts - 1)
    assert_nothing_paid(fake_stripe, o12)
    assert preview.status == PreviewStatus.NEEDS_ATTENTION
    assert preview.execution.outcome == "effect_unknown"
    assert preview.failure_code == "effect_unknown"
    assert preview.failure_reason.startswith(f"Gave up after {attempts} attempts: Stripe is unavailable for now (503")
    assert staff_step(preview) == "resolve"
    message = preview_message(preview, base_url="http://testserver")
    assert "nothing was done" not in message.lower() and "could not confirm" in message
    assert events(preview) == ["proposed", "confirmed"] + [
        "execution_started",
        "execution_attempt_failed",
    ] * attempts + ["execution_transition"]
    # One chain: attempts 1..6 with consecutive fencing tokens, none taken over.
    started = audit(preview, "execution_started")
    assert [(s["attempt"], s["fencing_token"], s["took_over"]) for s in started] == [
        (n, n, False) for n in range(1, attempts + 1)
    ]
    will_retry = [a["will_retry"] for a in audit(preview, "execution_attempt_failed")]
    assert will_retry == [True] * MAX_EXECUTION_RETRIES + [False]
    assert audit(preview, "execution_transition")[-1]["outcome"] == "effect_unknown"


def test_staff_retry_after_the_outage_pays_once_with_the_same_key(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.fail_next(MAX_EXECUTION_RETRIES + 1, status=500)
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)
    assert preview.execution.outcome == "effect_unknown"

    with django_capture_on_commit_callbacks(execute=True):
        preview_retry(preview_id=preview.pk, staff=StaffFactory())
    preview.refresh_from_db()

    assert_one_refund_paid(fake_stripe, preview, o12)
    assert len(fake_stripe.refund_requests()) == MAX_EXECUTION_RETRIES + 2
    assert events(preview)[-4:] == ["execution_transition", "retried", "execution_started", "executed"]
    assert audit(preview, "execution_started")[-1]["look_up_first"] is True


def test_a_500_that_stripe_saved_under_the_key_is_replayed_until_retries_are_exhausted(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    """Stripe saves a 500 once the endpoint started and replays it for the key: the outcome stays
    unknown to us, so we keep the key (never risk a second refund) and leave the effect unknown."""
    fake_stripe.fail_next(1, status=500, saved=True)
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    requests = fake_stripe.refund_requests()
    assert [(r.status, r.replayed) for r in requests] == [(500, False)] + [(500, True)] * MAX_EXECUTION_RETRIES
    assert {r.idempotency_key for r in requests} == {f"refund:{preview.pk}"}
    assert_nothing_paid(fake_stripe, o12)
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "effect_unknown")


def test_a_refund_stripe_made_before_the_worker_crashed_is_reused_not_repeated(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    """The worker paid, then died before its transaction committed: the ledger has nothing, the provider
    has the refund. The redelivered task asks again with the same key and records that refund."""
    with django_capture_on_commit_callbacks(execute=False):
        preview = make_preview(alice_agent)
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    before_crash = payment_gateway().refund(
        payment_ref=PI, amount_minor=500, currency="EUR", idempotency_key=f"refund:{preview.pk}"
    )
    assert Refund.objects.count() == 0

    execute_preview.apply(args=[str(preview.pk)])
    preview.refresh_from_db()

    refund = assert_one_refund_paid(fake_stripe, preview, o12)
    assert refund["id"] == before_crash.id
    assert [r.replayed for r in fake_stripe.refund_requests()] == [False, True]


def test_running_the_task_twice_pays_once(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        preview = make_preview(alice_agent)
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert len(execution_callbacks(callbacks)) == 1

    execute_preview.apply(args=[str(preview.pk)])
    execute_preview.apply(args=[str(preview.pk)])
    preview_execute(preview_id=preview.pk)
    preview.refresh_from_db()

    assert_one_refund_paid(fake_stripe, preview, o12)
    assert len(fake_stripe.refund_requests()) == 1  # the executed preview is not sent again
    assert events(preview) == ["proposed", "confirmed", "execution_started", "executed"]


# Refusals: failed at once with the provider's reason, never retried ----------------------------


@pytest.mark.parametrize(
    ("code", "message_part"),
    [
        ("charge_already_refunded", "has already been refunded"),
        ("charge_disputed", "has been charged back"),
        ("charge_not_refundable", "cannot be refunded"),
    ],
)
def test_a_refusal_fails_the_preview_at_once_with_the_providers_reason(
    code, message_part, alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.refuse_next(code)
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    [request] = fake_stripe.refund_requests()  # exactly one request: no retry
    assert (request.status, request.body["error"]["code"]) == (400, code)
    assert_nothing_paid(fake_stripe, o12)
    assert preview.status == PreviewStatus.FAILED
    assert preview.failure_code == code
    assert preview.failure_reason == f"Stripe refused the refund: {request.body['error']['message']}"
    assert message_part in preview.failure_reason
    assert preview.execution.outcome == "failed_after_check"
    assert staff_step(preview) == ""
    assert events(preview) == ["proposed", "confirmed", "execution_started", "execution_failed"]
    [failed] = audit(preview, "execution_failed")
    assert (failed["code"], failed["provider_code"], failed["provider_status"]) == (code, code, 400)


def test_a_payment_already_refunded_at_the_provider_is_refused_before_anything_is_asked(
    alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
):
    """Someone refunded the payment in Stripe's dashboard; our order does not know it yet. The charge
    read before the refund says nothing remains, so no refund is asked for (it used to be Stripe's
    `charge_already_refunded`; tests/refunds/test_provider_remaining.py has the rest)."""
    fake_stripe.add_payment_intent(PI, amount=1000, currency="eur", refunded=1000)
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    assert fake_stripe.refund_requests() == []
    assert fake_stripe.refunds_created == 0
    assert Refund.objects.count() == 0
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "provider_remaining_exceeded")
    assert preview.execution.outcome == "failed_after_check"
    assert "€0.00 (0) remains refundable on pi_o-12" in preview.failure_reason
    assert events(preview) == ["proposed", "confirmed", "execution_started", "execution_failed"]


def test_an_over_refund_is_classified_by_param_not_code(fake_stripe):
    """8.00 of the 10.00 payment was refunded at the provider. The executor reads that first and asks
    for nothing; should a refund race past the read, Stripe's refusal still fails it for good."""
    fake_stripe.add_payment_intent(PI, amount=1000, currency="eur", refunded=800)

    with pytest.raises(GatewayDeclined) as declined:
        gateway(fake_stripe).refund(payment_ref=PI, amount_minor=500, currency="EUR", idempotency_key="refund:p9")

    [request] = fake_stripe.refund_requests()
    assert request.status == 400
    assert request.body == {
        "error": {
            "type": "invalid_request_error",
            "param": "amount",
            "message": "Refund amount ($5.00) is greater than unrefunded amount on charge ($2.00)",
        }
    }  # no `code`, as Stripe sends it
    assert fake_stripe.refunds_created == 0
    assert fake_stripe.payment_intents[PI].refunded == 800
    assert declined.value.code == "amount_exceeds_unrefunded"
    assert declined.value.message == (
        "Stripe refused the refund: Refund amount ($5.00) is greater than unrefunded amount on charge ($2.00)"
    )
    assert (declined.value.facts["provider_param"], declined.value.facts["provider_code"]) == ("amount", "")


def test_a_refund_in_another_currency_needs_attention_with_the_refund_and_no_ledger_row(
    alice, o12, alice_agent, fake_stripe, django_capture_on_commit_callbacks
):
    """The order says EUR but the payment was in USD: the provider refunded, the ledger must not
    record it as EUR; the execution waits for a person with the refund id (money moved: not "failed")."""
    fake_stripe.add_payment_intent(PI, amount=1000, currency="usd")
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    assert len(fake_stripe.refund_requests()) == 1
    [refund] = fake_stripe.refunds
    assert refund["currency"] == "usd"
    assert Refund.objects.count() == 0
    o12.refresh_from_db()
    assert o12.refunded_minor == 0
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "gateway_currency_mismatch")
    assert refund["id"] in preview.failure_reason
    assert preview.execution.outcome == "effect_unrecorded"
    assert preview.execution.effect["refund_id"] == refund["id"]
    assert staff_step(preview) == "record"
    [unrecorded] = audit(preview, "execution_transition")
    assert unrecorded["refund_id"] == refund["id"] and unrecorded["outcome"] == "effect_unrecorded"


def test_a_missing_api_key_fails_the_preview_for_staff_to_retry_instead_of_crashing_the_task(
    settings, alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    settings.STRIPE_API_KEY = ""
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    assert fake_stripe.requests == []
    assert_nothing_paid(fake_stripe, o12)
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "gateway_unavailable")
    assert preview.execution.outcome == "refused_before_effect"
    assert "needs STRIPE_API_KEY" in preview.failure_reason
    assert events(preview) == ["proposed", "confirmed", "execution_started", "execution_failed"]
    assert staff_step(preview) == "retry"


def test_rejected_credentials_fail_at_once_and_staff_may_retry_after_the_fix(
    settings, alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    settings.STRIPE_API_KEY = "sk_test_revoked"
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    assert [r.status for r in fake_stripe.charge_reads()] == [401]  # read first: nothing was asked
    assert fake_stripe.refund_requests() == []
    assert_nothing_paid(fake_stripe, o12)
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "gateway_unavailable")
    assert "STRIPE_API_KEY" in preview.failure_reason
    assert staff_step(preview) == "retry"

    settings.STRIPE_API_KEY = STRIPE_TEST_KEY
    with django_capture_on_commit_callbacks(execute=True):
        preview_retry(preview_id=preview.pk, staff=StaffFactory())
    preview.refresh_from_db()
    assert_one_refund_paid(fake_stripe, preview, o12)


# The adapter on its own ----------------------------------------------------------------------


def gateway(fake, **kwargs) -> StripeGateway:
    return StripeGateway(api_key=STRIPE_TEST_KEY, api_base=fake.url, timeout=0.5, **kwargs)


def test_the_same_key_returns_the_same_refund_and_other_parameters_are_an_idempotency_error(fake_stripe, intent):
    stripe_gateway = gateway(fake_stripe)
    first = stripe_gateway.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="refund:p1")
    again = stripe_gateway.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="refund:p1")
    assert first == again
    assert (first.amount_minor, first.currency) == (300, "EUR")
    assert fake_stripe.refunds_created == 1

    with pytest.raises(GatewayDeclined) as declined:
        stripe_gateway.refund(payment_ref=PI, amount_minor=400, currency="EUR", idempotency_key="refund:p1")
    assert declined.value.code == "idempotency_error"
    assert "same parameters" in declined.value.message
    assert fake_stripe.refunds_created == 1
    assert fake_stripe.payment_intents[PI].refunded == 300


def test_an_unreachable_provider_is_transient(fake_stripe, intent):
    stripe_gateway = gateway(fake_stripe)
    fake_stripe.stop()
    with pytest.raises(TransientExecutionError, match="Stripe did not answer"):
        stripe_gateway.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="refund:p2")


def test_an_unknown_payment_is_declined(fake_stripe, intent):
    with pytest.raises(GatewayDeclined) as declined:
        gateway(fake_stripe).refund(payment_ref="pi_nope", amount_minor=300, currency="EUR", idempotency_key="k")
    assert declined.value.code == "resource_missing"
    assert "No such payment_intent: 'pi_nope'" in declined.value.message
    assert fake_stripe.refunds_created == 0


def test_a_refund_the_provider_reports_failed_is_declined(fake_stripe, intent):
    fake_stripe.refund_status = "failed"
    with pytest.raises(GatewayDeclined) as declined:
        gateway(fake_stripe).refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="k")
    assert declined.value.code == "refund_failed"


def test_a_refund_that_is_not_the_one_asked_for_is_a_mismatch_with_the_refund(fake_stripe, intent):
    """Defence in depth: were the provider to answer with another refund, the ledger must not record it;
    money moved, so it is a mismatch for a person (effect_made), never a plain failure."""
    stripe_gateway = gateway(fake_stripe)
    stripe_gateway.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="refund:p3")
    fake_stripe.refunds[0]["amount"] = 299  # the saved answer is the same dict
    with pytest.raises(GatewayRefundMismatch) as declined:
        stripe_gateway.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="refund:p3")
    assert declined.value.code == "gateway_refund_mismatch"
    assert declined.value.facts["refund_id"] == fake_stripe.refunds[0]["id"]
    assert declined.value.effect_made is True


def test_find_refund_lists_the_payment_intents_refunds_and_matches_the_key(fake_stripe, intent):
    stripe_gateway = gateway(fake_stripe)
    asked = {"payment_ref": PI, "amount_minor": 300, "currency": "EUR", "idempotency_key": "refund:p4"}
    assert stripe_gateway.find_refund(**asked) is None
    made = stripe_gateway.refund(**asked)
    stripe_gateway.refund(payment_ref=PI, amount_minor=100, currency="EUR", idempotency_key="refund:other")

    found = stripe_gateway.find_refund(**asked)

    assert found == made
    assert fake_stripe.refunds_created == 2  # looking never makes one
    assert [r.method for r in fake_stripe.requests].count("POST") == 2


def test_the_local_gateway_finds_a_refund_by_key_without_making_one(db):
    local = LocalGateway()
    assert local.find_refund(payment_ref="pi_1", amount_minor=300, currency="EUR", idempotency_key="refund:x") is None
    made = local.refund(payment_ref="pi_1", amount_minor=300, currency="EUR", idempotency_key="refund:x")
    assert local.find_refund(payment_ref="pi_1", amount_minor=300, currency="EUR", idempotency_key="refund:x") == made
    assert LocalGatewayRefund.objects.count() == 1


def test_rejected_credentials_are_gateway_unavailable(fake_stripe, intent):
    bad = StripeGateway(api_key="sk_test_wrong", api_base=fake_stripe.url, timeout=0.5)
    with pytest.raises(GatewayUnavailable):
        bad.refund(payment_ref=PI, amount_minor=300, currency="EUR", idempotency_key="k")
    assert fake_stripe.refunds_created == 0
