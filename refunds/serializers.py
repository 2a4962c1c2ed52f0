from datetime import date
from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import serializers

from approvals.plugin import (
    MAX_SAFE_MINOR,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
    SubjectIdField,
    amount_in_flight,
    is_known_currency,
)

from .models import Order, OrderStatus
from .policy import RefundReason


class RefundOrderArguments(StrictSerializer):
    """What the agent may send. No currency: it comes from the order. No defaults."""

    order_id = StrictCharField(max_length=64, help_text="The order's id as the customer sees it, e.g. o-12.")
    amount_minor = StrictIntegerField(
        min_value=0,
        max_value=MAX_SAFE_MINOR,
        help_text="Amount to refund in the order currency's minor unit (cents for EUR/USD, yen for JPY).",
    )
    reason = StrictChoiceField(
        choices=list(RefundReason.ALL),
        help_text="damaged: arrived damaged; late: delivered more than 7 days after the order; "
        "unwanted: the customer no longer wants it.",
    )


class OrderImportSerializer(StrictSerializer):
    id = SubjectIdField()
    customer = StrictCharField(max_length=150)
    currency = StrictCharField(min_length=3, max_length=3)
    total_minor = StrictIntegerField(min_value=0, max_value=MAX_SAFE_MINOR)
    refunded_minor = StrictIntegerField(min_value=0, max_value=MAX_SAFE_MINOR, required=False, default=0)
    status = StrictChoiceField(choices=OrderStatus.choices)
    placed_at = serializers.DateField()
    delivered_at = serializers.DateField(required=False, allow_null=True, default=None)
    payment_ref = StrictCharField(max_length=255, required=False, allow_blank=True, default="")

    def validate_currency(self, value: str) -> str:
        if not is_known_currency(value):
            raise serializers.ValidationError(f"{value!r} is not an ISO 4217 currency code.")
        return value

    def validate_customer(self, value: str) -> str:
        known = self.context.get("usernames", set())
        if value not in known and not get_user_model().objects.filter(username=value).exists():
            raise serializers.ValidationError(f"No customer {value!r} in the file or the database.")
        return value

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if data["refunded_minor"] > data["total_minor"]:
            raise serializers.ValidationError({"refunded_minor": "Cannot exceed total_minor."})
        delivered: date | None = data["delivered_at"]
        if data["status"] == OrderStatus.DELIVERED and delivered is None:
            raise serializers.ValidationError({"delivered_at": "A delivered order needs its delivery date."})
        if data["status"] in (OrderStatus.PENDING, OrderStatus.SHIPPED) and delivered is not None:
            raise serializers.ValidationError({"delivered_at": "Only a delivered order has a delivery date."})
        if delivered is not None and delivered < data["placed_at"]:
            raise serializers.ValidationError({"delivered_at": "Cannot be before placed_at."})
        existing = Order.objects.filter(number=data["id"]).first()
        if existing is not None:
            ledger = sum(existing.refunds.values_list("amount_minor", flat=True))
            if data["refunded_minor"] < ledger:
                raise serializers.ValidationError(
                    {"refunded_minor": f"Cannot be below the {ledger} already refunded through the gateway."}
                )
            if ledger and data["currency"] != existing.currency:
                raise serializers.ValidationError({"currency": "Cannot change once refunds were made."})
            problem = refunded_beyond_total_problem(existing, data["refunded_minor"], data["total_minor"])
            if problem:
                raise serializers.ValidationError({"refunded_minor": problem})
        return data


def refunded_beyond_total_problem(order: Order, refunded_minor: int, total_minor: int) -> str:
    """Refunds being paid right now (possibly already at the provider) come on top of what an import
    says was refunded: together they may not pass the total."""
    in_flight = amount_in_flight(subject_type="order", subject_id=order.number)
    if in_flight and refunded_minor + in_flight > total_minor:
        return (
            f"{refunded_minor} plus the {in_flight} being refunded right now exceeds the total of {total_minor}; "
            "wait until those refunds are recorded."
        )
    return ""
