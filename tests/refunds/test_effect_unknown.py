"""The gateway never reports an outcome it does not know (issue: a refund recorded by the provider,
then a time-out, then 503s until the retries ran out, read "failed, nothing was done").

Against the local Stripe-compatible server: the agent, the customer and the console say the effect is
being checked, the resolver finds the refund by listing the PaymentIntent's refunds, and the ledger
gets one row. A failure known to come before the provider was asked is retried only through every
check, and the shop import counts refunds in flight.
"""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.core.services import preview_approve
from approvals.core.services.execution import executions_resolve_unknown
from approvals.core.services.execution.attempt import attempt_begin
from approvals.models import ApprovalRole, AuditRecord, Execution, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.console.conftest import logged_in, make_reviewer
from tests.refunds.test_stripe_gateway import PI, assert_one_refund_paid, confirm_and_run, make_preview

pytestmark = pytest.mark.usefixtures("stripe_gateway_settings")

NOTHING = "nothing was done"


@pytest.fixture
def intent(fake_stripe):
    return fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")


def everything_said(preview, client_for_customer, client_for_staff) -> list[str]:
    """What the agent, the customer and staff read about the preview, lower-cased."""
    agent = client_for_customer["agent"].get(f"/api/agent/previews/{preview.pk}").json()
    customer_page = client_for_customer["browser"].get(f"/previews/{preview.pk}/").content.decode()
    console = client_for_staff.get(f"/console/previews/{preview.pk}/").content.decode()
    failures = client_for_staff.get("/console/failures/").content.decode()
    return [agent["message"].lower(), customer_page.lower(), console.lower(), failures.lower(), agent]


def test_a_refund_made_before_a_time_out_then_503s_is_found_by_the_resolver_and_recorded_once(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.time_out_next(seconds=1.0)  # the refund is made, the answer is lost
    fake_stripe.fail_next(100, status=503)  # then every POST is a 503...
    fake_stripe.fail_lookups(503)  # ...and so is every lookup, until the retries run out

    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)

    assert fake_stripe.refunds_created == 1
    assert not Refund.objects.exists()
    assert preview.status == PreviewStatus.NEEDS_ATTENTION
    assert Execution.objects.get(pk=preview.pk).outcome == "effect_unknown"
    reviewer = make_reviewer("rita")
    *texts, agent = everything_said(preview, {"agent": alice_agent, "browser": logged_in(alice)}, logged_in(reviewer))
    for text in texts:
        assert NOTHING not in text
    assert (agent["status"], agent["outcome"], agent["executed"]) == ("needs_attention", "effect_unknown", False)
    assert "could not confirm" in agent["message"] and "not be done a second time" in agent["message"]
    assert "we could not confirm this with the payment provider yet" in texts[1]

    fake_stripe.fail_lookups(None)  # the provider answers again
    with django_capture_on_commit_callbacks(execute=True):
        assert executions_resolve_unknown(older_than_seconds=0) == 1
    preview.refresh_from_db()

    refund = assert_one_refund_paid(fake_stripe, preview, o12)
    posts = fake_stripe.refund_requests()
    assert [r.status for r in posts][0] == 200 and len(posts) == 1  # the retries only looked; none POSTed again
    resolved = AuditRecord.objects.filter(preview=preview, event="execution_started").last()
    assert resolved.result["look_up_first"] is True
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    assert executed.result["refund_id"] == refund["id"]
    answer = alice_agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (answer["status"], answer["outcome"], answer["executed"]) == ("executed", "succeeded", True)


def test_the_resolver_makes_a_first_refund_only_when_none_exists_and_every_check_passes(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.fail_next(100, status=503)  # nothing reaches the endpoint; the outcome is still unknown to us
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)
    assert preview.status == PreviewStatus.NEEDS_ATTENTION and fake_stripe.refunds_created == 0

    Order.objects.filter(pk=o12.pk).update(status="cancelled")  # today's checks refuse it
    fake_stripe._faults.clear()
    with django_capture_on_commit_callbacks(execute=True):
        executions_resolve_unknown(older_than_seconds=0)
    preview.refresh_from_db()

    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "order_not_refundable")
    assert Execution.objects.get(pk=preview.pk).outcome == "refused_before_effect"
    assert fake_stripe.refunds_created == 0 and not Refund.objects.exists()
    assert "nothing was done" in alice_agent.get(f"/api/agent/previews/{preview.pk}").json()["message"]


def test_a_failure_before_the_provider_was_asked_is_retried_only_through_every_check(
    settings, alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks, tmp_path
):
    """The attack: a misconfigured gateway, then the order re-imported as cancelled, then a staff retry.
    The retry runs every check and is refused; nothing is paid and nothing goes unrecorded."""
    settings.PAYMENT_GATEWAY = "nonsense"
    preview = confirm_and_run(make_preview(alice_agent), alice, django_capture_on_commit_callbacks)
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "gateway_unavailable")
    assert Execution.objects.get(pk=preview.pk).outcome == "refused_before_effect"
    assert "nothing has been done yet" in logged_in(alice).get(f"/previews/{preview.pk}/").content.decode().lower()

    shop = tmp_path / "shop.json"
    shop.write_text(
        json.dumps(
            {
                "orders": [
                    {
                        "id": "o-12",
                        "customer": "alice",
                        "currency": "EUR",
                        "total_minor": 1000,
                        "refunded_minor": 800,
                        "status": "cancelled",
                        "placed_at": "2026-08-02",
                        "delivered_at": None,
                        "payment_ref": PI,
                    }
                ]
            }
        )
    )
    call_command("import_shop_data", str(shop), *(["--operator", "ops"] if _takes_operator() else []))
    settings.PAYMENT_GATEWAY = "stripe"

    reviewer = make_reviewer("rita")
    console = logged_in(reviewer)
    assert console.get(f"/console/previews/{preview.pk}/").content.decode().count("✗ Fails") >= 2
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(f"/console/previews/{preview.pk}/retry")
    assert response.status_code == 302
    preview.refresh_from_db()

    assert preview.status in (PreviewStatus.SUPERSEDED, PreviewStatus.FAILED)
    assert preview.failure_code in ("subject_changed", "order_not_refundable")
    assert fake_stripe.requests == [] and fake_stripe.refunds_created == 0
    assert not Refund.objects.exists() and not LocalGatewayRefund.objects.exists()
    assert Order.objects.get(pk=o12.pk).refunded_minor == 800
    tail = list(AuditRecord.objects.filter(preview=preview).values_list("event", flat=True))[-2:]
    assert tail[0] == "retried" and tail[1] in ("superseded", "execution_failed")


def test_the_import_counts_refunds_in_flight(
    alice, o12, alice_agent, fake_stripe, intent, tmp_path, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent, amount_minor=400)
    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert attempt_begin(preview.pk, presented=None, worker="w") is not None  # 400 reserved, may be at Stripe

    shop = tmp_path / "shop.json"
    order = {
        "id": "o-12",
        "customer": "alice",
        "currency": "EUR",
        "total_minor": 1000,
        "refunded_minor": 700,
        "status": "delivered",
        "placed_at": "2026-08-02",
        "delivered_at": "2026-08-04",
        "payment_ref": PI,
    }
    shop.write_text(json.dumps({"orders": [order]}))
    with pytest.raises(CommandError):
        call_command("import_shop_data", str(shop), *(["--operator", "ops"] if _takes_operator() else []))
    assert Order.objects.get(pk=o12.pk).refunded_minor == 0

    order["refunded_minor"] = 600  # 600 + 400 in flight = the total: allowed
    shop.write_text(json.dumps({"orders": [order]}))
    call_command("import_shop_data", str(shop), *(["--operator", "ops"] if _takes_operator() else []))
    assert Order.objects.get(pk=o12.pk).refunded_minor == 600


def _takes_operator() -> bool:
    from approvals.management.commands.import_shop_data import Command

    return "--operator" in Command().create_parser("manage.py", "import_shop_data").format_help()
