"""Executions that need attention: an unknown effect is resolved (looked up first) with the same
preview and idempotency key and pays once; a policy failure cannot be retried."""

import pytest

from approvals.core.errors import TransientExecutionError
from approvals.core.services import execution_retry as preview_retry
from approvals.models import AuditEvent, AuditRecord, Preview, PreviewStatus
from approvals.tasks import MAX_EXECUTION_RETRIES, execute_preview
from refunds.gateways import LocalGateway
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import execution_callbacks

from .conftest import confirmed, logged_in, proposed
from .test_decisions import approve
from .test_queue import text


def retry(client, preview):
    return client.post(f"/console/previews/{preview.pk}/retry")


def test_an_unknown_effect_is_resolved_from_the_console_and_pays_once(
    big_order, reviewer, reviewer_client, second_reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    preview = confirmed(proposed(big_order.customer, "o-77", 12000))
    calls = []

    def unavailable(self, **kwargs):
        calls.append(kwargs)
        raise TransientExecutionError("the payment provider timed out")

    monkeypatch.setattr(LocalGateway, "refund", unavailable)
    with django_capture_on_commit_callbacks(execute=True):
        assert approve(logged_in(second_reviewer), preview).status_code == 302

    preview.refresh_from_db()
    # A time-out may come after the provider acted: the effect is unknown, never "nothing was done".
    assert (preview.status, preview.failure_code) == (PreviewStatus.NEEDS_ATTENTION, "effect_unknown")
    assert preview.execution.outcome == "effect_unknown"
    assert len(calls) == MAX_EXECUTION_RETRIES + 1
    assert {c["idempotency_key"] for c in calls} == {f"refund:{preview.pk}"}
    assert Refund.objects.count() == 0 and LocalGatewayRefund.objects.count() == 0
    attempts = AuditRecord.objects.filter(preview=preview, event=AuditEvent.EXECUTION_ATTEMPT_FAILED)
    assert [r.result["attempt"] for r in attempts] == list(range(1, MAX_EXECUTION_RETRIES + 2))

    failures = text(reviewer_client.get("/console/failures/").content.decode())
    assert "Refund €120.00 on o-77 for customer “alice”, damaged" in failures
    assert "effect_unknown" in failures and "the payment provider timed out" in failures
    assert "nothing was done" not in failures.lower()
    assert "Open Refund €120.00" in reviewer_client.get("/console/failures/").content.decode()
    detail = text(reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode())
    assert "Look up and resolve" in detail and "never made twice" in detail

    monkeypatch.undo()  # the provider is back
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = retry(reviewer_client, preview)
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{preview.pk}/"
    assert len(execution_callbacks(callbacks)) == 1

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    refund = Refund.objects.get()
    gateway_refund = LocalGatewayRefund.objects.get()
    assert refund.preview_id == preview.pk and refund.amount_minor == 12000
    assert gateway_refund.idempotency_key == f"refund:{preview.pk}"
    assert refund.gateway_refund_id == gateway_refund.refund_id
    assert Order.objects.get(pk=big_order.pk).refunded_minor == 12000
    retried = AuditRecord.objects.get(preview=preview, event=AuditEvent.RETRIED)
    assert retried.actor == reviewer and retried.result["previous"]["outcome"] == "effect_unknown"

    # Once more, from the console or the worker: still one refund.
    assert retry(reviewer_client, preview).status_code == 409
    execute_preview.delay(str(preview.pk))
    assert Refund.objects.count() == 1 and LocalGatewayRefund.objects.count() == 1

    page = text(reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode())
    assert "Execution Attempt Failed" in page and "Retried" in page and refund.gateway_refund_id in page
    assert "looking the effect up first" in page


def test_a_policy_failure_cannot_be_retried(
    awaiting_staff, big_order, reviewer_client, second_reviewer, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        assert approve(logged_in(second_reviewer), awaiting_staff).status_code == 302
    # The order was cancelled before the worker ran (without a version bump, so the policy catches it).
    Order.objects.filter(pk=big_order.pk).update(status="cancelled")
    execute_preview.delay(str(awaiting_staff.pk))
    preview = Preview.objects.get(pk=awaiting_staff.pk)
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "order_not_refundable")

    failures = reviewer_client.get("/console/failures/").content.decode()
    assert "order_not_refundable" in failures and "Needs a new proposal" in failures
    assert f"/console/previews/{preview.pk}/retry" not in failures

    response = retry(reviewer_client, preview)
    assert response.status_code == 409
    assert "needs a new proposal" in response.content.decode()
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.FAILED
    assert Refund.objects.count() == 0
    refused = AuditRecord.objects.get(preview=preview, event=AuditEvent.DECISION_REFUSED)
    assert refused.result["error"]["code"] == "not_needing_attention"


@pytest.mark.parametrize("status", [PreviewStatus.AWAITING_STAFF, PreviewStatus.EXECUTED, PreviewStatus.REJECTED])
def test_only_executions_that_need_attention_can_be_retried(status, awaiting_staff, reviewer):
    from approvals.core.errors import DecisionError

    Preview.objects.filter(pk=awaiting_staff.pk).update(status=status, failure_code="retries_exhausted")
    with pytest.raises(DecisionError) as refused:
        preview_retry(preview_id=awaiting_staff.pk, staff=reviewer)
    assert refused.value.code == "not_needing_attention"
    assert Preview.objects.get(pk=awaiting_staff.pk).status == status


def test_no_retry_while_the_agent_proposed_the_same_refund_again(failed_transient, reviewer_client):
    """Running the failed preview and a new twin of it could pay twice: the new one is decided instead."""
    twin = proposed(failed_transient.actor, "o-77", 12000)
    assert twin.pk != failed_transient.pk and twin.proposal_key == failed_transient.proposal_key

    response = retry(reviewer_client, failed_transient)
    assert response.status_code == 409
    assert "A newer preview of the same proposal is open" in response.content.decode()
    assert Preview.objects.get(pk=failed_transient.pk).status == PreviewStatus.NEEDS_ATTENTION
    assert Refund.objects.count() == 0
