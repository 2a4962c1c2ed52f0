"""`refund_order`, plugged into the approvals engine."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from approvals.errors import PolicyRefusal
from approvals.models import ApprovalRole, Preview
from approvals.money import format_minor
from approvals.registry import Action, DisplayRow, Proposal

from .models import Order
from .policy import order_unavailable, refund_policy_check
from .serializers import RefundOrderArguments
from .services import refund_commit

REASON_WORDS = {"damaged": "Arrived damaged", "late": "Delivered late", "unwanted": "No longer wanted"}


def staff_review_required(amount_minor: int, currency: str) -> bool:
    threshold = settings.STAFF_REVIEW_THRESHOLDS.get(currency)
    return threshold is not None and amount_minor > threshold


class RefundOrderAction(Action):
    name = "refund_order"
    description = (
        "Propose a partial or full refund of one of the signed-in customer's orders. "
        "Amounts are integers in the minor unit of the order's currency; the currency is "
        "always the order's own. This only creates a preview: nothing is refunded until the "
        "customer confirms it (and staff approve it, above a threshold). Report the status "
        "this tool returns, not your own conclusion."
    )
    arguments_serializer = RefundOrderArguments

    def may_use(self, user: Any) -> bool:
        return bool(user.is_active)

    def propose(self, *, actor: Any, arguments: dict[str, Any]) -> Proposal:
        order = Order.objects.filter(number=arguments["order_id"], customer=actor).first()
        if order is None:
            raise order_unavailable(arguments["order_id"])
        refund_policy_check(order=order, amount_minor=arguments["amount_minor"], reason=arguments["reason"])
        required = [ApprovalRole.CUSTOMER.value]
        if staff_review_required(arguments["amount_minor"], order.currency):
            required.append(ApprovalRole.STAFF.value)
        return Proposal(
            subject_type="order",
            subject_id=order.number,
            subject_version=order.version,
            payload={
                "order_id": order.number,
                "amount_minor": arguments["amount_minor"],
                "currency": order.currency,
                "reason": arguments["reason"],
            },
            amount_minor=arguments["amount_minor"],
            currency=order.currency,
            required_approvals=required,
        )

    def lock_subject(self, preview: Preview) -> Order | None:
        return Order.objects.select_for_update().filter(number=preview.subject_id).first()

    def revalidate(self, *, preview: Preview, subject: Any) -> None:
        order: Order = subject
        if order.customer_id != preview.actor_id:
            raise order_unavailable(order.number)
        if order.currency != preview.currency:
            raise PolicyRefusal(
                f"Order {order.number} is in {order.currency}, the preview in {preview.currency}.",
                code="currency_mismatch",
            )
        refund_policy_check(order=order, amount_minor=preview.amount_minor, reason=preview.payload["reason"])

    def execute(self, *, preview: Preview, subject: Any) -> dict[str, Any]:
        return refund_commit(preview=preview, order=subject)

    def headline(self, preview: Preview) -> str:
        return f"Refund {format_minor(preview.amount_minor, preview.currency)} on order {preview.subject_id}"

    def display_rows(self, preview: Preview) -> list[DisplayRow]:
        reason = preview.payload["reason"]
        return [
            DisplayRow("Order", preview.subject_id),
            DisplayRow("Refund amount", format_minor(preview.amount_minor, preview.currency)),
            DisplayRow("Currency", preview.currency),
            DisplayRow("Reason", REASON_WORDS.get(reason, reason)),
        ]

    def consequence(self, preview: Preview) -> str:
        return (
            f"{format_minor(preview.amount_minor, preview.currency)} goes back to the payment method "
            f"used for order {preview.subject_id}. A refund cannot be undone once it is made."
        )

    def preview_fields(self, preview: Preview) -> dict[str, Any]:
        return {
            "order_id": preview.payload["order_id"],
            "amount_minor": preview.amount_minor,
            "currency": preview.currency,
            "reason": preview.payload["reason"],
        }

    def outcome_text(self, preview: Preview) -> str:
        refund_id = (preview.result or {}).get("refund_id", "")
        return (
            f"Refunded {format_minor(preview.amount_minor, preview.currency)} on order "
            f"{preview.subject_id} (refund reference {refund_id})."
        )
