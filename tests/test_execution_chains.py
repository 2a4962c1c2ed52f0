"""One preview is driven by one retry chain, even when the provider is slower than the stall threshold
and the sweeper runs all along (before the lease, it republished by how long a preview had been
approved, and a chain of time-outs and back-offs outlasted that: a second chain could start)."""

import pytest
from django.conf import settings

from approvals.core.services import executions_dispatch_stalled, preview_approve
from approvals.models import ApprovalRole, AuditRecord, Execution, Preview, PreviewStatus
from refunds.models import Order, Refund
from tests.workers import proposed_stripe_refund, publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_a_provider_slower_than_the_stall_threshold_with_retries_makes_one_chain_and_one_refund(transactional_db):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    fake, alice, preview, stripe_env = proposed_stripe_refund()
    worker_env = (
        *stripe_env,
        ("STRIPE_TIMEOUT_SECONDS", "1"),
        ("EXECUTION_LEASE_SECONDS", "5"),
        ("EXECUTION_STALL_SECONDS", "1"),
    )
    fake.fail_next(2, status=503)  # two attempts fail outright...
    fake.time_out_next(seconds=2.5)  # ...the third makes the refund and answers after the client gave up
    worker = start_worker(settings.REDIS_URL, *worker_env, name="chain")
    try:
        with publishing_to(settings.REDIS_URL):
            preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)

            def swept_and_done():
                executions_dispatch_stalled(older_than_seconds=1)  # the beat's sweeper, stall threshold 1 s
                return Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED

            executed = wait_for(swept_and_done, timeout=90, interval=0.3)
    finally:
        log = stop(worker)
        fake.stop()
    assert executed, log[-3000:]

    assert fake.refunds_created == 1
    assert Refund.objects.count() == 1
    assert Refund.objects.get().gateway_refund_id == fake.refunds[0]["id"]
    assert Order.objects.get(number="o-12").refunded_minor == 500
    starts = AuditRecord.objects.filter(preview=preview, event="execution_started").order_by("id")
    chain = [(s.result["attempt"], s.result["fencing_token"], s.result["took_over"]) for s in starts]
    assert chain == [(n, n, False) for n in range(1, len(chain) + 1)] and len(chain) == 4, chain
    assert not AuditRecord.objects.filter(preview=preview, event="execution_fenced_off").exists()
    assert Execution.objects.get(pk=preview.pk).outcome == "succeeded"
