"""The execution as an explicit, leased state machine: one function changes it and refuses what the
table does not allow, each attempt holds a lease with a fencing token, and a late answer from an
attempt that lost its lease changes nothing."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.core.presentation import STATE_WORDING, preview_message
from approvals.core.services import (
    TRANSITIONS,
    IllegalTransition,
    Outcome,
    execution_retry,
    execution_transition,
    executions_dispatch_stalled,
    preview_execute,
    preview_status_for,
    previews_expire_stale,
)
from approvals.core.services.execution import attempt as executions
from approvals.core.services.execution import sweeps
from approvals.models import AuditRecord, Execution, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.approvals.test_preview_execute import approve_held, make_preview
from tests.conftest import events
from tests.console.conftest import logged_in, make_reviewer
from tests.factories import UserFactory


def execution(preview) -> Execution:
    return Execution.objects.get(pk=preview.pk)


def expire_lease(preview) -> None:
    Execution.objects.filter(pk=preview.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def transition(preview, to, **kwargs) -> None:
    with transaction.atomic():
        locked = Preview.objects.select_for_update().get(pk=preview.pk)
        execution_transition(execution(preview), locked, to, **kwargs)


# The table -----------------------------------------------------------------------------------


def test_every_outcome_has_its_transitions_and_a_contract_status():
    assert set(TRANSITIONS) == set(Outcome)
    assert TRANSITIONS[Outcome.SUCCEEDED] == TRANSITIONS[Outcome.FAILED_AFTER_CHECK] == frozenset()
    assert preview_status_for(Outcome.PENDING) == preview_status_for(Outcome.IN_PROGRESS) == PreviewStatus.APPROVED
    assert preview_status_for(Outcome.SUCCEEDED) == PreviewStatus.EXECUTED
    assert preview_status_for(Outcome.EFFECT_UNKNOWN) == PreviewStatus.NEEDS_ATTENTION
    assert preview_status_for(Outcome.EFFECT_UNRECORDED) == PreviewStatus.NEEDS_ATTENTION
    assert preview_status_for(Outcome.FAILED_AFTER_CHECK) == PreviewStatus.FAILED
    assert preview_status_for(Outcome.REFUSED_BEFORE_EFFECT, "order_not_refundable") == PreviewStatus.FAILED
    assert preview_status_for(Outcome.REFUSED_BEFORE_EFFECT, "gateway_unavailable", "refund_order") == (
        PreviewStatus.NEEDS_ATTENTION
    )
    # A code is transient only for the action that declares it so.
    assert (
        preview_status_for(Outcome.REFUSED_BEFORE_EFFECT, "gateway_unavailable", "send_invoice") == PreviewStatus.FAILED
    )
    assert preview_status_for(Outcome.REFUSED_BEFORE_EFFECT, "retries_exhausted", "send_invoice") == (
        PreviewStatus.NEEDS_ATTENTION
    )
    assert preview_status_for(Outcome.REFUSED_BEFORE_EFFECT, "subject_changed") == PreviewStatus.SUPERSEDED


def test_a_terminal_execution_refuses_every_transition(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    assert preview_execute(preview_id=preview.pk).status == PreviewStatus.EXECUTED
    before = AuditRecord.objects.count()

    for to in Outcome:
        with pytest.raises(IllegalTransition):
            transition(preview, to, token=None)

    assert execution(preview).outcome == Outcome.SUCCEEDED
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED
    assert AuditRecord.objects.count() == before


def test_a_final_refusal_cannot_start_again_but_a_retryable_one_can(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    Order.objects.filter(pk=o12.pk).update(status="cancelled")
    assert preview_execute(preview_id=preview.pk).status == PreviewStatus.FAILED
    with pytest.raises(IllegalTransition):
        transition(preview, Outcome.PENDING, token=None, actor=UserFactory(is_staff=True))


def test_only_a_person_may_say_an_unknown_effect_never_happened(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    transition(preview, Outcome.IN_PROGRESS, token=None)
    transition(preview, Outcome.EFFECT_UNKNOWN, token=execution(preview).fencing_token, code="effect_unknown")
    with pytest.raises(IllegalTransition):
        transition(preview, Outcome.PENDING, token=None)
    staff = UserFactory(is_staff=True)
    transition(preview, Outcome.PENDING, token=None, actor=staff)
    record = AuditRecord.objects.filter(preview=preview).last()
    assert record.actor == staff and record.result["outcome_from"] == "effect_unknown"


def test_every_transition_is_audited_with_its_attempt_and_token(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)

    preview_execute(preview_id=preview.pk)

    started, executed = AuditRecord.objects.filter(preview=preview, event__in=["execution_started", "executed"])
    assert (started.result["outcome_from"], started.result["outcome"]) == ("pending", "in_progress")
    assert (started.result["attempt"], started.result["fencing_token"]) == (1, 1)
    assert (executed.result["outcome_from"], executed.result["outcome"]) == ("in_progress", "succeeded")
    assert executed.result["refund_id"] == Refund.objects.get().gateway_refund_id
    done = execution(preview)
    assert (done.outcome, done.attempt, done.fencing_token, done.lease_owner) == ("succeeded", 1, 1, "")
    assert done.effect["refund_id"] == Refund.objects.get().gateway_refund_id


# Leases and fencing --------------------------------------------------------------------------


def test_a_held_lease_turns_away_a_duplicate_delivery(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    attempt = executions.attempt_begin(preview.pk, presented=None, worker="first")
    assert attempt is not None and attempt.token == 1

    assert executions.attempt_begin(preview.pk, presented=None, worker="duplicate") is None
    assert executions.attempt_begin(preview.pk, presented=0, worker="stale") is None

    fenced = AuditRecord.objects.get(preview=preview, event="execution_fenced_off")
    assert (fenced.result["fencing_token"], fenced.result["current_token"]) == (0, 1)
    assert execution(preview).lease_owner == "first"


def test_a_late_answer_from_an_attempt_that_lost_its_lease_is_refused_and_audited(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    slow = executions.attempt_begin(preview.pk, presented=None, worker="slow")
    effect = slow.action.perform(preview=slow.preview, subject=slow.subject)  # the refund is made
    expire_lease(preview)

    taker = executions.attempt_begin(preview.pk, presented=None, worker="taker")
    assert (taker.token, taker.look_up_first) == (2, True)

    executions.attempt_finish(slow, effect)  # the slow attempt answers late
    assert execution(preview).outcome == Outcome.IN_PROGRESS
    assert not Refund.objects.exists()
    fenced = AuditRecord.objects.get(preview=preview, event="execution_fenced_off")
    assert (fenced.result["fencing_token"], fenced.result["current_token"]) == (1, 2)
    assert fenced.result["effect"]["refund_id"] == effect["refund_id"]

    found = taker.action.find_effect(preview=taker.preview)
    assert found == effect
    executions.attempt_finish(taker, found)
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED
    assert Refund.objects.get().gateway_refund_id == effect["refund_id"]
    assert LocalGatewayRefund.objects.count() == 1
    assert Order.objects.get(pk=o12.pk).refunded_minor == 500


def test_the_sweeper_publishes_only_lost_work_and_expired_leases(
    alice, o12, alice_agent, django_capture_on_commit_callbacks, monkeypatch
):
    published = []
    monkeypatch.setattr(sweeps, "execution_dispatch", lambda preview_id: published.append(preview_id) or True)
    lost = make_preview(alice_agent, amount_minor=100)
    approve_held(lost, alice, django_capture_on_commit_callbacks)
    working = make_preview(alice_agent, amount_minor=200)
    approve_held(working, alice, django_capture_on_commit_callbacks)
    executions.attempt_begin(working.pk, presented=None, worker="alive")

    assert executions_dispatch_stalled(older_than_seconds=0) == 1
    assert published == [lost.pk]

    expire_lease(working)
    published.clear()
    assert executions_dispatch_stalled(older_than_seconds=3600) == 1
    assert published == [working.pk]


def test_an_approval_too_old_to_act_on_is_refused_before_any_effect(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    Execution.objects.filter(pk=preview.pk).update(deadline=timezone.now() - timedelta(seconds=1))

    refused = preview_execute(preview_id=preview.pk)

    assert (refused.status, refused.failure_code) == (PreviewStatus.FAILED, "execution_deadline_passed")
    assert execution(preview).outcome == Outcome.REFUSED_BEFORE_EFFECT
    assert not LocalGatewayRefund.objects.exists()


# A recording that hits a constraint ----------------------------------------------------------


def test_an_effect_whose_recording_hits_a_constraint_is_kept_for_staff_and_not_retried_blindly(
    alice, o12, alice_agent, django_capture_on_commit_callbacks, monkeypatch
):
    reviewer = make_reviewer("rita")
    preview = make_preview(alice_agent)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    # Someone marks the order as almost fully refunded behind the gateway's back (no version bump).
    Order.objects.filter(pk=o12.pk).update(refunded_minor=800)
    monkeypatch.setattr("refunds.actions.RefundOrderAction.revalidate", lambda self, **kwargs: None)

    preview = preview_execute(preview_id=preview.pk)

    gateway_refund = LocalGatewayRefund.objects.get()  # the money moved
    assert preview.status == PreviewStatus.NEEDS_ATTENTION
    stuck = execution(preview)
    assert (stuck.outcome, stuck.code) == ("effect_unrecorded", "record_failed")
    assert stuck.effect["refund_id"] == gateway_refund.refund_id
    assert gateway_refund.refund_id in preview.failure_reason
    assert not Refund.objects.exists()
    record = AuditRecord.objects.filter(preview=preview, event="execution_transition").last()
    assert record.result["outcome"] == "effect_unrecorded"
    assert record.result["effect"]["refund_id"] == gateway_refund.refund_id
    message = preview_message(preview, base_url="http://testserver")
    assert "nothing was done" not in message.lower() and "will not be done again" in message

    # Neither the sweeper nor the resolver runs it again by itself.
    published = []
    monkeypatch.setattr(sweeps, "execution_dispatch", lambda preview_id: published.append(preview_id) or True)
    executions_dispatch_stalled(older_than_seconds=0)
    sweeps.executions_resolve_unknown(older_than_seconds=0)
    assert published == []
    monkeypatch.undo()

    page = logged_in(reviewer).get(f"/console/previews/{preview.pk}/").content.decode()
    assert gateway_refund.refund_id in page and "Record the effect again" in page

    # Staff mend the order, then record it: once, with the provider's refund, nothing asked again.
    Order.objects.filter(pk=o12.pk).update(refunded_minor=0)
    with django_capture_on_commit_callbacks(execute=True):
        execution_retry(preview_id=preview.pk, staff=reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Refund.objects.get().gateway_refund_id == gateway_refund.refund_id
    assert LocalGatewayRefund.objects.count() == 1
    assert Order.objects.get(pk=o12.pk).refunded_minor == 500


# Wording -------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["pending", "in_progress", "effect_unknown", "effect_unrecorded", "needs_attention"])
def test_no_wording_claims_nothing_was_done_where_the_outcome_does_not_prove_it(state):
    wording = STATE_WORDING[state]
    for text in (wording.agent, wording.customer, wording.staff):
        assert "nothing was done" not in text.lower() and "nothing moved" not in text.lower()


@pytest.mark.parametrize(
    "state", ["refused_before_effect", "failed_after_check", "declined", "rejected", "expired", "superseded"]
)
def test_where_the_outcome_proves_it_the_agent_is_told_nothing_was_done(state):
    assert "nothing was done" in STATE_WORDING[state].agent


# Small defects -------------------------------------------------------------------------------


def test_the_expiry_sweep_works_in_small_transactions(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    previews = [make_preview(alice_agent, amount_minor=n) for n in (10, 20, 30, 40, 50)]
    Preview.objects.filter(pk__in=[p.pk for p in previews]).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert previews_expire_stale(batch_size=2) == 5

    assert set(Preview.objects.values_list("status", flat=True)) == {PreviewStatus.EXPIRED}
    assert AuditRecord.objects.filter(event="expired").count() == 5


def test_a_rejected_preview_says_so_once(alice, alice_agent, o12):
    preview = make_preview(alice_agent)
    Preview.objects.filter(pk=preview.pk).update(
        status=PreviewStatus.REJECTED, failure_code="rejected", failure_reason="Not our policy."
    )
    page = logged_in(alice).get(f"/previews/{preview.pk}/").content.decode()
    assert page.count("Rejected by") == 1
    staff_page = logged_in(make_reviewer("rita")).get(f"/console/previews/{preview.pk}/").content.decode()
    assert staff_page.count("Rejected") == 1 and "Note from the reviewer: Not our policy." in staff_page
    assert "Note from our support team: Not our policy." in page
    assert events(preview) == ["proposed"]
