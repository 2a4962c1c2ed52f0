"""refund_order's subject through the engine (Action.subject_model = Order, by `number`, owned by
`customer`): a foreign order and a missing one get the one `order_unavailable`, and an order that
changed hands between the approval and the execution is refused as unavailable, with nothing paid."""

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Execution, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import events, propose
from tests.factories import OrderFactory


def test_a_foreign_order_and_a_missing_one_get_the_same_refusal(alice, bob, o12, alice_agent):
    OrderFactory(number="o-17", customer=bob, currency="EUR", total_minor=1000)

    foreign = propose(alice_agent, order_id="o-17", amount_minor=500, reason="damaged")
    missing = propose(alice_agent, order_id="o-99", amount_minor=500, reason="damaged")

    assert foreign.status_code == missing.status_code == 422
    for response, number in ((foreign, "o-17"), (missing, "o-99")):
        assert response.json()["error"] == {
            "code": "order_unavailable",
            "message": f"Order {number} is not available: no such order belongs to this customer.",
        }
    assert not Preview.objects.exists()
    refused = AuditRecord.objects.filter(event="proposal_refused").order_by("id")
    assert [r.result["error"]["code"] for r in refused] == ["order_unavailable", "order_unavailable"]


def test_an_order_given_to_another_customer_after_the_confirmation_is_not_refunded(
    alice, bob, o12, alice_agent, django_capture_on_commit_callbacks
):
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    # Only the owner changes: the version the preview was made against still matches.
    Order.objects.filter(pk=o12.pk).update(customer=bob)

    for callback in callbacks:
        callback()

    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "order_unavailable")
    assert preview.failure_reason == "Order o-12 is not available: no such order belongs to this customer."
    execution = Execution.objects.get(pk=preview.pk)
    assert (execution.outcome, execution.effect) == ("refused_before_effect", None)
    assert not Refund.objects.exists() and not LocalGatewayRefund.objects.exists()
    order = Order.objects.get(pk=o12.pk)
    assert (order.refunded_minor, order.version, order.customer_id) == (0, 1, bob.pk)
    assert events(preview) == ["proposed", "confirmed", "execution_failed"]
    failed = AuditRecord.objects.get(preview=preview, event="execution_failed")
    assert (failed.result["outcome"], failed.result["code"]) == ("refused_before_effect", "order_unavailable")
