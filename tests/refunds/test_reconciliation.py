"""Reconciliation against the Stripe-compatible test server: each kind of drift made on purpose, the
command's lines and exit code, the console page's acknowledgement (audited), nothing ever repaired."""

import datetime

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group
from django.core.management import call_command

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview
from refunds.models import Drift, DriftKind, LocalGatewayRefund, Order, Refund
from refunds.reconciliation import drift_acknowledge, reconcile_run
from refunds.tasks import reconcile as reconcile_task
from tests.conftest import propose
from tests.factories import OrderFactory, StaffFactory

PI = "pi_o-12"

pytestmark = pytest.mark.usefixtures("stripe_gateway_settings")


@pytest.fixture
def intent(fake_stripe):
    return fake_stripe.add_payment_intent(PI, amount=1000, currency="eur")


@pytest.fixture
def sam(db):
    staff = StaffFactory(username="sam")
    staff.groups.add(Group.objects.get(name="Refund reviewers"))
    return staff


def executed_refund(agent, customer, capture, amount_minor=500) -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    return preview


def run_command(*args) -> tuple[int, list[str]]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    return code, out.getvalue().splitlines()


def kinds(run) -> list[tuple[str, str]]:
    return sorted((drift.order.number, drift.kind) for drift in run.drifts)


def test_books_and_provider_that_agree_have_no_drift(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)

    assert run_command() == (0, [])
    assert Drift.objects.count() == 0
    # The executor read the charges before the refund; reconciliation lists the refunds.
    assert [r.path for r in fake_stripe.requests if r.method == "GET"] == ["/v1/charges", "/v1/refunds"]


def test_a_refund_made_in_the_dashboard_is_a_provider_refund_with_no_preview(o12, intent, fake_stripe):
    outside = fake_stripe.refund_outside(PI, 300)

    code, lines = run_command()

    assert code == 1
    assert lines == [
        f"drift order=o-12 kind=provider_refund_without_preview Order o-12: the provider holds refund {outside['id']} "
        "of €3.00 (300) (succeeded) that no preview made.",
        "drift order=o-12 kind=refunded_total_mismatch Order o-12: refunded €0.00 (0) on the order, €0.00 (0) in "
        "the ledger, €3.00 (300) at the provider.",
    ]
    drift = Drift.objects.get(kind=DriftKind.PROVIDER_REFUND_WITHOUT_PREVIEW)
    assert (drift.reference, drift.facts["amount_minor"], drift.facts["currency"]) == (outside["id"], 300, "EUR")
    assert AuditRecord.objects.filter(event="drift_found", subject_id="o-12").count() == 2
    # Nothing repaired.
    o12.refresh_from_db()
    assert (o12.refunded_minor, Refund.objects.count()) == (0, 0)


def test_an_executed_preview_whose_refund_the_provider_does_not_list(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    preview = executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    refund_id = Refund.objects.get().gateway_refund_id
    fake_stripe.refunds.clear()  # the provider lost it (or the ledger names a refund it never made)

    run = reconcile_run()

    assert kinds(run) == [
        ("o-12", DriftKind.PREVIEW_WITHOUT_PROVIDER_REFUND),
        ("o-12", DriftKind.REFUNDED_TOTAL_MISMATCH),
    ]
    drift = Drift.objects.get(kind=DriftKind.PREVIEW_WITHOUT_PROVIDER_REFUND)
    assert drift.reference == str(preview.pk)
    assert drift.facts == {
        "order_id": "o-12",
        "preview_id": str(preview.pk),
        "refund_id": refund_id,
        "amount_minor": 500,
        "currency": "EUR",
    }
    total = Drift.objects.get(kind=DriftKind.REFUNDED_TOTAL_MISMATCH)
    assert (total.facts["order_refunded_minor"], total.facts["ledger_minor"], total.facts["provider_minor"]) == (
        500,
        500,
        0,
    )


def test_an_amount_mismatch_between_provider_and_ledger(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    fake_stripe.refund(ledger.gateway_refund_id)["amount"] = 450

    run = reconcile_run()

    assert kinds(run) == [("o-12", DriftKind.AMOUNT_MISMATCH), ("o-12", DriftKind.REFUNDED_TOTAL_MISMATCH)]
    drift = Drift.objects.get(kind=DriftKind.AMOUNT_MISMATCH)
    assert (drift.facts["ledger_amount_minor"], drift.facts["provider_amount_minor"]) == (500, 450)
    assert "€4.50 (450) at the provider and €5.00 (500) in the ledger" in drift.message


def test_a_status_mismatch_when_a_failure_event_was_missed(
    alice, o12, alice_agent, intent, fake_stripe, django_capture_on_commit_callbacks
):
    fake_stripe.refund_status = "pending"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    ledger = Refund.objects.get()
    fake_stripe.set_refund_status(ledger.gateway_refund_id, "failed")  # its event never reached us

    code, lines = run_command()

    assert code == 1
    assert (
        f"drift order=o-12 kind=status_mismatch Order o-12: refund {ledger.gateway_refund_id} (€5.00 (500)) is failed "
        "at the provider and pending in the ledger."
    ) in lines
    assert any("kind=refunded_total_mismatch" in line for line in lines)
    ledger.refresh_from_db()
    assert ledger.status == "pending"  # reported, not repaired


def test_a_refunded_total_that_disagrees_alone(o12, intent, fake_stripe):
    Order.objects.filter(pk=o12.pk).update(refunded_minor=200)  # re-imported with a refund from elsewhere

    run = reconcile_run()

    assert kinds(run) == [("o-12", DriftKind.REFUNDED_TOTAL_MISMATCH)]
    assert run.drifts[0].message == (
        "Order o-12: refunded €2.00 (200) on the order, €0.00 (0) in the ledger, €0.00 (0) at the provider."
    )


def test_every_page_of_the_providers_refunds_is_read(o12, intent, fake_stripe):
    fake_stripe.page_size = 2
    made = [fake_stripe.refund_outside(PI, 100)["id"] for _ in range(5)]

    run = reconcile_run()

    found = {drift.reference for drift in run.drifts if drift.kind == DriftKind.PROVIDER_REFUND_WITHOUT_PREVIEW}
    assert found == set(made)
    gets = [r for r in fake_stripe.requests if r.method == "GET"]
    assert len(gets) == 3  # 2 + 2 + 1
    assert gets[1].params["starting_after"] == made[-2]


def test_acknowledging_in_the_console_is_audited_and_ends_the_non_zero_exit(o12, intent, fake_stripe, client, sam):
    fake_stripe.refund_outside(PI, 300)
    assert run_command()[0] == 1
    drifts = list(Drift.objects.order_by("pk"))
    client.force_login(sam)

    page = client.get("/console/payments/").content.decode()
    assert "Provider refund with no preview" in page and "o-12" in page
    assert client.post(f"/console/payments/drifts/{drifts[0].pk}/acknowledge", {"note": ""}).status_code == 302
    drifts[0].refresh_from_db()
    assert drifts[0].acknowledged_at is None  # a note is required

    for drift in drifts:
        response = client.post(
            f"/console/payments/drifts/{drift.pk}/acknowledge", {"note": "Refunded by phone support, ticket 881."}
        )
        assert response.status_code == 302
    records = AuditRecord.objects.filter(event="drift_acknowledged").order_by("id")
    assert [(r.actor_id, r.subject_id, r.result["note"]) for r in records] == [
        (sam.pk, "o-12", "Refunded by phone support, ticket 881.")
    ] * 2
    assert run_command() == (0, [])
    o12.refresh_from_db()
    assert o12.refunded_minor == 0  # acknowledged, still not repaired
    # The same drift acknowledged twice is refused.
    with pytest.raises(Exception, match="already acknowledged"):
        drift_acknowledge(drift_id=drifts[0].pk, person=sam, note="again")


def test_the_console_page_is_for_refund_reviewers_only_and_its_forms_need_csrf(o12, intent, fake_stripe, alice, sam):
    from django.test import Client

    fake_stripe.refund_outside(PI, 300)
    reconcile_run()
    drift = Drift.objects.first()
    anonymous = Client()
    assert anonymous.get("/console/payments/").status_code == 302
    customer = Client()
    customer.force_login(alice)
    assert customer.get("/console/payments/").status_code == 403
    assert customer.post(f"/console/payments/drifts/{drift.pk}/acknowledge", {"note": "x"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(sam)
    assert strict.post(f"/console/payments/drifts/{drift.pk}/acknowledge", {"note": "x"}).status_code == 403
    drift.refresh_from_db()
    assert drift.acknowledged_at is None


def test_a_drift_that_goes_away_is_cleared_and_one_that_changes_needs_a_new_acknowledgement(
    o12, intent, fake_stripe, sam
):
    Order.objects.filter(pk=o12.pk).update(refunded_minor=200)
    first = reconcile_run().drifts[0]
    drift_acknowledge(drift_id=first.pk, person=sam, note="Known: refunded before the gateway.")
    Order.objects.filter(pk=o12.pk).update(refunded_minor=300)

    second = reconcile_run()

    assert [d.pk for d in second.unacknowledged] != [first.pk] and len(second.unacknowledged) == 1
    first.refresh_from_db()
    assert first.cleared_at is not None
    Order.objects.filter(pk=o12.pk).update(refunded_minor=0)
    assert reconcile_run().drifts == []
    assert AuditRecord.objects.filter(event="drift_cleared").count() == 2


def test_since_limits_the_orders_compared(o12, intent, fake_stripe, alice):
    old = OrderFactory(
        number="o-old",
        customer=alice,
        placed_at=datetime.date(2020, 1, 2),
        delivered_at=datetime.date(2020, 1, 5),
        refunded_minor=100,
    )
    Order.objects.filter(pk=old.pk).update(updated_at=datetime.datetime(2020, 1, 5, tzinfo=datetime.UTC))
    fake_stripe.add_payment_intent("pi_o-old", amount=1000)

    code, lines = run_command("--since", "2026-01-01")
    assert code == 0 and lines == []
    code, lines = run_command()
    assert code == 1 and [line.split()[1] for line in lines] == ["order=o-old"]


def test_the_provider_unreachable_is_an_error_not_a_clean_bill(o12, intent, fake_stripe):
    fake_stripe.fail_lookups(503)

    code, lines = run_command()

    assert (code, lines) == (2, [])
    assert Drift.objects.count() == 0


def test_the_beat_task_reconciles(o12, intent, fake_stripe):
    fake_stripe.refund_outside(PI, 300)
    assert django_settings.CELERY_BEAT_SCHEDULE["reconcile-payments"]["task"] == "refunds.reconcile"

    assert reconcile_task.delay().get() == 2
    assert Drift.objects.count() == 2


def test_the_local_gateway_is_reconciled_from_its_own_table(
    settings, alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    settings.PAYMENT_GATEWAY = "local"
    executed_refund(alice_agent, alice, django_capture_on_commit_callbacks)
    assert reconcile_run().drifts == []
    LocalGatewayRefund.objects.update(status="canceled")

    run = reconcile_run()

    assert kinds(run) == [("o-12", DriftKind.REFUNDED_TOTAL_MISMATCH), ("o-12", DriftKind.STATUS_MISMATCH)]
