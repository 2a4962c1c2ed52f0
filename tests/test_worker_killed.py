"""A worker process killed (SIGKILL) while it holds an execution's lease: the redelivered task finds
the lease taken, the lease expires, the sweeper publishes a takeover, and another worker (with a new
fencing token) looks the refund up and records it: the provider holds exactly one refund."""

import os
import signal

import pytest
from django.conf import settings

from approvals.core.services import executions_dispatch_stalled, preview_approve
from approvals.models import ApprovalRole, AuditRecord, Execution, Preview, PreviewStatus
from refunds.models import Order, Refund
from tests.workers import proposed_stripe_refund, publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_a_worker_killed_holding_the_lease_is_taken_over_after_it_expires_and_pays_once(transactional_db):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    fake, alice, preview, stripe_env = proposed_stripe_refund()
    worker_env = (
        *stripe_env,
        ("STRIPE_TIMEOUT_SECONDS", "30"),
        ("CELERY_VISIBILITY_TIMEOUT", "2"),
        ("CELERY_UNACKED_RESTORE_INTERVAL", "1"),
        ("CELERY_UNACKED_RESTORE_THROTTLE", "1"),
        # Shorter than the provider's time-out only so that the test need not wait: a real lease outlasts it.
        ("EXECUTION_LEASE_SECONDS", "4"),
    )
    # The provider records the refund, then holds its answer: the worker is inside the commit.
    fake.time_out_next(seconds=25)
    first = start_worker(settings.REDIS_URL, *worker_env, name="doomed")
    second = None
    try:
        with publishing_to(settings.REDIS_URL):
            preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
            assert wait_for(lambda: fake.refunds_created == 1, timeout=60), stop(first)[-3000:]
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
            assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.APPROVED
            held = Execution.objects.get(pk=preview.pk)
            assert (held.outcome, held.fencing_token) == ("in_progress", 1) and "doomed" in held.lease_owner
            assert not Refund.objects.exists()

            second = start_worker(settings.REDIS_URL, *worker_env, name="survivor")

            def swept_and_executed():
                executions_dispatch_stalled()  # the beat's sweeper: only an expired lease is taken over
                return wait_for(lambda: Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED, timeout=3)

            executed = wait_for(swept_and_executed, timeout=90, interval=0.5)
    finally:
        log = stop(second) if second else ""
        fake.stop()
    assert executed, log[-3000:]
    assert fake.refunds_created == 1
    keys = {request.idempotency_key for request in fake.refund_requests()}
    assert keys == {f"refund:{preview.pk}"}
    assert len(fake.refund_requests()) == 1  # the taker looked the refund up instead of asking again
    assert any(r.method == "GET" for r in fake.requests)
    execution = Execution.objects.get(pk=preview.pk)
    assert (execution.outcome, execution.fencing_token) == ("succeeded", 2)
    starts = AuditRecord.objects.filter(preview=preview, event="execution_started").order_by("id")
    assert [(s.result["fencing_token"], s.result["took_over"], s.result["look_up_first"]) for s in starts] == [
        (1, False, False),
        (2, True, True),
    ]
    assert "survivor" in starts[1].result["lease_owner"]
    refund = Refund.objects.get()
    assert refund.gateway_refund_id == fake.refunds[0]["id"]
    assert Order.objects.get(number="o-12").refunded_minor == 500
