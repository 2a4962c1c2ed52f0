"""Seed 003, commit: the worker re-checks everything under lock and moves money exactly once.

The tests marked `postgres` race real transactions against each other (row locks); they use
`transactional_db`, so each thread's work is really committed and seen by the others.
"""

import threading
from unittest import mock

import pytest
from django.db import connection
from django.db.models import F

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve, preview_execute
from approvals.core.services.execution import attempt as executions
from approvals.models import Approval, ApprovalRole, AuditRecord, Preview, PreviewStatus
from approvals.tasks import execute_preview
from refunds.models import LocalGatewayRefund, Order, OrderStatus, Refund
from tests.conftest import assert_nothing_moved, events, execution_callbacks, propose, tampering


def make_preview(agent, order_id="o-12", amount_minor=500, reason="damaged") -> Preview:
    response = propose(agent, order_id=order_id, amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def confirm(preview, person) -> Preview:
    return preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def approve_held(preview, person, capture) -> list:
    """Confirm, keeping the enqueued execution in hand instead of running it."""
    with capture(execute=False) as callbacks:
        confirm(preview, person)
    assert len(execution_callbacks(callbacks)) == 1
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    return execution_callbacks(callbacks)


# Exactly once --------------------------------------------------------------------------------


def test_running_the_task_twice_refunds_once_with_the_preview_key(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    assert_nothing_moved(o12)  # approved is not executed

    execute_preview.apply(args=[str(preview.pk)])
    execute_preview.apply(args=[str(preview.pk)])
    preview_execute(preview_id=preview.pk)

    gateway = LocalGatewayRefund.objects.get()
    assert gateway.idempotency_key == f"refund:{preview.id}"
    assert (gateway.payment_ref, gateway.amount_minor, gateway.currency) == ("pi_o-12", 500, "EUR")
    refund = Refund.objects.get()
    assert refund.gateway_refund_id == gateway.refund_id
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert preview.executed_at is not None
    assert preview.result == {
        "refund_id": gateway.refund_id,
        "order_id": "o-12",
        "amount_minor": 500,
        "currency": "EUR",
        "order_refunded_minor": 500,
        "refund_status": "succeeded",
    }
    assert events(preview) == ["proposed", "confirmed", "execution_started", "executed"]


def test_a_gateway_refund_made_before_a_crash_is_reused_not_repeated(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    """A provider keeps a refund made before the worker crashed; the same key returns it."""
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    LocalGatewayRefund.objects.create(
        idempotency_key=f"refund:{preview.pk}",
        refund_id="lr_before_crash",
        payment_ref="pi_o-12",
        amount_minor=500,
        currency="EUR",
    )

    preview_execute(preview_id=preview.pk)

    assert LocalGatewayRefund.objects.count() == 1
    assert Refund.objects.get().gateway_refund_id == "lr_before_crash"
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert preview.result["refund_id"] == "lr_before_crash"
    o12.refresh_from_db()
    assert o12.refunded_minor == 500


def test_a_key_reused_for_a_different_refund_needs_a_person_with_the_refund_it_found(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    """Money moved under this preview's key, but not as approved: it is neither paid again nor
    called failed. A person sees the provider's refund."""
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    LocalGatewayRefund.objects.create(
        idempotency_key=f"refund:{preview.pk}",
        refund_id="lr_other",
        payment_ref="pi_o-12",
        amount_minor=999,
        currency="EUR",
    )

    execute_preview.apply(args=[str(preview.pk)])

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.NEEDS_ATTENTION
    assert preview.failure_code == "idempotency_error"
    assert preview.execution.outcome == "effect_unrecorded"
    assert preview.execution.effect["refund_id"] == "lr_other"
    assert Refund.objects.count() == 0
    assert LocalGatewayRefund.objects.count() == 1
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (0, 1)
    assert events(preview)[-1] == "execution_transition"


def test_a_preview_that_is_not_approved_is_not_executed(alice, o12, alice_agent):
    preview = make_preview(alice_agent)

    execute_preview.apply(args=[str(preview.pk)])

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert events(preview) == ["proposed"]
    assert_nothing_moved(o12)


# Superseded ----------------------------------------------------------------------------------


def test_a_second_refund_committed_on_the_order_supersedes_an_older_approved_preview(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    older = make_preview(alice_agent, amount_minor=300)
    newer = make_preview(alice_agent, amount_minor=400)
    older_run = approve_held(older, alice, django_capture_on_commit_callbacks)
    newer_run = approve_held(newer, alice, django_capture_on_commit_callbacks)

    newer_run[0]()  # the newer one reaches the worker first

    newer.refresh_from_db()
    older.refresh_from_db()
    assert newer.status == PreviewStatus.EXECUTED
    assert older.status == PreviewStatus.SUPERSEDED
    assert older.failure_code == "subject_changed"
    assert "o-12" in older.failure_reason
    superseded = AuditRecord.objects.get(preview=older, event="superseded")
    assert superseded.result["by_preview"] == str(newer.pk)

    older_run[0]()  # its own task arrives late and does nothing

    older.refresh_from_db()
    assert older.status == PreviewStatus.SUPERSEDED
    assert Refund.objects.get().preview_id == newer.pk
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{newer.pk}"
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (400, 2)
    assert events(older) == ["proposed", "confirmed", "superseded"]


def test_an_order_changed_after_approval_supersedes_at_execution(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    run = approve_held(preview, alice, django_capture_on_commit_callbacks)
    Order.objects.filter(pk=o12.pk).update(version=F("version") + 1)

    run[0]()

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED
    assert preview.failure_code == "subject_changed"
    assert events(preview) == ["proposed", "confirmed", "superseded"]
    assert_nothing_moved(o12, version=2)


# Re-validation under lock --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "code", "reason"),
    [
        (
            {"status": OrderStatus.CANCELLED},
            "order_not_refundable",
            "Order o-12 is cancelled; only delivered orders can be refunded.",
        ),
        (
            {"refunded_minor": 800},
            "amount_exceeds_remaining",
            "Refund of €5.00 (500) exceeds the €2.00 (200) remaining on o-12",
        ),
    ],
    ids=["cancelled", "above-remaining"],
)
def test_policy_is_re_run_at_execution_even_when_the_version_did_not_move(
    alice, o12, alice_agent, django_capture_on_commit_callbacks, change, code, reason
):
    preview = make_preview(alice_agent)
    run = approve_held(preview, alice, django_capture_on_commit_callbacks)
    Order.objects.filter(pk=o12.pk).update(**change)  # a change that forgot to bump the version

    run[0]()

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED
    assert preview.failure_code == code
    assert preview.failure_reason == reason
    assert events(preview) == ["proposed", "confirmed", "execution_failed"]
    failed = AuditRecord.objects.get(preview=preview, event="execution_failed")
    assert failed.result["error"]["code"] == code
    assert_nothing_moved(o12, refunded_minor=change.get("refunded_minor", 0))


# Approval and payload must match -------------------------------------------------------------


@pytest.mark.parametrize(
    "tamper",
    ["approval_digest", "approval_version", "approval_after_expiry", "no_approval"],
)
def test_an_approval_that_does_not_match_the_preview_is_refused(
    alice, o12, alice_agent, django_capture_on_commit_callbacks, tamper
):
    preview = make_preview(alice_agent)
    run = approve_held(preview, alice, django_capture_on_commit_callbacks)
    approvals = Approval.objects.filter(preview=preview)
    if tamper == "approval_digest":
        approvals.update(digest="f" * 64)
    elif tamper == "approval_version":
        approvals.update(subject_version=99)
    elif tamper == "approval_after_expiry":
        approvals.update(created_at=preview.expires_at + (preview.expires_at - preview.created_at))
    else:
        approvals.delete()

    run[0]()

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED
    assert preview.failure_code == "approval_missing"
    assert events(preview)[-1] == "execution_failed"
    assert_nothing_moved(o12)


def test_a_payload_changed_after_approval_is_refused(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    run = approve_held(preview, alice, django_capture_on_commit_callbacks)
    with tampering():
        Preview.objects.filter(pk=preview.pk).update(amount_minor=900)

    run[0]()

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED
    assert preview.failure_code == "digest_mismatch"
    assert_nothing_moved(o12)


# Races (PostgreSQL row locks) ----------------------------------------------------------------


def run_at_once(*targets):
    """Start every target at the same moment in its own thread and connection; return (result, error) pairs."""
    barrier = threading.Barrier(len(targets))
    outcomes: list = [None] * len(targets)

    def worker(index, target):
        try:
            barrier.wait(timeout=10)
            outcomes[index] = (target(), None)
        except Exception as error:  # noqa: BLE001 - every outcome is inspected by the test
            outcomes[index] = (None, error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return outcomes


def approve_without_enqueueing(preview, person) -> None:
    """Under transactional_db on_commit runs at once; hold the task back by patching its enqueue."""
    with mock.patch.object(execute_preview, "delay") as delay:
        confirm(preview, person)
    delay.assert_called_once_with(str(preview.pk))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED


@pytest.mark.postgres
def test_two_confirmations_at_the_same_moment_produce_one_refund(transactional_db, alice, o12, alice_agent):
    preview = make_preview(alice_agent)

    outcomes = run_at_once(lambda: confirm(preview, alice), lambda: confirm(preview, alice))

    errors = [error for _result, error in outcomes if error is not None]
    assert len(errors) == 1, outcomes
    assert isinstance(errors[0], DecisionError) and errors[0].code == "already_decided", errors
    assert Approval.objects.count() == 1
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Refund.objects.count() == 1
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    assert events(preview).count("executed") == 1
    assert events(preview).count("confirmed") == 1


@pytest.mark.postgres
def test_the_task_run_concurrently_refunds_once(transactional_db, alice, o12, alice_agent):
    preview = make_preview(alice_agent)
    approve_without_enqueueing(preview, alice)

    outcomes = run_at_once(*[lambda: executions.preview_execute(preview_id=preview.pk)] * 4)

    assert [error for _result, error in outcomes] == [None] * 4
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert LocalGatewayRefund.objects.count() == 1
    assert Refund.objects.count() == 1
    o12.refresh_from_db()
    assert (o12.refunded_minor, o12.version) == (500, 2)
    assert events(preview).count("executed") == 1


@pytest.mark.postgres
@pytest.mark.parametrize("attempt", range(3))
def test_two_approved_previews_exceeding_the_total_executed_at_once(transactional_db, alice, o12, alice_agent, attempt):
    first = make_preview(alice_agent, amount_minor=600)
    second = make_preview(alice_agent, amount_minor=500)
    approve_without_enqueueing(first, alice)
    approve_without_enqueueing(second, alice)

    outcomes = run_at_once(
        lambda: execute_preview.apply(args=[str(first.pk)]),
        lambda: execute_preview.apply(args=[str(second.pk)]),
    )

    assert [error for _result, error in outcomes] == [None, None], outcomes
    first.refresh_from_db()
    second.refresh_from_db()
    statuses = sorted([first.status, second.status])
    assert PreviewStatus.EXECUTED in statuses, statuses
    loser = second if first.status == PreviewStatus.EXECUTED else first
    winner = first if loser is second else second
    assert loser.status in (PreviewStatus.SUPERSEDED, PreviewStatus.FAILED), statuses
    refund = Refund.objects.get()
    assert refund.preview_id == winner.pk
    assert LocalGatewayRefund.objects.count() == 1
    o12.refresh_from_db()
    assert o12.refunded_minor == winner.amount_minor <= o12.total_minor
    assert sum(Refund.objects.values_list("amount_minor", flat=True)) <= o12.total_minor
    assert o12.version == 2


@pytest.mark.postgres
@pytest.mark.parametrize("attempt", range(3))
def test_a_confirmation_racing_a_sibling_execution_moves_money_once(transactional_db, alice, o12, alice_agent, attempt):
    """Confirming one preview while another on the same order executes: neither deadlocks nor double-pays."""
    executing = make_preview(alice_agent, amount_minor=600)
    confirming = make_preview(alice_agent, amount_minor=500)
    approve_without_enqueueing(executing, alice)

    outcomes = run_at_once(
        lambda: executions.preview_execute(preview_id=executing.pk),
        lambda: confirm(confirming, alice),
    )

    for _result, error in outcomes:
        assert error is None or (isinstance(error, DecisionError) and error.code == "superseded"), outcomes
    executing.refresh_from_db()
    confirming.refresh_from_db()
    statuses = {executing.status, confirming.status}
    assert PreviewStatus.EXECUTED in statuses, statuses
    assert statuses & {PreviewStatus.SUPERSEDED, PreviewStatus.FAILED}, statuses
    assert Refund.objects.count() == 1
    assert LocalGatewayRefund.objects.count() == 1
    o12.refresh_from_db()
    assert o12.refunded_minor == Refund.objects.get().amount_minor
    assert o12.version == 2
