"""The refund policy (seed 001): trusted order data decides, in this order, first failure wins."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.plugin import PolicyRefusal, RefusalCode, format_minor

from .models import Order, OrderStatus

LATE_MIN_DELIVERY_DAYS = 8  # `late` needs delivery more than 7 days after the order was placed


class RefundRefusal(RefusalCode):
    """The codes of refund_order's policy refusals (the agent API's `error.code`)."""

    ORDER_UNAVAILABLE = "order_unavailable"
    ORDER_NOT_REFUNDABLE = "order_not_refundable"
    ZERO_AMOUNT = "zero_amount"
    AMOUNT_EXCEEDS_REMAINING = "amount_exceeds_remaining"
    REASON_NOT_APPLICABLE = "reason_not_applicable"
    CURRENCY_MISMATCH = "currency_mismatch"
    COUNTER_AMOUNT_INVALID = "counter_amount_invalid"


class RefundReason:
    DAMAGED = "damaged"
    LATE = "late"
    UNWANTED = "unwanted"
    ALL = (DAMAGED, LATE, UNWANTED)


def _amount(amount_minor: int, currency: str) -> str:
    """As a person reads it and as the minor units the tool takes: `€24.99 (2499)`."""
    return f"{format_minor(amount_minor, currency)} ({amount_minor})"


@dataclass(frozen=True)
class RuleCheck:
    rule: str
    passed: bool
    detail: str


#: refund_order's refusal of an order the actor may not refund (Action.subject_unavailable): the same
#: words whether the order is someone else's or does not exist at all.
ORDER_UNAVAILABLE_MESSAGE = "Order {subject_id} is not available: no such order belongs to this customer."


def refund_policy_checks(
    *, order: Order, amount_minor: int, reason: str, in_flight_minor: int = 0
) -> list[tuple[RuleCheck, PolicyRefusal | None]]:
    """Rules 2-5 against an order the actor owns, each with the refusal it would give.

    `in_flight_minor` is what refunds being paid right now will take from the order.
    """
    remaining = order.remaining_minor - in_flight_minor
    days = order.delivery_days
    checks: list[tuple[RuleCheck, PolicyRefusal | None]] = []

    refundable = order.status == OrderStatus.DELIVERED
    checks.append(
        (
            RuleCheck("order_refundable", refundable, f"Order status is {order.status}; only delivered is refundable."),
            None
            if refundable
            else PolicyRefusal(
                f"Order {order.number} is {order.status}; only delivered orders can be refunded.",
                code=RefundRefusal.ORDER_NOT_REFUNDABLE,
                order_status=order.status,
            ),
        )
    )
    nonzero = amount_minor != 0
    checks.append(
        (
            RuleCheck("amount_not_zero", nonzero, f"Amount is {amount_minor}."),
            None
            if nonzero
            else PolicyRefusal(
                f"A refund of 0 on {order.number} would do nothing; propose an amount of at least 1 "
                f"in minor units of {order.currency}.",
                code=RefundRefusal.ZERO_AMOUNT,
            ),
        )
    )
    within = amount_minor <= remaining
    checks.append(
        (
            RuleCheck(
                "amount_within_remaining",
                within,
                f"Amount {amount_minor} against {remaining} remaining ({order.total_minor} total, "
                f"{order.refunded_minor} refunded"
                + (f", {in_flight_minor} being refunded now" if in_flight_minor else "")
                + ").",
            ),
            None
            if within
            else PolicyRefusal(
                f"Refund of {_amount(amount_minor, order.currency)} exceeds the "
                f"{_amount(remaining, order.currency)} remaining on {order.number}",
                code=RefundRefusal.AMOUNT_EXCEEDS_REMAINING,
                remaining_minor=remaining,
            ),
        )
    )
    if reason == RefundReason.LATE:
        late = days is not None and days >= LATE_MIN_DELIVERY_DAYS
        checks.append(
            (
                RuleCheck("reason_applies", late, f"Delivered {days} days after the order was placed."),
                None
                if late
                else PolicyRefusal(
                    f"Reason late needs delivery more than 7 days after the order was placed; "
                    f"{order.number} was delivered {days} days after it was placed.",
                    code=RefundRefusal.REASON_NOT_APPLICABLE,
                    delivery_days=days,
                ),
            )
        )
    else:
        checks.append((RuleCheck("reason_applies", True, f"Reason {reason} needs no dates."), None))
    return checks


def refund_policy_check(*, order: Order, amount_minor: int, reason: str, in_flight_minor: int = 0) -> None:
    """Raise the first rule's refusal; return when the refund is allowed."""
    checks = refund_policy_checks(
        order=order, amount_minor=amount_minor, reason=reason, in_flight_minor=in_flight_minor
    )
    for _check, refusal in checks:
        if refusal is not None:
            raise refusal
